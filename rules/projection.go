package rules

import (
	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/fieldpath"
)

// The projection of a rule says which parts of the
// objects it matches it reads, so that the watcher's cache can keep only
// those (see change.Projection for what the watcher keeps anyway).
//
// A rule needs everything (Full) when it has no fields (any change of the
// object fires it and shows in its changes), when it has includeObject, or
// when it keeps states (history: {states: true}), or
// when its when expression uses object or oldObject other than through a
// chain of constant field selections (object.spec.size, object["spec"]).
// Otherwise it needs its fields' paths, each truncated at its first list
// selector ([n], [*], [key=value] keep the whole list field), and the
// selection chains of its when expression; a rule that reads the
// comparison of a CRD change (crd) needs the CRD's spec and
// status.storedVersions. Redact and ignoreFields paths
// need nothing: what is not kept cannot leak nor change.
//
// What payloads redact (a Secret's data, stringData and last-applied
// annotation, a rule's redact paths) is Hashed: the restart baseline
// stores a hash of those values, never the values.

// Projection returns the union of the projections of the rules that match
// res (Paths sorted, none below another). With no rule matching, it is
// empty (not Full). It is Full for the custom resources of the CRDs a
// rule with crd: {impact: true} matches: the impact of a CRD change is
// computed from those objects as they were before it.
func (s *Set) Projection(res change.Resource) change.Projection {
	var p change.Projection
	rules := s.RulesFor(res)
	for _, r := range rules {
		p = p.Union(r.projection)
	}
	if len(rules) > 0 && isSecret(res.Group, res.Resource) {
		p = p.Union(change.Projection{Hashed: secretHashed})
	}
	if s.impactCovers(res) {
		p = p.Union(change.Projection{Full: true})
	}
	return p.Minimal()
}

// secretHashed are the Hashed paths of Secrets: what secretRedact
// redacts.
var secretHashed = hashedPaths(secretRedact)

// hashedPaths turns redact paths into Hashed paths: field names kept,
// every list selector ([n], [*], [key=value]) a change.AnyKey.
func hashedPaths(paths []*fieldPath) [][]string {
	var out [][]string
	for _, p := range paths {
		h := make([]string, len(p.segs))
		for i, s := range p.segs {
			h[i] = change.AnyKey
			if s.Kind == fieldpath.Field {
				h[i] = s.Name
			}
		}
		out = append(out, h)
	}
	return out
}

// compileProjection computes r.projection from its compiled parts.
func (r *Rule) compileProjection() {
	hashed := hashedPaths(r.redact)
	whens := []*celExpr{r.when}
	for _, a := range r.Actions {
		whens = append(whens, a.when)
	}
	full := len(r.fields) == 0 || r.IncludeObject || r.States
	for _, w := range whens {
		full = full || (w != nil && w.full)
	}
	if full {
		r.projection = change.Projection{Full: true, Hashed: hashed}.Minimal()
		return
	}
	var paths [][]string
	for _, f := range r.fields {
		paths = append(paths, f.path.prefix())
	}
	for _, w := range whens {
		if w != nil {
			paths = append(paths, w.paths...)
		}
	}
	if r.crd != crdNone {
		paths = append(paths, crdProjection...)
	}
	r.projection = change.Projection{Paths: paths, Hashed: hashed}.Minimal()
}
