package rules

import (
	"fmt"
	"sync"

	"github.com/fieldwatch/fieldwatch/change"
)

// Set is a compiled rules file (or several merged): what Load and Parse
// return. It is immutable and safe for concurrent use. Rules are compiled
// once (paths, CEL programs, templates, each rule's Projection). Eval's
// triggers, diff, redaction and payload cost time linear in the size of
// the change's objects, however many keys or list items a [*] selects
// (locTree); a when expression is bounded by CostLimit.
//
// Rules that match CustomResourceDefinitions only can read the comparison
// of the old and the new CRD (crd.go): the CEL variable crd, and the
// payload's crd field for rules with the crd key or whose when reads crd.
// crd: {impact: true} asks for the custom resources the breaking checks
// hit; Eval lists no objects, so its caller computes that (WantsCRDImpact
// says when, Change.CRD carries it). Such rules make Selectors include the
// custom resources of the CRDs they match, cached whole (Projection) in
// every namespace (Namespaces).
type Set struct {
	rules  []*Rule
	byName map[string]*Rule
	// impactRules are the rules with crd: {impact: true}.
	impactRules []*Rule

	// cache maps a Resource to the rules that match it ([]*Rule): Eval
	// reads it without locking; a miss adds the resource without copying
	// the others, since a start with thousands of resources adds them one
	// by one (`make bench -sections crds` measures such a start).
	cache sync.Map
}

func newSet(rules []*Rule) *Set {
	s := &Set{rules: rules, byName: make(map[string]*Rule, len(rules))}
	for _, r := range rules {
		s.byName[r.Name] = r
		if r.crd == crdImpact {
			s.impactRules = append(s.impactRules, r)
		}
	}
	return s
}

// Rules returns the rules in file order (files in the order given to
// Load). The slice must not be changed.
func (s *Set) Rules() []*Rule { return s.rules }

// Rule returns the rule named name, or nil.
func (s *Set) Rule(name string) *Rule { return s.byName[name] }

// Selectors returns the union of the resource selectors of all rules, each
// once, in rule order: the resources the watcher must resolve through
// discovery and watch. Rules with crd: {impact: true} add the custom
// resources of the CRDs they match (see Projection), which no rule
// matches: their changes fire nothing.
func (s *Set) Selectors() []change.Selector {
	var out []change.Selector
	seen := map[change.Selector]bool{}
	add := func(sel change.Selector) {
		if !seen[sel] {
			seen[sel] = true
			out = append(out, sel)
		}
	}
	for _, r := range s.rules {
		for _, sel := range r.Selectors {
			add(sel)
		}
	}
	for _, r := range s.impactRules {
		for _, sel := range r.ImpactSelectors() {
			add(sel)
		}
	}
	return out
}

// UsesAttribution returns the names of the rules that need the audit
// stream to know who made a change (Rule.UsesAttribution), in rule order.
func (s *Set) UsesAttribution() []string {
	var names []string
	for _, r := range s.rules {
		if r.UsesAttribution() {
			names = append(names, r.Name)
		}
	}
	return names
}

// RulesFor returns the rules whose selectors match res, in rule order.
// The result is cached per Resource; the slice must not be changed.
func (s *Set) RulesFor(res change.Resource) []*Rule {
	if rules, ok := s.cache.Load(res); ok {
		return rules.([]*Rule)
	}
	var rules []*Rule
	for _, r := range s.rules {
		if r.Matches(res) {
			rules = append(rules, r)
		}
	}
	got, _ := s.cache.LoadOrStore(res, rules)
	return got.([]*Rule)
}

// evalState is what the rules evaluated on one change share: computed at
// most once, when the first rule needs it.
type evalState struct {
	c        *Change
	ns, name string
	fullDone bool
	full     []patchOp // every change but noise
	// ignored holds the changes of rules with ignoreFields, by their
	// ignoreKey: rules that ignore the same paths share them.
	ignored map[string][]patchOp
	vars    *celVars
	crd     crdState
}

// updateDiff returns the changes of an update for a rule without fields:
// everything but noise and the rule's ignoreFields. The diff skips the
// ignored subtrees (a Node's status, say) instead of comparing them.
func (st *evalState) updateDiff(r *Rule) []patchOp {
	if len(r.ignore) == 0 {
		if !st.fullDone {
			st.full = diffObjects(st.c.Old, st.c.New, noisePruner)
			st.fullDone = true
		}
		return st.full
	}
	if ops, ok := st.ignored[r.ignoreKey]; ok {
		return ops
	}
	ops := diffObjects(st.c.Old, st.c.New, r.pruner(st.c))
	if st.ignored == nil {
		st.ignored = map[string][]patchOp{}
	}
	st.ignored[r.ignoreKey] = ops
	return ops
}

