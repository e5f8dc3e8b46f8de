// Package rules loads fieldwatch's YAML rules files, compiles them once and
// evaluates changes against them: which rules fire on a change of an object,
// and the JSON payload each firing carries (DESIGN.md, "Rules file" and
// "Payload").
//
// rules works on plain map[string]any objects so that it can be tested with
// JSON fixtures alone: it must not import k8s.io/client-go (directly or
// not), nor the watcher or action packages.
package rules
