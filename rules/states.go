package rules

import (
	"fmt"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
)

// State is one recorded state of an object, for the history's states
// (history: {states: true}): what Set.State and Set.Baseline return. The
// object is kept as the rules see it, less metadata.managedFields and
// metadata.resourceVersion (ResourceVersion says it), with the redact
// paths of every rule with states that selects it, and a Secret's
// values, "<redacted>". Applied in order to the previous state, Ops give
// the new one, Full, exactly: a value redacted in the new state is
// redacted by the operations too.
type State struct {
	// Type is created, updated or deleted; Baseline marks the state of
	// an object as fieldwatch found it (at start, or when a rule with
	// states came to select it), which is no change (Type is created).
	Type     change.Type
	Baseline bool
	// Observed is how the change was seen (Change.Observed).
	Observed change.Observed
	// Time is when fieldwatch observed the change (the payload's time),
	// to the microsecond.
	Time time.Time
	// Object addresses the object; its ResourceVersion is the new
	// state's (for a deletion, the final state's).
	Object ObjectRef
	// Base is the resourceVersion of the state Ops apply to: the old
	// object's, for an update and a deletion.
	Base string
	// Ops are an update's changes as a JSON array of RFC 6902 operations
	// with oldValue (docs/payload.md), noise included but managedFields
	// and resourceVersion; nil for other types.
	Ops []byte
	// Full is the new state as JSON (keys sorted); nil for a deletion.
	Full []byte
	// User and Impersonated are who made the change, from the audit
	// stream; Manager is the field manager managedFields names.
	User, Impersonated, Manager string
}

// KeepsStates reports whether a rule with states matches res.
func (s *Set) KeepsStates(res change.Resource) bool {
	for _, r := range s.RulesFor(res) {
		if r.States {
			return true
		}
	}
	return false
}

// State returns the state c leaves its object in, when a rule with states
// selects the object (its match: resources, namespaces, names, labels;
// not its fields, when, on or users). ok is false when none does. The
// error is a change that cannot be encoded.
func (s *Set) State(c *Change) (st State, ok bool, err error) {
	if err := checkChange(c); err != nil {
		return State{}, false, err
	}
	redact, ok := s.stateRedact(c)
	if !ok {
		return State{}, false, nil
	}
	return buildState(c, redact)
}

// Baseline returns the state of obj, an object of res as fieldwatch found
// it at time at, when a rule with states selects it.
func (s *Set) Baseline(res change.Resource, obj map[string]any, at time.Time) (State, bool, error) {
	c := &Change{Type: change.Created, Resource: res, New: obj, Time: at}
	st, ok, err := s.State(c)
	st.Baseline = true
	st.Manager, st.User, st.Impersonated = "", "", ""
	return st, ok, err
}

// stateRedact returns the redact paths of the rules with states that
// select c's object, and whether any does.
func (s *Set) stateRedact(c *Change) ([]*fieldPath, bool) {
	meta := c.meta()
	ns, name := metaString(meta, "namespace"), metaString(meta, "name")
	var redact []*fieldPath
	ok := false
	for _, r := range s.RulesFor(c.Resource) {
		if r.States && r.filter.matches(c, ns, name) {
			ok = true
			redact = append(redact, r.redact...)
		}
	}
	if ok && isSecret(c.Resource.Group, c.Resource.Resource) {
		redact = append(append([]*fieldPath(nil), secretRedact...), redact...)
	}
	return redact, ok
}

