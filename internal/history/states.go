package history

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"

	"github.com/fieldwatch/fieldwatch/change"
)

// State is one recorded state of an object, kept for the rules with
// history: {states: true} (rules.State, which redacted it): the object as
// a change left it, so that it can be rebuilt as it was at any time.
type State struct {
	// Seq is the store's sequence number, in the order states were
	// written.
	Seq int64
	// Time is when fieldwatch observed the change, to the microsecond.
	Time time.Time
	// Type is created, updated or deleted; Baseline marks the state of
	// an object as fieldwatch found it, which is no change.
	Type     change.Type
	Baseline bool
	// Group, Version, Resource and Kind are the object's resource.
	Group, Version, Resource, Kind string
	Namespace, Name, UID           string
	// ResourceVersion is the state's; Base that of the state Ops apply
	// to (an update's and a deletion's old object).
	ResourceVersion, Base string
	// User, Impersonated and Manager are who made the change (as in an
	// Entry).
	User, Impersonated, Manager string
	// Source says whether this replica handled the change or recorded
	// it from the leader's confirmation.
	Source Source
	// Ops are an update's RFC 6902 operations (a JSON array) from the
	// state of Base; nil for other types.
	Ops []byte
	// Full is the whole state as JSON, which the writer gives for every
	// type but a deletion; the store keeps it for the first state of an
	// object, after a gap (Base is not the previous state's), and every
	// FullEvery changes, and reads it back only from those (nil
	// otherwise).
	Full []byte
}

// FullEvery is how many changes of an object the store keeps as
// operations alone before it keeps a whole state again: a rebuild reads
// at most that many states (BenchmarkRebuild).
const FullEvery = 32

// ObjectKey names an object by its resource, namespace and name: its
// states are those of every object of that name in turn (one deleted,
// another created).
type ObjectKey struct {
	Group, Resource, Namespace, Name string
}

func (k ObjectKey) String() string {
	gr := k.Resource
	if k.Group != "" {
		gr += "." + k.Group
	}
	if k.Namespace == "" {
		return gr + " " + k.Name
	}
	return gr + " " + k.Namespace + "/" + k.Name
}

// Key returns the key of the object the state is of.
func (s *State) Key() ObjectKey {
	return ObjectKey{Group: s.Group, Resource: s.Resource, Namespace: s.Namespace, Name: s.Name}
}

// Who names who made the change, as Entry.Who does.
func (s *State) Who() string {
	e := Entry{User: s.User, Impersonated: s.Impersonated, Manager: s.Manager}
	return e.Who()
}

// StateStore is a Store that keeps states. Its methods are safe for
// concurrent use; a Recorder is its one writer.
type StateStore interface {
	// WriteStates records states, each once per object and
	// resourceVersion (a deletion once per object), in the order given,
	// which must be each object's order of changes. It returns how many
	// were new. On an error none of them was written.
	WriteStates(ctx context.Context, states []State) (int, error)
	// StatesOf calls fn with the states of key, oldest first: from the
	// newest whose whole state is kept at or before from (or, with
	// from zero, the oldest kept), to the last at or before until.
	// Full is set only where the store keeps it. fn may stop the walk
	// with ErrStop.
	StatesOf(ctx context.Context, key ObjectKey, from, until time.Time, fn func(*State) error) error
	// TrimStates removes the states older than before.
	TrimStates(ctx context.Context, before time.Time) (int, error)
}

// Errors of a rebuild, wrapped with what they concern.
var (
	// ErrNoStates: the history keeps no state of the object (never
	// watched by a rule with states, or every state trimmed).
	ErrNoStates = errors.New("no recorded states of the object")
	// ErrBeforeStates: the time is before the oldest state kept.
	ErrBeforeStates = errors.New("before the oldest recorded state of the object")
	// ErrNotStates: the store keeps no states.
	ErrNotStates = errors.New("this history store keeps no states")
)

// Rebuilt is an object as it was at a time.
type Rebuilt struct {
	// Object is the object as JSON (keys sorted, metadata.resourceVersion
	// the state's, redacted values "<redacted>"); nil when it was deleted
	// then (Last is its deletion).
	Object []byte
	// Last is the last change at or before the time (Ops and Full nil).
	Last State
	// From is the state the rebuild started from: a whole one.
	From State
	// Applied is how many states' operations were applied to From.
	Applied int
}

