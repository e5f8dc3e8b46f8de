package history

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fieldwatch/fieldwatch/change"
)

// stateChain builds the states of one object changed n times: created,
// then updates that replace spec.n and now and then add or remove a key,
// with a whole state for every one (as rules.State gives them). wants
// are the objects as JSON after each state.
type stateChain struct {
	uid, name string
	obj       map[string]any
	rv        int
	states    []State
	wants     [][]byte
}

func newStateChain(uid, name string, at time.Time) *stateChain {
	c := &stateChain{uid: uid, name: name, rv: 100, obj: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": name, "namespace": "shop", "uid": uid},
		"spec":     map[string]any{"n": 0.0, "secret": Redacted},
	}}
	c.add(change.Created, at, nil, "alice")
	return c
}

// Redacted is the value of a redacted field (rules.Redacted).
const Redacted = "<redacted>"

func (c *stateChain) add(typ change.Type, at time.Time, ops []map[string]any, user string) {
	base := fmt.Sprint(c.rv)
	c.rv++
	s := State{Time: at, Type: typ, Group: "example.com", Version: "v1", Resource: "widgets", Kind: "Widget",
		Namespace: "shop", Name: c.name, UID: c.uid, ResourceVersion: fmt.Sprint(c.rv), User: user, Source: Delivered}
	if typ != change.Created {
		s.Base = base
	}
	if ops != nil {
		s.Ops, _ = json.Marshal(ops)
	}
	var want []byte
	if typ != change.Deleted {
		s.Full, _ = marshalNoEscape(c.obj)
		m := c.obj["metadata"].(map[string]any)
		m["resourceVersion"] = s.ResourceVersion
		want, _ = marshalNoEscape(c.obj)
		delete(m, "resourceVersion")
	}
	c.states = append(c.states, s)
	c.wants = append(c.wants, want)
}

// update changes the object at step i and records it.
func (c *stateChain) update(i int, at time.Time, user string) {
	spec := c.obj["spec"].(map[string]any)
	ops := []map[string]any{{"op": "replace", "path": "/spec/n", "value": float64(i), "oldValue": spec["n"]}}
	spec["n"] = float64(i)
	key := fmt.Sprintf("k%d", i%7)
	if old, ok := spec[key]; ok {
		ops = append(ops, map[string]any{"op": "remove", "path": "/spec/" + key, "oldValue": old})
		delete(spec, key)
	} else {
		ops = append(ops, map[string]any{"op": "add", "path": "/spec/" + key, "value": []any{"a/b", float64(i)}})
		spec[key] = []any{"a/b", float64(i)}
	}
	c.add(change.Updated, at, ops, user)
}

// marshalNoEscape marshals v as the rules and Rebuild do: keys sorted,
// no HTML escaping.
func marshalNoEscape(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	err := enc.Encode(v)
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), err
}

func writeStates(t testing.TB, s Store, states ...State) int {
	t.Helper()
	n, err := s.(StateStore).WriteStates(context.Background(), states)
	if err != nil {
		t.Fatalf("WriteStates: %v", err)
	}
	return n
}

var widgetKey = ObjectKey{Group: "example.com", Resource: "widgets", Namespace: "shop", Name: "w1"}

