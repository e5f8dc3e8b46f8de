package history

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fieldwatch/fieldwatch/internal/losscheck"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// TestFaultPostgresOutage: the shared history's PostgreSQL fails under a
// steady stream of payloads (200 a second), stopped for 30 s (longer
// than the retry budget of a write that reaches the store) and restarted,
// or SIGKILLed mid-write and restarted. Every payload is recorded once
// the server is back, once per id: none failed, none dropped (the queue
// holds the outage), and the log says what happened.
func TestFaultPostgresOutage(t *testing.T) {
	testenv.SkipShort(t, testenv.NeedsPostgres)
	// Its own server, which a crash must not cost an acknowledged commit.
	pg, err := testenv.NewDurablePostgres()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := pg.Stop(); err != nil {
			t.Error(err)
		}
	}()
	for i, tc := range []struct {
		name string
		halt func() error
		down time.Duration // at least, once the recorder saw the failures
	}{
		{name: "stopped for 30s", halt: pg.Shutdown, down: 30 * time.Second},
		{name: "killed", halt: pg.Kill},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			db := fmt.Sprintf("fault_%d", i)
			if err := pg.CreateDatabase(ctx, db); err != nil {
				t.Fatal(err)
			}
			var logs testenv.SyncBuffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			m := NewMetrics(prometheus.NewRegistry())
			store, err := OpenPostgres(ctx, pg.DSN(db), PostgresOptions{Logger: log, Metrics: m})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = store.Close() }()
			r := NewRecorder(RecorderOptions{Store: store, Metrics: m, Logger: log, FlushInterval: 50 * time.Millisecond})

			var (
				mu   sync.Mutex
				made []losscheck.Write
			)
			count := func() int { mu.Lock(); defer mu.Unlock(); return len(made) }
			stop := make(chan struct{})
			streamed := make(chan struct{})
			go func() { // 200 payloads a second, until stop
				defer close(streamed)
				tick := time.NewTicker(5 * time.Millisecond)
				defer tick.Stop()
				for n := 0; ; n++ {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					uid := fmt.Sprintf("u%07d", n)
					r.Record(fixture{uid: uid, rv: "1", namespace: "ns", name: uid, time: t0.Add(time.Duration(n) * time.Millisecond)}.payload(), Delivered)
					mu.Lock()
					made = append(made, losscheck.Write{Type: "updated", Name: uid, UID: uid, ResourceVersion: "1", At: time.Now()})
					mu.Unlock()
				}
			}()

			testenv.Eventually(t, time.Minute, "entries written before the fault", func() bool { return testutil.ToFloat64(m.written) >= 200 })
			if err := tc.halt(); err != nil {
				t.Fatal(err)
			}
			halted := time.Now()
			before := testutil.ToFloat64(m.errUnavailable)
			testenv.Eventually(t, 2*time.Minute, "writes failing while the server is down", func() bool {
				return testutil.ToFloat64(m.errUnavailable) > before && time.Since(halted) >= tc.down
			})
			if err := pg.Start(); err != nil {
				t.Fatal(err)
			}
			atRestart := count()
			testenv.Eventually(t, time.Minute, "entries written after the restart", func() bool {
				return count() >= atRestart+200
			})
			close(stop)
			<-streamed
			closeCtx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			r.Close(closeCtx)

			var got []losscheck.Delivery
			q := Query{Limit: MaxLimit}
			for {
				p, err := store.Query(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range p.Entries {
					got = append(got, losscheck.Delivery{ID: e.ID, Type: string(e.Type), UID: e.UID, ResourceVersion: e.ResourceVersion})
				}
				if p.Next == nil {
					break
				}
				q.After = p.Next
			}
			mu.Lock()
			o := losscheck.Compare(made, got)
			mu.Unlock()
			t.Logf("%s after %s down; write errors: %v unavailable, %v other", o, time.Since(halted).Round(time.Second),
				testutil.ToFloat64(m.errUnavailable), testutil.ToFloat64(m.errOther))
			if len(o.Lost) > 0 || len(o.Conflicting) > 0 || o.Duplicates > 0 || o.Delivered != o.Writes {
				t.Errorf("the history after the outage: %s; lost (first 10): %v", o, o.Lost[:min(10, len(o.Lost))])
			}
			if f, d := testutil.ToFloat64(m.failed), testutil.ToFloat64(m.dropped); f != 0 || d != 0 {
				t.Errorf("%v entries failed, %v dropped; want none: the queue holds the outage", f, d)
			}
			if !strings.Contains(logs.String(), "kind=unavailable") {
				t.Errorf("no log line says the history store was unavailable:\n%s", logs.String())
			}
		})
	}
}
