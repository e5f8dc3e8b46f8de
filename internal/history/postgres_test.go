package history

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// pg is the package's PostgreSQL server, started by the first test that
// needs it; each test gets a database of its own.
var (
	pgOnce   sync.Once
	pgServer *testenv.Postgres
	pgErr    error
	pgDBs    atomic.Int64
)

func TestMain(m *testing.M) {
	code := m.Run()
	if pgServer != nil {
		if err := pgServer.Stop(); err != nil {
			fmt.Println("stop PostgreSQL:", err)
		}
	}
	os.Exit(code)
}

// newPGDatabase returns the DSN of a new database on the package's
// server.
func newPGDatabase(t *testing.T) string {
	t.Helper()
	testenv.SkipShort(t, testenv.NeedsPostgres)
	pgOnce.Do(func() { pgServer, pgErr = testenv.NewPostgres() })
	if pgErr != nil {
		t.Fatalf("start PostgreSQL: %v", pgErr)
	}
	name := fmt.Sprintf("history_%d", pgDBs.Add(1))
	if err := pgServer.CreateDatabase(context.Background(), name); err != nil {
		t.Fatal(err)
	}
	return pgServer.DSN(name)
}

func openPostgres(t *testing.T) Store {
	t.Helper()
	s, err := OpenPostgres(context.Background(), newPGDatabase(t), PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestPostgres runs the store's behaviour against a real PostgreSQL
// server.
func TestPostgres(t *testing.T) { storeSuite(t, openPostgres) }

// TestPostgresReplicas: two replicas share one table. Both write the same
// ids at once (the leader delivered them, the standby recorded them from
// the leader's confirmation): one entry per id, the delivered one.
func TestPostgresReplicas(t *testing.T) {
	dsn := newPGDatabase(t)
	ctx := context.Background()
	var stores [2]*Postgres
	var wg sync.WaitGroup
	for i := range stores {
		wg.Go(func() {
			s, err := OpenPostgres(ctx, dsn, PostgresOptions{Chain: fmt.Sprintf("replica-%d", i)}) // both create the table at once
			if err != nil {
				t.Error(err)
				return
			}
			stores[i] = s
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	defer func() { _ = stores[0].Close(); _ = stores[1].Close() }()
	const n = 300
	for i, source := range []Source{Confirmed, Delivered} {
		wg.Go(func() {
			for b := 0; b < n; b += 50 {
				var es []Entry
				for k := b; k < b+50; k++ {
					f := fixture{uid: fmt.Sprintf("u%d", k), rv: "1", namespace: "shop", name: "w", time: t0.Add(time.Duration(k) * time.Second)}
					if source == Delivered {
						f.user = "alice"
					}
					es = append(es, f.entry(t, source))
				}
				if _, err := stores[i].Write(ctx, es); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	p, err := stores[0].Query(ctx, Query{Limit: MaxLimit})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Entries) != n {
		t.Fatalf("%d entries, want %d (one per id)", len(p.Entries), n)
	}
	seen := map[string]bool{}
	for _, e := range p.Entries {
		if seen[e.ID] || e.Source != Delivered || e.User != "alice" {
			t.Fatalf("entry %s: source %s, user %q, seen before %v: want each id once, as delivered", e.ID, e.Source, e.User, seen[e.ID])
		}
		seen[e.ID] = true
	}
	if got := queryAll(t, stores[1], Query{UID: "u7"}); !slices.Equal(got, []string{"u7/1/audit"}) {
		t.Errorf("the other replica reads %v", got)
	}
	// Each replica's chain verifies: the standby's copies that the
	// leader's entries replaced count as superseded.
	r := verifyTrail(t, stores[0], VerifyOptions{})
	if !r.Intact() || len(r.Chains) != 2 {
		t.Errorf("trail of two replicas: %+v", r)
	}
}
