package rules

import (
	"slices"
	"strings"
)

// Projection says which parts of the objects of a resource the rules
// read, so that the watcher's cache can keep only those. Full means
// everything; otherwise Paths are field-name prefixes ({"spec", "size"},
// {"spec", "parts"}) whose whole subtrees are needed.
//
// What Paths never list, because the watcher keeps it anyway for every
// object: apiVersion, kind and metadata name, namespace, uid,
// resourceVersion, generation, creationTimestamp, deletionTimestamp,
// labels and managedFields (the actor comes from managedFields).
//
// A rule needs everything (Full) when it has no fields (any change of the
// object fires it and shows in its changes), when it has includeObject, or
// when its when expression uses object or oldObject other than through a
// chain of constant field selections (object.spec.size, object["spec"]).
// Otherwise it needs its fields' paths, each truncated at its first list
// selector ([n], [*], [key=value] keep the whole list field), and the
// selection chains of its when expression. Redact and ignoreFields paths
// need nothing: what is not kept cannot leak nor change.
type Projection struct {
	Full  bool
	Paths [][]string
}

// Projection returns the union of the projections of the rules that match
// res (Paths sorted, none below another). With no rule matching, it is
// empty (not Full).
func (s *Set) Projection(res Resource) Projection {
	var paths [][]string
	for _, r := range s.RulesFor(res) {
		if r.projection.Full {
			return Projection{Full: true}
		}
		paths = append(paths, r.projection.Paths...)
	}
	return Projection{Paths: minimalPaths(paths)}
}

// Projection returns what r reads of the objects it matches.
func (r *Rule) Projection() Projection { return r.projection }

// compileProjection computes r.projection from its compiled parts.
func (r *Rule) compileProjection() {
	if len(r.fields) == 0 || r.IncludeObject || (r.when != nil && r.when.full) {
		r.projection = Projection{Full: true}
		return
	}
	var paths [][]string
	for _, f := range r.fields {
		paths = append(paths, f.path.prefix())
	}
	if r.when != nil {
		paths = append(paths, r.when.paths...)
	}
	r.projection = Projection{Paths: minimalPaths(paths)}
}

// minimalPaths sorts paths and drops duplicates and paths below another.
func minimalPaths(paths [][]string) [][]string {
	if len(paths) == 0 {
		return nil
	}
	sorted := slices.Clone(paths)
	slices.SortFunc(sorted, func(a, b []string) int {
		return slices.Compare(a, b)
	})
	out := sorted[:0:0]
	for _, p := range sorted {
		if len(out) > 0 && hasPrefix(p, out[len(out)-1]) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// String renders p for logs: "full" or "spec.size,status".
func (p Projection) String() string {
	if p.Full {
		return "full"
	}
	parts := make([]string, len(p.Paths))
	for i, path := range p.Paths {
		parts[i] = strings.Join(path, ".")
	}
	return strings.Join(parts, ",")
}