// Rebuild returns the object key names as it was at at: the newest whole
// state at or before at, with the operations of the states after it
// applied in order. It reads at most FullEvery states, and holds the
// object and one state's operations at a time. The error wraps
// ErrNoStates when no state of it is kept, ErrBeforeStates when at is
// before the oldest kept.
func Rebuild(ctx context.Context, store Store, key ObjectKey, at time.Time) (Rebuilt, error) {
	ss, ok := store.(StateStore)
	if !ok {
		return Rebuilt{}, ErrNotStates
	}
	var (
		out  Rebuilt
		doc  []byte
		seen bool
	)
	err := ss.StatesOf(ctx, key, at, at, func(s *State) error {
		if !seen {
			seen = true
			if s.Full == nil && s.Type != change.Deleted {
				return fmt.Errorf("%s: the state of resourceVersion %s at %s has no whole state to start from", key, s.ResourceVersion, s.Time.Format(time.RFC3339Nano))
			}
			out.From = stateHead(s)
			doc = s.Full
			out.Last = stateHead(s)
			return nil
		}
		var err error
		doc, err = apply(doc, s)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		out.Last = stateHead(s)
		out.Applied++
		return nil
	})
	if err != nil {
		return Rebuilt{}, err
	}
	if !seen {
		return Rebuilt{}, stateBounds(ctx, ss, key, at)
	}
	if doc != nil {
		if out.Object, err = withResourceVersion(doc, out.Last.ResourceVersion); err != nil {
			return Rebuilt{}, fmt.Errorf("%s: %w", key, err)
		}
	}
	return out, nil
}

// stateBounds says why no state of key is at or before at.
func stateBounds(ctx context.Context, ss StateStore, key ObjectKey, at time.Time) error {
	var oldest *State
	err := ss.StatesOf(ctx, key, time.Time{}, MaxTime, func(s *State) error {
		h := stateHead(s)
		oldest = &h
		return ErrStop
	})
	switch {
	case err != nil && !errors.Is(err, ErrStop):
		return err
	case oldest == nil:
		return fmt.Errorf("%s: %w", key, ErrNoStates)
	}
	return fmt.Errorf("%s: %s is %w (%s)", key, at.UTC().Format(time.RFC3339Nano), ErrBeforeStates, oldest.Time.Format(time.RFC3339Nano))
}

// apply returns doc, the state before s, with s applied: an update's
// operations, a creation's whole state, nothing for a deletion.
func apply(doc []byte, s *State) ([]byte, error) {
	switch {
	case s.Type == change.Deleted:
		return nil, nil
	case s.Full != nil:
		return s.Full, nil
	case doc == nil:
		return nil, fmt.Errorf("the state of resourceVersion %s at %s follows a deletion and has no whole state", s.ResourceVersion, s.Time.Format(time.RFC3339Nano))
	}
	p, err := jsonpatch.DecodePatch(s.Ops)
	if err != nil {
		return nil, fmt.Errorf("the operations of resourceVersion %s: %w", s.ResourceVersion, err)
	}
	out, err := p.Apply(doc)
	if err != nil {
		return nil, fmt.Errorf("the operations of resourceVersion %s do not apply: %w", s.ResourceVersion, err)
	}
	return out, nil
}

