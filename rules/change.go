package rules

import "time"

// ChangeType is what happened to an object: created, updated or deleted.
// It is the payload's "type".
type ChangeType string

// The change types.
const (
	Created ChangeType = "created"
	Updated ChangeType = "updated"
	Deleted ChangeType = "deleted"
)

// Resource identifies the resource (group, version, plural resource name)
// a changed object belongs to, with its kind and what discovery says about
// it.
type Resource struct {
	// Group is the API group; "" is the core group.
	Group   string
	Version string
	// Resource is the plural resource name: widgets, pods.
	Resource string
	Kind     string
	// Namespaced is true for namespaced resources.
	Namespaced bool
	// Custom is true for resources backed by a CustomResourceDefinition.
	Custom bool
	// OtherVersion is true when Version is not the version discovery
	// prefers for the resource: selectors with version "" skip it, so that
	// a resource watched at two versions does not fire such rules twice.
	OtherVersion bool
}

// Change is one observed change of one object, what Set.Eval evaluates.
// Eval never changes the maps: they may belong to a shared cache.
type Change struct {
	Type     ChangeType
	Resource Resource
	// Object is the new state; nil for deleted.
	Object map[string]any
	// OldObject is the previous state; nil for created; for deleted the
	// final state.
	OldObject map[string]any
	// Time is when the change was observed: the payload's "time".
	Time time.Time
}

// meta returns the object a change is about: the new state, or the final
// one for a deletion.
func (c *Change) meta() map[string]any {
	if c.Type == Deleted || c.Object == nil {
		return c.OldObject
	}
	return c.Object
}

// metaString returns metadata.<key> of obj as a string ("" if absent).
func metaString(obj map[string]any, key string) string {
	m, _ := obj["metadata"].(map[string]any)
	s, _ := m[key].(string)
	return s
}