// statesSuite runs the behaviour every StateStore must have.
func statesSuite(t *testing.T, open func(t *testing.T) Store) {
	t.Run("RebuildEveryState", func(t *testing.T) {
		s := open(t)
		c := newStateChain("u1", "w1", t0)
		for i := 1; i <= 3*FullEvery+5; i++ {
			c.update(i, t0.Add(time.Duration(i)*time.Second), []string{"alice", "bob", "carol"}[i%3])
		}
		// In batches of 10, as the Recorder writes them.
		for i := 0; i < len(c.states); i += 10 {
			writeStates(t, s, c.states[i:min(i+10, len(c.states))]...)
		}
		if n := writeStates(t, s, c.states...); n != 0 {
			t.Errorf("written again: %d new, want 0", n)
		}
		for i, st := range c.states {
			for _, at := range []time.Time{st.Time, st.Time.Add(time.Second / 2)} {
				r, err := Rebuild(context.Background(), s, widgetKey, at)
				if err != nil {
					t.Fatalf("state %d: Rebuild: %v", i, err)
				}
				if string(r.Object) != string(c.wants[i]) {
					t.Fatalf("state %d at %s:\n got %s\nwant %s", i, at, r.Object, c.wants[i])
				}
				if r.Last.ResourceVersion != st.ResourceVersion || r.Last.User != st.User || r.Applied >= FullEvery {
					t.Errorf("state %d: last %s by %s, %d applied; want %s by %s, fewer than %d", i, r.Last.ResourceVersion, r.Last.User, r.Applied,
						st.ResourceVersion, st.User, FullEvery)
				}
			}
		}
	})

	t.Run("Errors", func(t *testing.T) {
		s := open(t)
		c := newStateChain("u1", "w1", t0)
		c.update(1, t0.Add(time.Second), "bob")
		writeStates(t, s, c.states...)
		_, err := Rebuild(context.Background(), s, widgetKey, t0.Add(-time.Second))
		if !errors.Is(err, ErrBeforeStates) || !strings.Contains(err.Error(), t0.Format(time.RFC3339Nano)) {
			t.Errorf("before the first state: %v; want ErrBeforeStates naming %s", err, t0.Format(time.RFC3339Nano))
		}
		other := widgetKey
		other.Name = "never"
		if _, err := Rebuild(context.Background(), s, other, t0); !errors.Is(err, ErrNoStates) {
			t.Errorf("an object never watched: %v; want ErrNoStates", err)
		}
		bad := c.states[1]
		bad.ResourceVersion, bad.Ops = "999", nil
		if n := writeStates(t, s, bad); n != 0 {
			t.Errorf("an update without operations: %d written, want 0", n)
		}
	})

	t.Run("DeletedAndCreatedAgain", func(t *testing.T) {
		s := open(t)
		c := newStateChain("u1", "w1", t0)
		c.update(1, t0.Add(time.Second), "bob")
		c.add(change.Deleted, t0.Add(2*time.Second), nil, "carol")
		d := newStateChain("u2", "w1", t0.Add(3*time.Second))
		writeStates(t, s, append(c.states, d.states...)...)
		r, err := Rebuild(context.Background(), s, widgetKey, t0.Add(2500*time.Millisecond))
		if err != nil || r.Object != nil || r.Last.Type != change.Deleted || r.Last.User != "carol" {
			t.Errorf("after the deletion: %s, %+v, %v; want no object, deleted by carol", r.Object, r.Last, err)
		}
		r, err = Rebuild(context.Background(), s, widgetKey, t0.Add(3*time.Second))
		if err != nil || string(r.Object) != string(d.wants[0]) {
			t.Errorf("created again: %s, %v; want %s", r.Object, err, d.wants[0])
		}
	})

	t.Run("Gap", func(t *testing.T) {
		s := open(t)
		c := newStateChain("u1", "w1", t0)
		for i := 1; i <= 4; i++ {
			c.update(i, t0.Add(time.Duration(i)*time.Second), "bob")
		}
		// The third update is lost: the fourth's Base is not the last
		// state kept, so that its whole state is.
		writeStates(t, s, c.states[0], c.states[1], c.states[2], c.states[4])
		r, err := Rebuild(context.Background(), s, widgetKey, t0.Add(4*time.Second))
		if err != nil || string(r.Object) != string(c.wants[4]) || r.Applied != 0 {
			t.Errorf("after a gap: %s, %d applied, %v; want %s from its whole state", r.Object, r.Applied, err, c.wants[4])
		}
	})

	t.Run("DiffAndTrim", func(t *testing.T) {
		s := open(t)
		c := newStateChain("u1", "w1", t0)
		for i := 1; i <= 2*FullEvery; i++ {
			c.update(i, t0.Add(time.Duration(i)*time.Minute), []string{"alice", "bob"}[i%2])
		}
		writeStates(t, s, c.states...)
		d, err := DiffStates(context.Background(), s, widgetKey, t0.Add(3*time.Minute), t0.Add(7*time.Minute+time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if string(d.From.Object) != string(c.wants[3]) || string(d.To.Object) != string(c.wants[7]) || len(d.Changes) != 4 || d.More {
			t.Fatalf("diff: from %s to %s, %d changes (more %v)", d.From.Object, d.To.Object, len(d.Changes), d.More)
		}
		for i, ch := range d.Changes {
			if ch.ResourceVersion != c.states[4+i].ResourceVersion || ch.User != c.states[4+i].User || string(ch.Ops) != string(c.states[4+i].Ops) {
				t.Errorf("change %d: %+v, want %+v", i, ch, c.states[4+i])
			}
		}
		if _, err := DiffStates(context.Background(), s, widgetKey, t0.Add(time.Hour), t0); err == nil {
			t.Error("from after to: no error")
		}
		// Trimmed to the second whole state (the FullEvery-th update's):
		// before it, a rebuild says where the states start; from it on,
		// it is whole.
		n, err := s.(StateStore).TrimStates(context.Background(), t0.Add(time.Duration(FullEvery)*time.Minute-time.Second))
		if err != nil || n != FullEvery {
			t.Fatalf("TrimStates = %d, %v; want %d", n, err, FullEvery)
		}
		_, err = Rebuild(context.Background(), s, widgetKey, t0.Add(time.Duration(FullEvery-1)*time.Minute))
		if !errors.Is(err, ErrBeforeStates) {
			t.Errorf("a time trimmed: %v; want ErrBeforeStates", err)
		}
		at := 2*FullEvery - 1
		r, err := Rebuild(context.Background(), s, widgetKey, c.states[at].Time)
		if err != nil || string(r.Object) != string(c.wants[at]) {
			t.Errorf("after the trim: %s, %v; want %s", r.Object, err, c.wants[at])
		}
	})
}

func TestStatesSQLite(t *testing.T) { statesSuite(t, openSQLite) }

func TestStatesPostgres(t *testing.T) { statesSuite(t, openPostgres) }

// TestStatesMigration: a file of the schema before states gets their
// table, and keeps its entries.
func TestStatesMigration(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	f := fixture{uid: "u1", rv: "10", namespace: "shop", name: "w1", time: t0}
	e := f.entry(t, Delivered)
	writeOldSQLite(t, db, e)
	s, err := OpenSQLite(path, SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	if got := queryAll(t, s, Query{}); len(got) != 1 || got[0] != e.ID {
		t.Errorf("entries after the migration: %v, want [%s]", got, e.ID)
	}
	c := newStateChain("u1", "w1", t0)
	if n := writeStates(t, s, c.states...); n != 1 {
		t.Errorf("states written: %d, want 1", n)
	}
}

// TestRecorderStates: states recorded between payloads are written in
// order, an invalid one is left out and counted, and the object rebuilds
// as it was at each state.
func TestRecorderStates(t *testing.T) {
	store := openSQLite(t)
	r := NewRecorder(RecorderOptions{Store: store, Registerer: prometheus.NewRegistry(), FlushInterval: time.Millisecond})
	c := newStateChain("u1", "w1", t0)
	for i := 1; i <= 50; i++ {
		c.update(i, t0.Add(time.Duration(i)*time.Second), "bob")
	}
	for i, st := range c.states {
		r.RecordState(st)
		if i%10 == 0 {
			r.Record(fixture{uid: "u1", rv: st.ResourceVersion, namespace: "shop", name: "w1", time: st.Time}.payload(), Delivered)
		}
	}
	r.RecordState(State{Type: change.Updated})
	r.Close(context.Background())
	if inv := testutil.ToFloat64(r.m.invalid); inv != 1 {
		t.Errorf("invalid %v, want 1", inv)
	}
	for i, st := range c.states {
		got, err := Rebuild(context.Background(), store, widgetKey, st.Time)
		if err != nil || string(got.Object) != string(c.wants[i]) {
			t.Fatalf("state %d: %s, %v; want %s", i, got.Object, err, c.wants[i])
		}
	}
}

// TestStatesSizeBound: a store of states alone, bounded to 16 MiB, is
// trimmed within the bound, its oldest states first.
func TestStatesSizeBound(t *testing.T) {
	const bound = 16 << 20
	s, err := OpenSQLite(filepath.Join(t.TempDir(), "history.db"), SQLiteOptions{MaxBytes: bound})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	big := strings.Repeat("x", 8<<10)
	var batch []State
	for i := range 3000 { // 24 MiB of whole states
		c := newStateChain(fmt.Sprintf("u%d", i), fmt.Sprintf("w%d", i), t0.Add(time.Duration(i)*time.Second))
		st := c.states[0]
		st.Full = []byte(`{"metadata":{"name":"` + st.Name + `"},"spec":{"text":"` + big + `"}}`)
		batch = append(batch, st)
		if len(batch) == 100 {
			writeStates(t, s, batch...)
			batch = batch[:0]
		}
	}
	if _, err := s.Trim(context.Background(), time.Time{}, bound); err != nil {
		t.Fatal(err)
	}
	st, err := s.Stats(context.Background())
	if err != nil || st.Bytes > bound {
		t.Errorf("after the trim: %d bytes (%v), bound %d", st.Bytes, err, bound)
	}
	key := func(i int) ObjectKey { k := widgetKey; k.Name = fmt.Sprintf("w%d", i); return k }
	if _, err := Rebuild(context.Background(), s, key(0), t0.Add(time.Hour)); !errors.Is(err, ErrNoStates) {
		t.Errorf("the oldest object: %v; want ErrNoStates (trimmed)", err)
	}
	if _, err := Rebuild(context.Background(), s, key(2999), t0.Add(time.Hour)); err != nil {
		t.Errorf("the newest object: %v; want it kept", err)
	}
}
