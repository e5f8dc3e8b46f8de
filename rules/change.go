package rules

import (
	"time"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/crd/diff"
)

// Change is one observed change of one object, what Set.Eval evaluates:
// the watcher's change (package watcher) with its objects as maps. The
// fields mean what they mean there. Eval never changes the maps: they may
// belong to a shared cache.
type Change struct {
	// Type is created, updated or deleted.
	Type change.Type
	// Resource is the resource the object belongs to.
	Resource change.Resource
	// Old is the object before the change: nil for created; for deleted
	// the final state. CEL calls it oldObject.
	Old map[string]any
	// New is the object now: nil for deleted. CEL calls it object.
	New map[string]any
	// Time is when the watcher received the change: the payload's "time".
	Time time.Time
	// CRD is, for a change of a CustomResourceDefinition, its comparison
	// (diff.Compare of Old and New) with the impact of its
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
	// Cluster names the cluster the change is of (fieldwatch run
	// --cluster-name): the payload's cluster; "" leaves the key out.
	Cluster string
	// Observed says how the change was seen: "" or change.ObservedWatch
	// for one watch event (one write), otherwise the net effect of
	// writes fieldwatch could not see one by one (a relist, a restart, a
	// takeover): the payload's "observed", CEL's observed.
	Observed change.Observed
}

// observed returns how the change was seen, ObservedWatch when not said.
func (c *Change) observed() change.Observed {
	if c.Observed == "" {
		return change.ObservedWatch
	}
	return c.Observed
}

// meta returns the object a change is about: the new state, or the final
// one for a deletion.
func (c *Change) meta() map[string]any {
	if c.Type == change.Deleted || c.New == nil {
		return c.Old
	}
	return c.New
}

// metaString returns metadata.<key> of obj as a string ("" if absent).
func metaString(obj map[string]any, key string) string {
	m, _ := obj["metadata"].(map[string]any)
	s, _ := m[key].(string)
	return s
}
