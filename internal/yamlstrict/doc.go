// Package yamlstrict decodes YAML into Go structs strictly and reports
// every problem of a document in one pass, each with its line, column and
// field path (rules[2].fields[0].path). The loaders of rules files and
// cases files decode with it:
//
//	var f rules.File
//	pos, errs := yamlstrict.Unmarshal(data, &f)
//	for i := range errs {
//		errs[i].File = name // Unmarshal does not know the file
//	}
//	line, col := pos.At("rules[2].fields[0].path") // for an error found later
//
// It walks gopkg.in/yaml.v3 nodes itself instead of using yaml.Unmarshal so
// that it can (1) reject unknown keys with the field path and the key's
// position, (2) keep going after an error and (3) remember where each field
// was written (Positions), so that errors found after decoding, by code
// that knows nothing of YAML, still point at the line.
//
// YAML anchors, aliases and merge keys (<<: *base) work. What a document
// costs is bounded by its size: a document larger than MaxBytes, a key
// longer than MaxKeyBytes, aliases and merge keys that expand to more than
// MaxNodes values or to field paths adding up to more than 32 times the
// document's size (plus 1 MiB, at most 64 MiB) are errors, not an
// out-of-memory; positions are kept for what is written, not for what
// aliases expand to.
//
// Errors are fileerr.Errors without a file (the caller sets File), their
// field paths written in fieldwatch's path syntax (package
// internal/fieldpath): those two are the fieldwatch packages yamlstrict
// imports (deps_test.go checks it); otherwise it knows nothing of
// fieldwatch.
package yamlstrict
