package history

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkRebuild rebuilds an object with 10,000 recorded changes at
// states that sit 0, 8, 16 and FullEvery-1 changes after a whole state:
// the cost grows with the operations applied, which FullEvery bounds,
// not with the changes recorded.
func BenchmarkRebuild(b *testing.B) {
	s, err := OpenSQLite(filepath.Join(b.TempDir(), "history.db"), SQLiteOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	c := newStateChain("u1", "w1", t0)
	const changes = 10000
	for i := 1; i <= changes; i++ {
		c.update(i, t0.Add(time.Duration(i)*time.Second), "bob")
	}
	for i := 0; i < len(c.states); i += 500 {
		writeStates(b, s, c.states[i:min(i+500, len(c.states))]...)
	}
	// The whole states are at multiples of FullEvery.
	base := (changes / 2 / FullEvery) * FullEvery
	for _, applied := range []int{0, 8, 16, FullEvery - 1} {
		b.Run(fmt.Sprintf("applied=%d", applied), func(b *testing.B) {
			at := c.states[base+applied].Time
			for b.Loop() {
				r, err := Rebuild(context.Background(), s, widgetKey, at)
				if err != nil || r.Applied != applied {
					b.Fatalf("Rebuild: %d applied, %v; want %d", r.Applied, err, applied)
				}
			}
		})
	}
}

// BenchmarkStatesBytes reports what states take on disk per change
// beside what the same changes take as entries (their payloads carrying
// the same operations), in the embedded store: 10,000 updates of one
// object of about 400 bytes, each changing two fields.
func BenchmarkStatesBytes(b *testing.B) {
	const changes = 10000
	c := newStateChain("u1", "w1", t0)
	for i := 1; i <= changes; i++ {
		c.update(i, t0.Add(time.Duration(i)*time.Second), "bob")
	}
	used := func(s *SQLite) int64 {
		st, err := s.Stats(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		return st.Bytes
	}
	for b.Loop() {
		states, err := OpenSQLite(filepath.Join(b.TempDir(), "states.db"), SQLiteOptions{})
		if err != nil {
			b.Fatal(err)
		}
		entries, err := OpenSQLite(filepath.Join(b.TempDir(), "entries.db"), SQLiteOptions{})
		if err != nil {
			b.Fatal(err)
		}
		s0, e0 := used(states), used(entries)
		for i := 0; i < len(c.states); i += 500 {
			writeStates(b, states, c.states[i:min(i+500, len(c.states))]...)
			var es []Entry
			for _, st := range c.states[i:min(i+500, len(c.states))] {
				f := fixture{uid: st.UID, rv: st.ResourceVersion, namespace: st.Namespace, name: st.Name, user: st.User, time: st.Time, changes: string(st.Ops)}
				if st.Ops == nil {
					f.changes = "[]"
				}
				es = append(es, f.entry(b, Delivered))
			}
			write(b, entries, es...)
		}
		b.ReportMetric(float64(used(states)-s0)/changes, "state-B/change")
		b.ReportMetric(float64(used(entries)-e0)/changes, "entry-B/change")
		_, _ = states.Close(), entries.Close()
	}
}

// BenchmarkWriteStates writes 10,000 states of 100 objects (100 changes
// each) into the embedded store in batches of 500, as the Recorder does,
// beside the same changes written as entries: what keeping states costs
// the history's writer per change.
func BenchmarkWriteStates(b *testing.B) {
	var states []State
	var entries []Entry
	chains := make([]*stateChain, 100)
	for o := range chains {
		chains[o] = newStateChain(fmt.Sprintf("u%d", o), fmt.Sprintf("w%d", o), t0)
	}
	for i := 1; i <= 100; i++ {
		for _, c := range chains {
			c.update(i, t0.Add(time.Duration(i)*time.Second), "bob")
		}
	}
	for i := 1; i <= 100; i++ { // in time order, as changes come
		for _, c := range chains {
			st := c.states[i]
			states = append(states, st)
			entries = append(entries, fixture{uid: st.UID, rv: st.ResourceVersion, namespace: st.Namespace, name: st.Name, user: st.User,
				time: st.Time, changes: string(st.Ops)}.entry(b, Delivered))
		}
	}
	for _, kind := range []string{"states", "entries"} {
		b.Run(kind, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				s, err := OpenSQLite(filepath.Join(b.TempDir(), "history.db"), SQLiteOptions{})
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				for i := 0; i < len(states); i += 500 {
					if kind == "states" {
						writeStates(b, s, states[i:i+500]...)
					} else {
						write(b, s, entries[i:i+500]...)
					}
				}
				b.StopTimer()
				_ = s.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*len(states)), "us/change")
		})
	}
}
