package history

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// downStore is the embedded store with an outage: while down, its
// writes fail, and while stalled they wait.
type downStore struct {
	*SQLite
	down  atomic.Bool
	stall chan struct{} // closed: writes go through
}

var errDown = errors.New("store down")

func (d *downStore) Write(ctx context.Context, es []Entry) (int, error) {
	select {
	case <-d.stall:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	if d.down.Load() {
		return 0, errDown
	}
	return d.SQLite.Write(ctx, es)
}

func (d *downStore) Append(ctx context.Context, recs []Record) error {
	if d.down.Load() {
		return errDown
	}
	return d.SQLite.Append(ctx, recs)
}

func newDownStore(t *testing.T) *downStore {
	t.Helper()
	stall := make(chan struct{})
	close(stall)
	return &downStore{SQLite: openSQLite(t).(*SQLite), stall: stall}
}

// gaps returns the gap records of a verified trail, and the report.
func gaps(t *testing.T, s Store) ([]Gap, *Report) {
	t.Helper()
	r := verifyTrail(t, s, VerifyOptions{})
	if len(r.Problems) > 0 {
		t.Fatalf("the trail has problems: %+v", r.Problems)
	}
	return r.Gaps, r
}

// TestGapQueueFull: payloads dropped because the queue was full leave a
// gap record in the chain, where they were lost, that counts them and
// names their ids and time range; every payload is either an entry or
// counted in a gap.
func TestGapQueueFull(t *testing.T) {
	s := newDownStore(t)
	s.stall = make(chan struct{})
	r := NewRecorder(RecorderOptions{Store: s, Registerer: prometheus.NewRegistry(), QueueEntries: 10, FlushInterval: time.Millisecond})
	const n = 40
	for _, e := range batch(t, 0, n) {
		r.RecordEntry(e)
	}
	close(s.stall)
	r.Close(context.Background())
	dropped := int64(testutil.ToFloat64(r.m.dropped))
	if dropped < n-10-int64(r.batch) || dropped == 0 {
		t.Fatalf("dropped %d of %d with a queue of 10", dropped, n)
	}
	gs, rep := gaps(t, s)
	// The drops may come in more than one record, as the writer took
	// batches between them.
	var sum GapBody
	for _, g := range gs {
		sum.Count += g.Gap.Count
		sum.IDs = append(sum.IDs, g.Gap.IDs...)
		if g.Gap.Reasons["queueFull"] != g.Gap.Count || g.Gap.From.IsZero() || g.Gap.To.Before(g.Gap.From) {
			t.Errorf("gap %+v: want payloads dropped for a full queue, with their time range", g)
		}
	}
	if len(gs) == 0 || sum.Count != dropped || int64(len(sum.IDs)) != dropped {
		t.Errorf("gaps %+v: want the %d dropped, by id", gs, dropped)
	}
	if got := rep.Chains[0].Entries + sum.Count; got != n {
		t.Errorf("%d entries and %d in gaps, want %d in all", rep.Chains[0].Entries, sum.Count, n)
	}
}

// TestGapStoreDown: entries the store refused past the recorder's
// retries leave a gap record, written once the store is back, before
// the entries that came after; the recorder then goes on.
func TestGapStoreDown(t *testing.T) {
	s := newDownStore(t)
	r := NewRecorder(RecorderOptions{Store: s, Registerer: prometheus.NewRegistry(), FlushInterval: time.Millisecond, retryBase: time.Millisecond})
	recordRounds(t, r, 0, 5, 5)
	s.down.Store(true)
	for _, e := range batch(t, 5, 7) {
		r.RecordEntry(e)
	}
	testenv.Eventually(t, 30*time.Second, "the entries to fail past their retries", func() bool {
		return testutil.ToFloat64(r.m.failed) == 7
	})
	s.down.Store(false)
	recordRounds(t, r, 12, 3, 3)
	r.Close(context.Background())
	gs, rep := gaps(t, s)
	if len(gs) != 1 || gs[0].Gap.Count != 7 || gs[0].Gap.Reasons["storeFailed"] != 7 || len(gs[0].Gap.IDs) != 7 {
		t.Fatalf("gaps %+v: want one of the 7 entries refused (written once the store was back)", gs)
	}
	// start, 5 entries, the gap, 3 entries.
	if gs[0].Pos != 7 || rep.Chains[0].Entries != 8 {
		t.Errorf("gap at position %d, %d entries: want the gap at 7, between the entries before and after", gs[0].Pos, rep.Chains[0].Entries)
	}
}

// TestGapBehind: payloads a caller leaves out (Drop: a standby too far
// behind) are in gap records too. The writer may write the first drop's
// record before the second drop: the records count both between them.
func TestGapBehind(t *testing.T) {
	s := newDownStore(t)
	r := NewRecorder(RecorderOptions{Store: s, Registerer: prometheus.NewRegistry(), FlushInterval: time.Millisecond})
	r.Drop()
	r.Drop()
	testenv.Eventually(t, 30*time.Second, "the gap records", func() bool {
		return testutil.ToFloat64(r.m.trail.WithLabelValues("gap", "written")) >= 1 && !r.gapPending()
	})
	r.Close(context.Background())
	gs, _ := gaps(t, s)
	var behind int64
	for _, g := range gs {
		behind += g.Gap.Reasons["behind"]
		if g.Gap.Count != g.Gap.Reasons["behind"] {
			t.Errorf("gap %+v: want only payloads left behind", g)
		}
	}
	if len(gs) == 0 || len(gs) > 2 || behind != 2 {
		t.Errorf("gaps %+v: want 2 left behind, in one record or two", gs)
	}
}

// TestGapsBetween: the gap records are found by when they were written,
// newest first, within the times asked and the limit.
func TestGapsBetween(t *testing.T) {
	trailStores(t, func(t *testing.T, ts *trailStore) {
		s := ts.open(t, "", false)
		write(t, s, batch(t, 0, 3)...)
		before := time.Now()
		for i := range 3 {
			body, _ := json.Marshal(GapBody{Count: int64(i + 1), From: before, To: before, Reasons: map[string]int64{gapQueueFull: int64(i + 1)}})
			if err := s.(Trail).Append(context.Background(), []Record{{Kind: LinkGap, Body: body}}); err != nil {
				t.Fatal(err)
			}
			write(t, s, batch(t, 3+i, 1)...)
		}
		after := time.Now()
		gl := s.(GapLister)
		gs, err := gl.GapsBetween(context.Background(), before.Add(-time.Millisecond), after.Add(time.Millisecond), 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(gs) != 2 || gs[0].Gap.Count != 3 || gs[1].Gap.Count != 2 || gs[0].At.Before(gs[1].At) || gs[0].Pos <= gs[1].Pos {
			t.Errorf("gaps %+v: want the last two, newest first", gs)
		}
		if gs, err := gl.GapsBetween(context.Background(), after.Add(time.Millisecond), MaxTime, 10); err != nil || len(gs) != 0 {
			t.Errorf("gaps after the last: %+v, %v; want none", gs, err)
		}
	})
}
