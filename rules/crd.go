package rules

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/google/cel-go/common/types/ref"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/crd/diff"
)

// Rules that match CustomResourceDefinitions only can read the comparison
// of the old and the new CRD (package crd/diff): the crd key puts it
// into the payload, the CEL variable crd holds it, and crd: {impact: true}
// asks for the custom resources its breaking checks hit (package
// crd/impact), which the caller of Eval computes: rules lists no
// objects.
//
// What each change type carries: an update, the comparison of the two
// CRDs; a creation, the check crd-added (safe); a deletion, crd-removed
// (breaking: the apiserver deletes every object of the CRD before the CRD
// goes, and rules on those objects see each deletion). Only updates have
// an impact: a new CRD has no objects, a deleted one none left.

// crdState is the comparison of one CRD change, computed at most once per
// change however many rules read it, and its two views: without the
// impact (rules with crd: {}) and with it (crd: {impact: true}).
type crdState struct {
	done  bool
	base  *diff.Result
	err   error
	views map[crdViewKey]*crdView
}

// crdViewKey is one kind of rule's view: with or without the impact,
// under a crd block's policy or the default (nil).
type crdViewKey struct {
	impact bool
	policy *diff.Policy
}

// crdView is the comparison as one kind of rule sees it: its payload JSON
// and, once an expression reads it, its CEL value.
type crdView struct {
	res  *diff.Result
	json []byte
	val  ref.Val
}

// errNoImpact is the impactError of rules that ask for the impact when
// the caller of Eval did not compute it.
var errNoImpact = errors.New("the impact was not computed: no custom resources were given")

// crdView returns the comparison of st's change as rules with (impact) or
// without the impact, under policy (nil: the default), see it.
func (st *evalState) crdView(impact bool, policy *diff.Policy) (*crdView, error) {
	cs := &st.crd
	if !cs.done {
		cs.done = true
		cs.base, cs.err = compareCRD(st.c, nil)
	}
	if cs.err != nil {
		return nil, cs.err
	}
	key := crdViewKey{impact: impact, policy: policy}
	if v := cs.views[key]; v != nil {
		return v, nil
	}
	res := cs.base
	if policy != nil {
		applied := policy.Apply(res)
		if policy.NeedsCompare() {
			// The policy compares more (descriptions, served versions
			// with a webhook): compare again, and keep the impact the
			// caller computed for the default comparison.
			again, err := compareCRD(&Change{Type: st.c.Type, Old: st.c.Old, New: st.c.New}, policy)
			if err != nil {
				return nil, err
			}
			again.Impact, again.Scanned, again.ImpactError = applied.Impact, applied.Scanned, applied.ImpactError
			applied = again
		}
		res = applied
	}
	switch {
	case !impact:
		cp := *res
		cp.Impact, cp.Scanned, cp.ImpactError = []diff.Impact{}, 0, ""
		res = &cp
	case st.c.CRD == nil && st.c.Type == change.Updated:
		cp := *res
		cp.ImpactError = errNoImpact.Error()
		res = &cp
	}
	b, err := res.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	v := &crdView{res: res, json: b}
	if cs.views == nil {
		cs.views = map[crdViewKey]*crdView{}
	}
	cs.views[key] = v
	return v, nil
}

// celValue returns the view as a CEL value, converting it once.
func (v *crdView) celValue() (ref.Val, error) {
	if v.val == nil {
		m, err := v.res.Value()
		if err != nil {
			return nil, err
		}
		v.val = celValue(m)
	}
	return v.val, nil
}

// compareCRD compares the CRDs of a change: c.CRD when the caller computed
// it, else the comparison of the two objects of an update, crd-added for
// a creation and crd-removed for a deletion.
func compareCRD(c *Change, policy *diff.Policy) (*diff.Result, error) {
	if c.CRD != nil {
		return c.CRD, nil
	}
	var old, new = c.Old, c.New
	switch c.Type {
	case change.Created:
		crd, err := diff.FromMap(new)
		if err != nil {
			return nil, err
		}
		return policy.Apply(diff.Added(crd)), nil
	case change.Deleted:
		crd, err := diff.FromMap(old)
		if err != nil {
			return nil, err
		}
		return policy.Apply(diff.Removed(crd)), nil
	}
	oldCRD, err := diff.FromMap(old)
	if err != nil {
		return nil, fmt.Errorf("old object: %w", err)
	}
	newCRD, err := diff.FromMap(new)
	if err != nil {
		return nil, fmt.Errorf("new object: %w", err)
	}
	return diff.CompareWith(oldCRD, newCRD, policy), nil
}

// WantsCRDImpact reports whether a rule that may fire on c asks for the
// impact of a CRD change: c is an update of a CustomResourceDefinition and
// a rule with crd: {impact: true} matches it (resource, change type,
// object filter and, for a rule with fields, one of its field triggers).
// The caller then computes the comparison with its impact and sets
// c.CRD before Eval.
func (s *Set) WantsCRDImpact(c *Change) bool {
	if c.Type != change.Updated || c.New == nil || c.Old == nil {
		return false
	}
	meta := c.meta()
	ns, name := metaString(meta, "namespace"), metaString(meta, "name")
	for _, r := range s.RulesFor(c.Resource) {
		if r.crd != crdImpact || r.on&changeBit(c.Type) == 0 || !r.filter.matches(c, ns, name) {
			continue
		}
		if len(r.fields) == 0 {
			return true
		}
		for _, f := range r.fields {
			if f.fires(c.Type, c.Old, c.New) {
				return true
			}
		}
	}
	return false
}

// crdProjection is what the comparison reads of a CRD besides its
// identity: the spec and status.storedVersions.
var crdProjection = [][]string{{"spec"}, {"status", "storedVersions"}}

// ImpactSelectors returns, for a rule with crd: {impact: true}, the
// selectors of the custom resources whose objects it needs cached for the
// impact (Set.Selectors includes them): those of the CRDs its names name
// (plural.group), or every custom resource when it names none or uses
// globs. nil for other rules.
func (r *Rule) ImpactSelectors() []change.Selector {
	if r.crd != crdImpact {
		return nil
	}
	var out []change.Selector
	for _, n := range r.filter.names {
		plural, group, ok := strings.Cut(n, ".")
		if !ok || strings.ContainsAny(n, `*?[\`) {
			return []change.Selector{{Group: "*", Resource: "*", Custom: true}}
		}
		out = append(out, change.Selector{Group: group, Resource: plural, Custom: true})
	}
	if len(out) == 0 {
		return []change.Selector{{Group: "*", Resource: "*", Custom: true}}
	}
	return out
}

// coversForImpact reports whether r needs the objects of the custom
// resource res cached whole for the impact: r asks for it and its names
// (if any) match the name of res's CRD. Its label selector is not known
// here: any CRD might carry the labels.
func (r *Rule) coversForImpact(res change.Resource) bool {
	if r.crd != crdImpact || !res.Custom {
		return false
	}
	if len(r.filter.names) == 0 {
		return true
	}
	crdName := res.Resource + "." + res.Group
	for _, g := range r.filter.names {
		if ok, _ := path.Match(g, crdName); ok {
			return true
		}
	}
	return false
}

// impactCovers reports whether a rule of s needs the objects of res
// cached whole for the impact of CRD changes.
func (s *Set) impactCovers(res change.Resource) bool {
	for _, r := range s.impactRules {
		if r.coversForImpact(res) {
			return true
		}
	}
	return false
}
