package history

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// verifyTrail verifies the trail of s as it is now.
func verifyTrail(t testing.TB, s Store, opts VerifyOptions) *Report {
	t.Helper()
	tr, ok := s.(Trail)
	if !ok {
		t.Fatalf("%T keeps no trail", s)
	}
	r, err := Verify(func(each func(*Link, *Entry) error) error { return tr.Links(context.Background(), each) }, opts)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	return r
}

// trailStore is a store under test with a way to its database that
// goes around it, as someone with access to the file or the database
// would.
type trailStore struct {
	name string
	// open opens the store (again) with the given options.
	open func(t *testing.T, chain string, noTrail bool) Store
	// exec runs SQL on the database directly; table names the entries'
	// table and trail the trail's.
	exec         func(t *testing.T, q string, args ...any)
	table, trail string
}

func sqliteTrailStore(t *testing.T) *trailStore {
	path := filepath.Join(t.TempDir(), "history.db")
	return &trailStore{
		name: "SQLite", table: "entries", trail: "trail",
		open: func(t *testing.T, chain string, noTrail bool) Store {
			t.Helper()
			s, err := OpenSQLite(path, SQLiteOptions{noTrail: noTrail})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		exec: func(t *testing.T, q string, args ...any) {
			t.Helper()
			db, err := sql.Open("sqlite", path)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = db.Close() }()
			if _, err := db.Exec(q, args...); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		},
	}
}

func pgTrailStore(t *testing.T) *trailStore {
	dsn := newPGDatabase(t)
	return &trailStore{
		name: "PostgreSQL", table: pgTable, trail: pgTrailTable,
		open: func(t *testing.T, chain string, noTrail bool) Store {
			t.Helper()
			s, err := OpenPostgres(context.Background(), dsn, PostgresOptions{Chain: chain, noTrail: noTrail})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		exec: func(t *testing.T, q string, args ...any) {
			t.Helper()
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = conn.Close(ctx) }()
			if _, err := conn.Exec(ctx, q, args...); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		},
	}
}

// trailStores runs test on each store.
func trailStores(t *testing.T, test func(t *testing.T, ts *trailStore)) {
	t.Run("SQLite", func(t *testing.T) { test(t, sqliteTrailStore(t)) })
	t.Run("PostgreSQL", func(t *testing.T) { test(t, pgTrailStore(t)) })
}

// batch returns n entries from the k-th on, one object each, a second
// apart; every fifth is late (an older time, written after newer ones).
func batch(t *testing.T, k, n int) []Entry {
	t.Helper()
	es := make([]Entry, n)
	for i := range es {
		at := t0.Add(time.Duration(k+i) * time.Second)
		if (k+i)%5 == 4 {
			at = at.Add(-time.Hour)
		}
		// Every third entry names its cluster: both encodings are chained.
		cluster := ""
		if (k+i)%3 == 0 {
			cluster = "prod"
		}
		es[i] = fixture{uid: fmt.Sprintf("u%d", k+i), rv: "1", namespace: "shop", name: "w", user: "alice", cluster: cluster, time: at}.entry(t, Delivered)
	}
	return es
}

// TestTrailChain: every entry written has its link, repeats have none,
// and a store opened again continues its chain where it was: the trail
// verifies, every link in place.
func TestTrailChain(t *testing.T) {
	trailStores(t, func(t *testing.T, ts *trailStore) {
		s := ts.open(t, "", false)
		write(t, s, batch(t, 0, 40)...)
		write(t, s, batch(t, 30, 20)...) // 10 repeats
		write(t, s, batch(t, 0, 5)...)   // repeats only
		_ = s.Close()
		s = ts.open(t, "", false)
		write(t, s, batch(t, 50, 30)...)
		r := verifyTrail(t, s, VerifyOptions{})
		if !r.Intact() || len(r.Chains) != 1 {
			t.Fatalf("report %+v: want one intact chain", r)
		}
		c := r.Chains[0]
		if c.Chain != DefaultChain || c.Entries != 80 || c.Links != 81 || c.Outside != 0 {
			t.Errorf("chain %+v: want %q with 80 entries after its start", c, DefaultChain)
		}
	})
}

// TestTrailMigration: a store written before the trail gains it when
// opened; its entries are outside the chain, which starts with the
// first write and says how many they are.
func TestTrailMigration(t *testing.T) {
	trailStores(t, func(t *testing.T, ts *trailStore) {
		old := ts.open(t, "", true)
		write(t, old, batch(t, 0, 12)...)
		_ = old.Close()
		ts.exec(t, "DROP TABLE "+ts.trail) // as a version without it left the database
		s := ts.open(t, "", false)
		write(t, s, batch(t, 12, 8)...)
		r := verifyTrail(t, s, VerifyOptions{})
		if !r.Intact() || len(r.Chains) != 1 || r.Chains[0].Outside != 12 || r.Chains[0].Entries != 8 {
			t.Fatalf("report %+v: want one intact chain of 8 entries, 12 outside", r)
		}
	})
}
