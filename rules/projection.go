package rules

import "github.com/fieldwatch/fieldwatch/change"

// The projection of a rule says which parts of the
// objects it matches it reads, so that the watcher's cache can keep only
// those (see change.Projection for what the watcher keeps anyway).
//
// A rule needs everything (Full) when it has no fields (any change of the
// object fires it and shows in its changes), when it has includeObject, or
// when its when expression uses object or oldObject other than through a
// chain of constant field selections (object.spec.size, object["spec"]).
// Otherwise it needs its fields' paths, each truncated at its first list
// selector ([n], [*], [key=value] keep the whole list field), and the
// selection chains of its when expression; a rule that reads the
// comparison of a CRD change (crd) needs the CRD's spec and
// status.storedVersions. Redact and ignoreFields paths
// need nothing: what is not kept cannot leak nor change.

// Projection returns the union of the projections of the rules that match
// res (Paths sorted, none below another). With no rule matching, it is
// empty (not Full). It is Full for the custom resources of the CRDs a
// rule with crd: {impact: true} matches: the impact of a CRD change is
// computed from those objects as they were before it.
func (s *Set) Projection(res change.Resource) change.Projection {
	if s.impactCovers(res) {
		return change.Projection{Full: true}
	}
	var p change.Projection
	for _, r := range s.RulesFor(res) {
		p = p.Union(r.projection)
	}
	return p.Minimal()
}

// compileProjection computes r.projection from its compiled parts.
func (r *Rule) compileProjection() {
	if len(r.fields) == 0 || r.IncludeObject || (r.when != nil && r.when.full) {
		r.projection = change.Projection{Full: true}
		return
	}
	var paths [][]string
	for _, f := range r.fields {
		paths = append(paths, f.path.prefix())
	}
	if r.when != nil {
		paths = append(paths, r.when.paths...)
	}
	if r.crd != crdNone {
		paths = append(paths, crdProjection...)
	}
	r.projection = change.Projection{Paths: paths}.Minimal()
}
