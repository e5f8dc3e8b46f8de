// Package rules loads fieldwatch's YAML rules files, compiles them once and
// evaluates changes against them: which rules fire on a change of an
// object, and the JSON payload each firing carries.
//
// A program loads a rules file into a Set, asks it what to watch, and
// evaluates each observed change:
//
//	set, err := rules.Load("rules.yaml")
//	...
//	sels := set.Selectors()         // the resources to watch
//	proj := set.Projection(res)     // the parts of their objects the rules read
//	firings, errs := set.Eval(&rules.Change{Type: change.Updated, Resource: res, Old: old, New: cur, Time: now})
//	for _, f := range firings {
//		// f.Payload is the JSON payload, f.Rule.Actions what to run with it
//	}
//
// The rules language (every key, its default, paths, CEL, templates, every
// action's options) is documented for users in docs/rules.md, the payload
// (every field, ids, order, redaction) in docs/payload.md; this package
// implements them, and its tests hold it to them (golden payloads under
// testdata/golden, every example of examples/).
//
// Load and Parse read rules files (YAML, decoded strictly: unknown keys are
// errors); Compile takes rules written as plain structs (File, RuleSpec and
// the action specs, with yaml and json tags). Every error comes back
// together, a fileerr.List, each placed where it was written:
//
//	FILE:LINE:COL: rules[2].fields[0].path: message
//
// A file with any error gives no Set, so a running Set is never replaced by
// a broken one. Package action runs the firings' actions; package watcher
// observes the changes; package internal/cases runs offline cases for
// `fieldwatch test`.
//
// rules works on plain map[string]any objects, so that it can be tested
// with JSON fixtures alone: it must not import k8s.io/client-go (directly
// or not), nor the watcher or action packages (TestNoClientGo keeps it so).
// It uses package change (the vocabulary it shares with the watcher),
// payload (the type of the payloads it encodes), crd/diff (the comparison
// rules on CRDs read), fileerr (its errors),
// gopkg.in/yaml.v3, github.com/google/cel-go and
// k8s.io/apimachinery/pkg/labels.
package rules
