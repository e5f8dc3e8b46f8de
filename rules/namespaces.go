package rules

import (
	"slices"

	"github.com/fieldwatch/fieldwatch/change"
)

// Namespaces returns the namespaces r is restricted to (match.namespaces),
// nil when it watches every namespace.
func (r *Rule) Namespaces() []string { return slices.Clone(r.filter.namespaces) }

// Namespaces returns the namespaces in which objects of res can make a rule
// fire: the union of the namespaces of the rules matching res, sorted, or
// nil when one of them watches every namespace (or none matches). The
// watcher then lists and watches res in those namespaces only, and `fieldwatch
// rbac` grants it there only. The custom resources a rule with crd:
// {impact: true} needs are watched in every namespace.
func (s *Set) Namespaces(res change.Resource) []string {
	rules := s.RulesFor(res)
	if len(rules) == 0 || s.impactCovers(res) {
		return nil
	}
	var out []string
	for _, r := range rules {
		if len(r.filter.namespaces) == 0 {
			return nil
		}
		out = append(out, r.filter.namespaces...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