// buildState computes the state of c with the paths redact redacted.
func buildState(c *Change, redact []*fieldPath) (State, bool, error) {
	meta := c.meta()
	st := State{
		Type: c.Type, Observed: c.Observed, Time: c.Time.UTC().Truncate(time.Microsecond),
		Object: ObjectRef{
			Group: c.Resource.Group, Version: c.Resource.Version, Resource: c.Resource.Resource, Kind: c.Resource.Kind,
			Namespace: metaString(meta, "namespace"), Name: metaString(meta, "name"),
			UID: metaString(meta, "uid"), ResourceVersion: metaString(meta, "resourceVersion"),
		},
	}
	if c.Type != change.Created {
		st.Base = metaString(c.Old, "resourceVersion")
	}
	oldLocs, newLocs := redactLocations(redact, c.Old), redactLocations(redact, c.New)
	var old, new map[string]any
	if c.Old != nil {
		old = withoutStateNoise(redactValue(nil, c.Old, oldLocs).(map[string]any))
	}
	if c.New != nil {
		new = withoutStateNoise(redactValue(nil, c.New, newLocs).(map[string]any))
	}
	var err error
	if new != nil {
		if st.Full, err = appendJSON(nil, new); err != nil {
			return State{}, false, fmt.Errorf("state: %w", err)
		}
	}
	if c.Type == change.Updated {
		ops := diffObjects(old, new, nil)
		ops = append(ops, redactedChanges(c, redact, ops, old, new)...)
		b := []byte{'['}
		for i, o := range ops {
			if i > 0 {
				b = append(b, ',')
			}
			o.Path = pointer(o.toks)
			if b, err = o.appendJSON(b); err != nil {
				return State{}, false, fmt.Errorf("state: %w", err)
			}
		}
		st.Ops = append(b, ']')
		if a, ok := actorOf(c, ops); ok {
			st.Manager = a.Manager
		}
	} else if a, ok := actorOf(c, nil); ok {
		st.Manager = a.Manager
	}
	if a := c.Attribution; a != nil {
		if a.User != nil {
			st.User = a.User.Username
		}
		if a.ImpersonatedUser != nil {
			st.Impersonated = a.ImpersonatedUser.Username
		}
	}
	return st, true, nil
}

// withoutStateNoise returns obj without metadata.managedFields (the
// watcher keeps them reduced, docs/payload.md) and
// metadata.resourceVersion (the state's own field), copying the maps it
// changes.
func withoutStateNoise(obj map[string]any) map[string]any {
	meta, ok := obj["metadata"].(map[string]any)
	if !ok {
		return obj
	}
	_, mf := meta["managedFields"]
	_, rv := meta["resourceVersion"]
	if !mf && !rv {
		return obj
	}
	out := make(map[string]any, len(obj))
	for k, v := range obj {
		out[k] = v
	}
	m := make(map[string]any, len(meta))
	for k, v := range meta {
		if k != "managedFields" && k != "resourceVersion" {
			m[k] = v
		}
	}
	out["metadata"] = m
	return out
}

// redactedChanges returns a replace of "<redacted>" by "<redacted>" for
// each redacted place whose value changed (which the diff of the
// redacted states cannot see), so that the change says it; places under
// one of ops are left out.
func redactedChanges(c *Change, redact []*fieldPath, ops []patchOp, old, new map[string]any) []patchOp {
	var out []patchOp
	seen := &locTree{}
	for _, p := range redact {
		p.everyLocation(c.New, func(toks []string) {
			if covered, _ := seen.at(toks); covered {
				return
			}
			ov, ok1 := valueAt(old, toks)
			nv, ok2 := valueAt(new, toks)
			if !ok1 || !ok2 || ov != Redacted || nv != Redacted {
				return
			}
			rawOld, _ := valueAt(c.Old, toks)
			rawNew, _ := valueAt(c.New, toks)
			if equal(rawOld, rawNew) || underOp(ops, toks) {
				return
			}
			seen.add(toks)
			out = append(out, patchOp{Op: "replace", toks: append([]string(nil), toks...), Value: Redacted, OldValue: Redacted})
		})
	}
	return out
}

// underOp reports whether toks is at or under the path of one of ops.
func underOp(ops []patchOp, toks []string) bool {
	for _, o := range ops {
		if len(o.toks) <= len(toks) && equalToks(o.toks, toks[:len(o.toks)]) {
			return true
		}
	}
	return false
}

func equalToks(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
