// Package change is the vocabulary the watcher and the rules share: what
// happened to an object (Type), how it was seen (Observed: one write, or
// the net effect of several), which resource it belongs to (Resource),
// which resources a rule or the watcher selects (Selector; a wildcard never
// covers core Secrets), which parts of their objects are read and
// therefore cached, and which are stored only as hashes (Projection), and
// the digest
// of a managedFields field set that the watcher's cache keeps in place of
// the field set (FieldsHash).
//
// Everything here is plain strings, so that both sides use it directly,
// without conversions. change must not import k8s.io packages nor any
// other fieldwatch package: rules.TestNoClientGo keeps it so.
package change
