package rules

import (
	"path"
	"slices"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/fieldwatch/fieldwatch/change"
)

// objectFilter is the part of a rule's match that looks at objects:
// namespaces, names and labels.
type objectFilter struct {
	namespaces        []string
	excludeNamespaces []string
	names             []string // path.Match globs
	labels            labels.Selector
}

// matches reports whether the object a change is about passes f. Labels
// are those of the new object on create, of the final state on delete,
// and of either side on update: a rule for app=shop sees the label being
// removed.
func (f *objectFilter) matches(c *Change, ns, name string) bool {
	if len(f.namespaces) > 0 && !slices.Contains(f.namespaces, ns) {
		return false
	}
	if slices.Contains(f.excludeNamespaces, ns) {
		return false
	}
	if len(f.names) > 0 && !slices.ContainsFunc(f.names, func(g string) bool {
		m, _ := path.Match(g, name)
		return m
	}) {
		return false
	}
	if f.labels != nil {
		switch c.Type {
		case change.Created:
			return f.labels.Matches(objectLabels(c.New))
		case change.Deleted:
			return f.labels.Matches(objectLabels(c.Old))
		}
		return f.labels.Matches(objectLabels(c.New)) || f.labels.Matches(objectLabels(c.Old))
	}
	return true
}

// objectLabels reads metadata.labels of an unstructured object without
// copying it.
type objectLabels map[string]any

func (o objectLabels) labels() map[string]any {
	m, _ := o["metadata"].(map[string]any)
	l, _ := m["labels"].(map[string]any)
	return l
}

// Has implements labels.Labels.
func (o objectLabels) Has(key string) bool {
	_, ok := o.labels()[key].(string)
	return ok
}

// Get implements labels.Labels.
func (o objectLabels) Get(key string) string {
	s, _ := o.labels()[key].(string)
	return s
}

var _ labels.Labels = objectLabels(nil)

// Lookup implements labels.Labels.
func (o objectLabels) Lookup(key string) (string, bool) {
	s, ok := o.labels()[key].(string)
	return s, ok
}
