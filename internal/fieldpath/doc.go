// Package fieldpath is the syntax of fieldwatch's field paths, the one
// place that parses and writes them: Parse turns a path into its segments
// and Format writes the canonical text, which parses back to the same
// segments; Child, Item and Every extend a path.
//
//	segs, err := fieldpath.Parse(`spec.containers[name=web].image`)
//	p := fieldpath.Child("spec", "a.b") // spec["a.b"]
//
// The syntax:
//
//	spec.size                         map keys separated by dots
//	metadata.annotations["a.b/c"]     a quoted key: any characters ('single' quotes work too)
//	spec.containers[0].image          list item by index
//	spec.containers[*].image          every item of a list (or every value of a map)
//	spec.containers[name=web].image   the first list item whose key field equals the value
//	spec.ports[port=80]               unquoted values also match numbers and booleans by their text
//	spec.ports[name="80"]             quoted values match strings only
//
// docs/rules.md documents the syntax for users. Package rules compiles the
// paths of rules (fields, ignoreFields, redact) with Parse and walks
// objects along the segments; package crd/diff names the fields of its
// checks with Child and Every, and package crd/impact reads those names
// back with Parse; internal/yamlstrict names the fields of the errors it
// reports (rules[2].fields[0].path) with Child and Item.
//
// What a path selects in an object is for its user: rules matches
// [key=value] values against numbers by its own rules, crd/impact matches
// [*] against any key.
//
// The package is internal: no exported API of fieldwatch takes or returns a
// parsed path (paths travel as text), so its Go API can change with its
// users. It imports only the standard library (deps_test.go checks it), so
// that crd/diff and crd/impact, which use nothing else of fieldwatch, can
// use it.
package fieldpath
