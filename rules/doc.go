// Package rules loads fieldwatch's YAML rules files, compiles them once and
// evaluates changes against them: which rules fire on a change of an object,
// and the JSON payload each firing carries.
//
// The rules language (every key, its default, paths, CEL, templates, every
// action's options) is documented for users in docs/rules.md, the payload
// (every field, ids, order, redaction) in docs/payload.md, both in the
// repository; this package implements them, and its tests hold it to
// them (golden payloads under testdata/golden, every example of
// examples/).
//
// rules works on plain map[string]any objects so that it can be tested with
// JSON fixtures alone: it must not import k8s.io/client-go (directly or
// not), nor the watcher or action packages. It uses package change (the
// vocabulary it shares with the watcher: resources, selectors, projections,
// change types), package fileerr (its errors), gopkg.in/yaml.v3,
// github.com/google/cel-go and k8s.io/apimachinery/pkg/labels.
//
// # Using it
//
// Compile turns rules written as plain structs (File, RuleSpec and the
// action specs, with yaml and json tags) into a Set; every error comes back
// together (a fileerr.List), each with its field path:
//
//	rules[2].fields[0].path: message
//
// Load (or Parse) reads rules files (YAML, decoded strictly by
// internal/yamlstrict: unknown keys are errors) and compiles them, every
// error of every file placed where it was written, one per line:
//
//	FILE:LINE:COL: rules[2].fields[0].path: message
//
// A file with any error gives no Set (a running Set is never replaced by a
// broken one). Validate is Load for `fieldwatch validate`.
// Set.Selectors tells the watcher which resources to watch and
// Set.Projection which parts of their objects to cache; Set.Eval turns
// each observed Change into Firings (payload and actions) plus evaluation
// errors to log. Package internal/cases runs offline cases for `fieldwatch
// test`.
//
// # How it works
//
// Rules are compiled once: paths (parsed by internal/fieldpath, the one
// parser of the path syntax) into lists of segments walked without
// parsing (and, for paths without [*], without allocation), CEL
// expressions into programs, metered only when their cost could grow
// beyond linear; a rule also computes its Projection, the parts of the
// objects it reads. Eval takes the rules that match the change's resource
// (cached per resource), filters on the object (namespaces, names,
// labels), then runs the cheapest test first: field triggers, then the
// update's changes (computed once per change and shared by the rules that
// ignore the same fields), then the when expression, and builds a payload
// for each rule that fires, with a hand-written JSON encoder that
// FuzzAppendJSON holds to encoding/json's bytes. Eval never changes its
// input: redaction and ignored fields copy what they rewrite. The
// locations that fields, ignoreFields and redact select are kept as a
// tree of their tokens (locTree), so that the diff asks about each place
// at the cost of its depth and redaction rewrites a value in one pass:
// evaluation cost grows linearly with the object, however many keys or
// list items a [*] selects.
//
// # Projection
//
// Set.Projection tells the watcher which parts of a resource's objects the
// rules read; see change.Projection for what the watcher keeps anyway.
//
// # CRD changes
//
// Rules that match CustomResourceDefinitions only can read the comparison
// of the old and the new CRD (package crd/diff): the CEL variable crd
// (declared for those rules only), and the payload's crd field for rules
// with the crd key or whose when reads crd. crd: {impact: true} asks for
// the custom resources the breaking checks hit; Eval lists no objects, so
// its caller computes that (Set.WantsCRDImpact says when, Change.CRD
// carries it: `fieldwatch run` from the watcher's cache, internal/cases from
// a case's objects). Such rules make Set.Selectors include the custom
// resources of the CRDs they match (Rule.ImpactSelectors), cached whole
// (Set.Projection) in every namespace (Set.Namespaces). crd.go has the
// details.
//
// # Offline cases
//
// Package internal/cases reads cases files (changes and what must fire) and
// runs them against a Set: `fieldwatch test`.
package rules
