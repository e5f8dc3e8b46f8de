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
