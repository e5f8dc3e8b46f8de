// Package yamlstrict decodes YAML into Go structs strictly and reports
// every problem of a document in one pass, each with its line, column and
// field path (rules[2].fields[0].path).
//
// It walks gopkg.in/yaml.v3 nodes itself instead of using yaml.Unmarshal so
// that it can (1) reject unknown keys with the field path and the key's
// position, (2) keep going after an error and (3) remember where each field
// was written (Positions), so that errors found after decoding, by code
// that knows nothing of YAML, still point at the line.
//
// YAML anchors, aliases and merge keys (<<: *base) work; aliases that
// expand to more than MaxNodes values are an error, not an out-of-memory.
//
// yamlstrict knows nothing of fieldwatch: it must not import other
// fieldwatch packages.
package yamlstrict