// withResourceVersion returns doc with metadata.resourceVersion rv, keys
// sorted.
func withResourceVersion(doc []byte, rv string) ([]byte, error) {
	var obj map[string]any
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	if err := d.Decode(&obj); err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	if meta, ok := obj["metadata"].(map[string]any); ok && rv != "" {
		meta["resourceVersion"] = rv
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(obj); err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// stateHead is s without its operations and whole state.
func stateHead(s *State) State {
	h := *s
	h.Ops, h.Full = nil, nil
	return h
}

// Diff is what changed of an object between two times.
type Diff struct {
	// From and To are the object at each time (Rebuild).
	From, To Rebuilt
	// Changes are the states after From's time up to To's, oldest first,
	// with their operations (Full nil), at most MaxDiffChanges.
	Changes []State
	// More is set when there were more changes than Changes holds.
	More bool
}

// MaxDiffChanges bounds the changes a Diff lists.
const MaxDiffChanges = 1000

// DiffStates returns the object key names at from and at to, and the
// changes between. from must be before to.
func DiffStates(ctx context.Context, store Store, key ObjectKey, from, to time.Time) (Diff, error) {
	if !from.Before(to) {
		return Diff{}, fmt.Errorf("from %s is not before to %s", from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano))
	}
	var d Diff
	var err error
	if d.From, err = Rebuild(ctx, store, key, from); err != nil {
		return Diff{}, err
	}
	if d.To, err = Rebuild(ctx, store, key, to); err != nil {
		return Diff{}, err
	}
	ss := store.(StateStore) // Rebuild checked it
	err = ss.StatesOf(ctx, key, from, to, func(s *State) error {
		if !s.Time.After(from) {
			return nil
		}
		if len(d.Changes) == MaxDiffChanges {
			d.More = true
			return ErrStop
		}
		c := *s
		c.Full = nil
		if c.Ops != nil {
			c.Ops = append([]byte(nil), c.Ops...)
		}
		d.Changes = append(d.Changes, c)
		return nil
	})
	if err != nil && !errors.Is(err, ErrStop) {
		return Diff{}, err
	}
	return d, nil
}

// stateID is the id a state is kept once by: its object's uid and
// resourceVersion, or "deleted".
func stateID(s *State) string {
	if s.Type == change.Deleted {
		return s.UID + "/deleted"
	}
	return s.UID + "/" + s.ResourceVersion
}

// checkState rejects a state the store cannot keep.
func checkState(s *State) error {
	switch {
	case s.UID == "" || s.Resource == "" || s.Name == "":
		return errors.New("state: no uid, resource or name")
	case s.Time.Before(MinTime) || !s.Time.Before(MaxTime):
		return fmt.Errorf("state: time %s outside the history's range", s.Time.Format(time.RFC3339Nano))
	case s.Type == change.Updated && s.Ops == nil:
		return errors.New("state: an update without operations")
	case s.Type != change.Deleted && s.Full == nil:
		return errors.New("state: no whole state")
	}
	return nil
}

// ParseObjectKey reads an object's key from a resource, "PLURAL" for the
// core group or "PLURAL.GROUP" (kubectl's spelling), and ref,
// "NAMESPACE/NAME" or "NAME" for a cluster-scoped object.
func ParseObjectKey(resource, ref string) (ObjectKey, error) {
	var k ObjectKey
	k.Resource, k.Group, _ = strings.Cut(resource, ".")
	if ns, name, ok := strings.Cut(ref, "/"); ok {
		k.Namespace, k.Name = ns, name
	} else {
		k.Name = ref
	}
	for _, f := range []struct{ what, value string }{{"resource", k.Resource}, {"name", k.Name}} {
		if f.value == "" {
			return ObjectKey{}, fmt.Errorf("%s: empty in %q %q: want RESOURCE[.GROUP] [NAMESPACE/]NAME", f.what, resource, ref)
		}
	}
	for _, s := range []string{k.Resource, k.Group, k.Namespace, k.Name} {
		if err := checkValue("object", s); err != nil && s != "" {
			return ObjectKey{}, err
		}
		if strings.ContainsAny(s, "/ ") {
			return ObjectKey{}, fmt.Errorf("%q %q: a resource, namespace or name holds no slash or space", resource, ref)
		}
	}
	return k, nil
}

// ParseStateTime reads a time to rebuild an object at: RFC 3339, or a
// duration before now ("90m"); a time in the future is an error (its
// state is not known yet).
func ParseStateTime(s string, now time.Time) (time.Time, error) {
	const want = "an RFC 3339 time (2026-12-07T09:03:00Z) or a duration before now (90m)"
	if s == "" {
		return time.Time{}, errors.New("no time: want " + want)
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		d, derr := time.ParseDuration(s)
		if derr != nil || d < 0 {
			return time.Time{}, fmt.Errorf("time %q: want %s", truncate(s), want)
		}
		t = now.Add(-d)
	}
	switch {
	case t.After(now):
		return time.Time{}, fmt.Errorf("time %s is in the future (now %s)", t.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339))
	case t.Before(MinTime):
		return time.Time{}, fmt.Errorf("time %s is before %s", t.UTC().Format(time.RFC3339Nano), MinTime.Format(time.RFC3339))
	}
	return t.UTC(), nil
}
