package rules

import (
	"time"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/crd/diff"
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
	// CRD is, for a change of a CustomResourceDefinition, its comparison
	// (diff.Compare of OldObject and Object) with the impact of its
	// breaking checks on custom resources, as the caller computed it when
	// Set.WantsCRDImpact asked for it (Eval does not list objects). nil:
	// Eval compares the CRDs itself, at most once per change, and rules
	// that ask for the impact get the comparison with an impactError
	// saying it was not computed.
	CRD *diff.Result
	// Attribution is who made the change, as the Kubernetes audit stream
	// tells: nil when attribution is off (no audit source). With it, the
	// payload's actor names the user (or says why it cannot: match none or
	// ambiguous), match.users and match.excludeUsers can decide, and the
	// CEL actor has the audit fields.
	Attribution *change.Attribution
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
