package history

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// gateStore is a Store whose writes wait while it is held.
type gateStore struct {
	Store
	mu   sync.Mutex
	gate chan struct{} // nil: open
}

// hold makes writes wait until release is called.
func (g *gateStore) hold() (release func()) {
	ch := make(chan struct{})
	g.mu.Lock()
	g.gate = ch
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		g.gate = nil
		g.mu.Unlock()
		close(ch)
	}
}

func (g *gateStore) Write(ctx context.Context, es []Entry) (int, error) {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return g.Store.Write(ctx, es)
}

// TestVerifier: the trail verified in place while the Recorder writes:
// intact, with what it covers bounded by the oldest entry the Recorder
// had not written when the walk started (a stalled store holds it back);
// after a row is edited, the entry is named with its problem, and the
// gauges say so.
func TestVerifier(t *testing.T) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	inner := openSQLite(t).(*SQLite)
	store := &gateStore{Store: inner}
	r := NewRecorder(RecorderOptions{Store: store, Registerer: prometheus.NewRegistry(), FlushInterval: time.Millisecond,
		Signer: NewSigner(key, "prod")})
	defer r.Close(context.Background())
	reg := prometheus.NewRegistry()
	v := NewVerifier(inner, VerifierOptions{Key: key.Public().(ed25519.PublicKey), Unwritten: r.OldestUnwritten, Registerer: reg})
	if v.Last() != nil {
		t.Fatal("a verification before the first")
	}
	for i := range 20 {
		r.Record(fixture{uid: fmt.Sprintf("u%d", i), rv: "1", namespace: "shop", name: "w", time: t0.Add(time.Duration(i) * time.Second)}.payload(), Delivered)
	}
	testenv.Eventually(t, 10*time.Second, "the 20 entries written", func() bool { return r.OldestUnwritten().IsZero() && len(queryAll(t, inner, Query{})) == 20 })

	got := v.VerifyNow(context.Background())
	if got.Err != nil || len(got.Report.Problems) != 0 || !got.Report.Signed || got.Covered != got.Started || v.Last() != got {
		t.Fatalf("first verification: %+v, want intact, signed, covering up to its start", got)
	}
	if n := testutil.ToFloat64(v.problems); n != 0 {
		t.Errorf("fieldwatch_history_trail_problems %v, want 0", n)
	}
	if ts := testutil.ToFloat64(v.finished); ts < float64(got.Started.Unix()) {
		t.Errorf("fieldwatch_history_trail_verified_timestamp_seconds %v, want the verification's end", ts)
	}

	// A stalled store: what was recorded after the stall is not covered.
	release := store.hold()
	stalled := time.Now()
	r.Record(fixture{uid: "late", rv: "1", namespace: "shop", name: "w", time: t0.Add(time.Minute)}.payload(), Delivered)
	testenv.Eventually(t, 10*time.Second, "the late entry to be held", func() bool { return !r.OldestUnwritten().IsZero() })
	got = v.VerifyNow(context.Background())
	if got.Covered.Before(stalled) || !got.Covered.Before(got.Started) {
		t.Errorf("with an entry held since %s: covered %s, started %s; want covered at the held entry's time", stalled, got.Covered, got.Started)
	}
	release()
	testenv.Eventually(t, 10*time.Second, "the late entry written", func() bool { return r.OldestUnwritten().IsZero() })

	// Someone edits an entry's row.
	var victim Entry
	p, err := inner.Query(context.Background(), Query{UID: "u7"})
	if err != nil || len(p.Entries) != 1 {
		t.Fatalf("u7: %v, %v", p.Entries, err)
	}
	victim = p.Entries[0]
	if _, err := inner.write.Exec("UPDATE entries SET usr = 'mallory' WHERE seq = ?", victim.Seq); err != nil {
		t.Fatal(err)
	}
	got = v.VerifyNow(context.Background())
	if got.Err != nil || len(got.Report.Problems) != 1 {
		t.Fatalf("after the edit: %v, %v; want one problem", got.Report, got.Err)
	}
	if kind, ok := got.Problem(victim.Seq); !ok || kind != Altered {
		t.Errorf("the edited entry: %q, %v; want altered", kind, ok)
	}
	if _, ok := got.Problem(victim.Seq + 1); ok {
		t.Error("another entry named")
	}
	if n := testutil.ToFloat64(v.problems); n != 1 {
		t.Errorf("fieldwatch_history_trail_problems %v, want 1", n)
	}
}
