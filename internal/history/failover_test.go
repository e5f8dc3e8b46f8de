package history

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// TestTrailFailover: two replicas share one PostgreSQL history, each with
// a chain of its own. The leader records what it delivers, the standby
// the same firings as confirmed; the leader stops (its chain sealed), the
// standby takes over and delivers, and the old leader comes back under
// its name as the standby, continuing its chain. The export verifies:
// both chains intact and sealed to their ends, the standby's copies the
// leader's entries replaced counted as superseded, not altered.
func TestTrailFailover(t *testing.T) {
	dsn := newPGDatabase(t)
	key := newKey(t)
	replica := func(name string) (*Postgres, *Recorder) {
		s, err := OpenPostgres(context.Background(), dsn, PostgresOptions{Chain: "prod/" + name})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s, NewRecorder(RecorderOptions{Store: s, Registerer: prometheus.NewRegistry(), FlushInterval: time.Millisecond,
			Signer: NewSigner(key, "prod")})
	}
	record := func(r *Recorder, source Source, from, n int) {
		for _, e := range batch(t, from, n) {
			e.Source = source
			if source == Confirmed {
				e.User = "" // a standby attributes nothing
			}
			r.RecordEntry(e)
		}
	}
	written := func(r *Recorder, n float64) {
		testenv.Eventually(t, 10*time.Second, "entries written", func() bool { return testutil.ToFloat64(r.m.written) == n })
	}
	a, ra := replica("fieldwatch-0")
	_, rb := replica("fieldwatch-1")
	// A leads; some of the standby's copies come before A's entries.
	record(rb, Confirmed, 0, 10)
	written(rb, 10)
	record(ra, Delivered, 0, 20) // replace B's 10 copies
	written(ra, 20)
	record(rb, Confirmed, 10, 10)  // after A's entries: not written
	ra.Close(context.Background()) // A stops
	record(rb, Delivered, 20, 15)  // B leads
	written(rb, 25)
	_, ra = replica("fieldwatch-0") // A is back as the standby
	record(ra, Confirmed, 35, 10)
	written(ra, 10)
	record(rb, Delivered, 35, 10) // replace A's 10 copies
	written(rb, 35)
	ra.Close(context.Background())
	rb.Close(context.Background())
	r := exportVerify(t, a, publicOf(key), time.Now())
	if !r.Intact() || len(r.Chains) != 2 {
		t.Fatalf("report %+v: want two intact chains", r)
	}
	for _, c := range r.Chains {
		if c.Sealed != c.Links || c.Entries == 0 {
			t.Errorf("chain %+v: want entries, sealed to its end", c)
		}
	}
	if r.Superseded != 20 {
		t.Errorf("report %+v: want the standby's 20 copies replaced by the leader's entries counted as superseded", r)
	}
	if c := r.Chains[0]; c.Chain != "prod/fieldwatch-0" || c.Checkpoints != 2 || c.Entries != 30 {
		t.Errorf("chain %+v: want fieldwatch-0's 30 entries, a checkpoint at each stop, one chain across its restart", c)
	}
}