// Eval evaluates c against every rule that matches c.Resource and returns
// the firings of those that fire, in rule order, with their payloads. Errors
// are evaluation errors to log (a when expression failing at runtime, a
// payload that cannot be encoded, a malformed change): the rule concerned
// does not fire, the others are not affected. Eval is safe for concurrent
// use and never changes c's maps.
func (s *Set) Eval(c *Change) ([]Firing, []error) {
	rules := s.RulesFor(c.Resource)
	if len(rules) == 0 {
		return nil, nil
	}
	if err := checkChange(c); err != nil {
		return nil, []error{err}
	}
	bit := changeBit(c.Type)
	st := evalState{c: c}
	meta := c.meta()
	st.ns, st.name = metaString(meta, "namespace"), metaString(meta, "name")
	var firings []Firing
	var errs []error
	for _, r := range rules {
		if r.on&bit == 0 || !r.filter.matches(c, st.ns, st.name) || !r.users.allows(c.Attribution) {
			continue
		}
		ops, fired, err := r.eval(&st)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !fired {
			continue
		}
		f, err := r.firing(&st, ops)
		if err != nil {
			errs = append(errs, fmt.Errorf("rule %s: payload: %w", r.Name, err))
			continue
		}
		if r.routed() {
			var rerrs []error
			f.Skipped, rerrs = r.route(&st)
			errs = append(errs, rerrs...)
		}
		firings = append(firings, f)
	}
	return firings, errs
}

// checkChange rejects changes that lack the objects their type needs.
func checkChange(c *Change) error {
	switch c.Type {
	case change.Created:
		if c.New == nil {
			return fmt.Errorf("created change without object")
		}
	case change.Updated:
		if c.New == nil || c.Old == nil {
			return fmt.Errorf("updated change without object or oldObject")
		}
	case change.Deleted:
		if c.Old == nil {
			return fmt.Errorf("deleted change without oldObject")
		}
	default:
		return fmt.Errorf("unknown change type %q", c.Type)
	}
	return nil
}

// eval decides whether r fires on st.c (whose type and object r already
// matched) and returns its changes when it does.
//
// Order, cheapest first: field triggers (plain value comparisons), then
// for a rule without fields the update's changes (an update with none
// left after noise and ignoreFields does not fire), then the when
// expression, then the changes of a rule with fields (which must not be
// empty either: ignoreFields may leave nothing).
func (r *Rule) eval(st *evalState) (ops []patchOp, fired bool, err error) {
	c := st.c
	haveOps := false
	if len(r.fields) > 0 {
		for _, f := range r.fields {
			if f.fires(c.Type, c.Old, c.New) {
				fired = true
				break
			}
		}
		if !fired {
			return nil, false, nil
		}
	} else if c.Type == change.Updated {
		ops, haveOps = r.changes(st), true
		if len(ops) == 0 {
			return nil, false, nil
		}
	}
	if r.crd != crdNone {
		v, err := st.crdView(r.crd == crdImpact, r.crdPolicy)
		if err != nil {
			return nil, false, fmt.Errorf("rule %s: crd: %w", r.Name, err)
		}
		if r.when != nil && r.when.usesCRD {
			if st.vars == nil {
				st.vars = newCELVars(c)
			}
			if st.vars.crd, err = v.celValue(); err != nil {
				return nil, false, fmt.Errorf("rule %s: crd: %w", r.Name, err)
			}
		}
	}
	if r.when != nil {
		if st.vars == nil {
			st.vars = newCELVars(c)
		}
		ok, err := r.when.eval(st.vars)
		if err != nil {
			if len(r.redact) > 0 || isSecret(c.Resource.Group, c.Resource.Resource) {
				// CEL quotes values in its errors (no such key: <a
				// value used as a key>): for objects whose values are
				// redacted, say the class of error only.
				return nil, false, fmt.Errorf("rule %s: when: %s", r.Name, celErrorClass(err))
			}
			return nil, false, fmt.Errorf("rule %s: when: %w", r.Name, err)
		}
		if !ok {
			return nil, false, nil
		}
	}
	if !haveOps {
		ops = r.changes(st)
		if c.Type == change.Updated && len(ops) == 0 {
			return nil, false, nil
		}
	}
	return ops, true, nil
}
