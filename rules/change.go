package rules

import (
	"time"

	"github.com/fieldwatch/fieldwatch/change"
)

// Change is one observed change of one object, what Set.Eval evaluates.
// Eval never changes the maps: they may belong to a shared cache.
type Change struct {
	Type     change.Type
	Resource change.Resource
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
	if c.Type == change.Deleted || c.Object == nil {
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
