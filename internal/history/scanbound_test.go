package history

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// million is how many entries TestScanBoundOverAMillion fills a store
// with.
const million = 1000000

// sqliteEntries is how many it fills SQLite with: a fifth under -race,
// where filling a million takes minutes (PostgreSQL, not instrumented,
// takes the million either way).
func sqliteEntries() int {
	if raceDetector {
		return million / 5
	}
	return million
}

// fillSQLite writes n entries of 50 namespaces straight into s's table
// (the recorder would take minutes under -race). Its in-memory index
// does not know them: queries by uid or namespace do not find them.
func fillSQLite(t *testing.T, s *SQLite, n int) {
	t.Helper()
	ctx := context.Background()
	start := t0.UnixMicro()
	_, err := s.write.ExecContext(ctx, `WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i < ?)
INSERT INTO entries(seq, id, recorded, rule, type, grp, resource, namespace, name, uid, usr, imp, source, payload)
SELECT (? + i * 1000) * 1024, 'u' || i || '/1/audit', ? + i * 1000, 'audit', 'updated', 'example.com', 'widgets',
  'ns-' || (i % 50), 'w' || (i % 20000), 'u' || (i % 20000), 'alice', '', 'delivered', '{}' FROM c`, n-1, start, start)
	if err != nil {
		t.Fatal(err)
	}
}

// fillPostgres writes n entries of 50 namespaces straight into p's table.
func fillPostgres(t *testing.T, p *Postgres, n int) {
	t.Helper()
	ctx := context.Background()
	start := t0.UnixMicro()
	_, err := p.pool.Exec(ctx, `INSERT INTO `+pgTable+` (id, time, recorded, rule, type, grp, resource, namespace, name, uid, usr, imp, source, bytes, payload)
SELECT 'u' || i || '/1/audit', $1::bigint + i * 1000, $1::bigint + i * 1000, 'audit', 'updated', 'example.com', 'widgets',
  'ns-' || (i % 50), 'w' || (i % 20000), 'u' || (i % 20000), 'alice', '', 'delivered', 300, '{}'::bytea FROM generate_series(0, $2::int - 1) AS i`, start, n)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.pool.Exec(ctx, "ANALYZE "+pgTable); err != nil {
		t.Fatal(err)
	}
}

// TestScanBoundOverAMillion: a filter that matches nothing, over a
// history of a million entries, goes through at most the scan window a
// page, and the next page starts where it stopped. What a page reads is
// counted, not timed: the entries between two cursors are counted in
// the table; SQLite's work is its thread's CPU time beside a count over
// the whole table (the same rows, all of them); PostgreSQL's is what
// EXPLAIN ANALYZE says its plan read. A page used to count only the
// entries that matched, and `?name=nonexistent` walked the whole history.
func TestScanBoundOverAMillion(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a million entries")
	}
	for _, store := range []string{"sqlite", "postgres"} {
		t.Run(store, func(t *testing.T) {
			var s Store
			var between func(newer, older *Cursor) int
			var cost func(q Query) (window, full float64)
			ctx := context.Background()
			entries := million
			switch store {
			case "sqlite":
				sq := openSQLite(t).(*SQLite)
				entries = sqliteEntries()
				fillSQLite(t, sq, entries)
				s = sq
				between = func(newer, older *Cursor) int {
					var n int
					if err := sq.read.QueryRowContext(ctx, "SELECT count(*) FROM entries WHERE seq < ? AND seq >= ?", newer.Seq, older.Seq).Scan(&n); err != nil {
						t.Fatal(err)
					}
					return n
				}
				cost = func(q Query) (float64, float64) {
					window := onThread(t, func() error { _, err := sq.Query(ctx, q); return err })
					full := onThread(t, func() error {
						var n int
						return sq.read.QueryRowContext(ctx, "SELECT count(*) FROM entries WHERE name = 'nonexistent'").Scan(&n)
					})
					return window.Seconds(), full.Seconds()
				}
			case "postgres":
				pg := openPostgres(t).(*Postgres)
				fillPostgres(t, pg, million)
				s = pg
				between = func(newer, older *Cursor) int {
					var n int
					if err := pg.pool.QueryRow(ctx, "SELECT count(*) FROM "+pgTable+" WHERE (time, seq) < ($1, $2) AND (time, seq) >= ($3, $4)",
						newer.Time, newer.Seq, older.Time, older.Seq).Scan(&n); err != nil {
						t.Fatal(err)
					}
					return n
				}
				cost = func(q Query) (float64, float64) {
					b := build(&q, false)
					read := func(sqlText string, args []any) float64 {
						var plan []map[string]any
						var raw []byte
						if err := pg.pool.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+dollars(sqlText), args...).Scan(&raw); err != nil {
							t.Fatal(err)
						}
						if err := json.Unmarshal(raw, &plan); err != nil {
							t.Fatal(err)
						}
						return rowsRead(plan[0]["Plan"].(map[string]any))
					}
					w, wargs := b.window(pgTable)
					var c Cursor
					var count int
					if err := pg.pool.QueryRow(ctx, dollars(w), wargs...).Scan(&c.Time, &c.Seq, &count); err != nil {
						t.Fatal(err)
					}
					h, hargs := b.heads(pgTable, pgHeads, q.limit()+1, &c, nil, nil)
					return read(w, wargs) + read(h, hargs), read("SELECT count(*) FROM "+pgTable+" WHERE name = 'nonexistent'", nil)
				}
			}
			q := Query{Name: "nonexistent"}
			walked := 0
			for page := 0; page < 3; page++ {
				p, err := s.Query(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				if len(p.Entries) != 0 || p.Next == nil || p.Scanned != scanWindow {
					t.Fatalf("page %d: %d entries, next %v, scanned %d; want none, a cursor and the window (%d)", page, len(p.Entries), p.Next, p.Scanned, scanWindow)
				}
				newer := &Cursor{Time: MaxTime.UnixMicro(), Seq: seqOf(MaxTime)}
				if q.After != nil {
					newer = q.After
				}
				if n := between(newer, p.Next); n != scanWindow {
					t.Errorf("page %d went through %d entries, want the window's %d", page, n, scanWindow)
				}
				walked += p.Scanned
				q.After = p.Next
			}
			window, full := cost(Query{Name: "nonexistent"})
			t.Logf("%d entries: a page went through %d; its cost %.4g, a count over the whole table %.4g", entries, scanWindow, window, full)
			if window*float64(entries/scanWindow)/5 > full {
				t.Errorf("a page cost %.4g, more than five times its share (%d of %d entries) of a count over the whole history (%.4g): the scan is not bounded by the window",
					window, scanWindow, entries, full)
			}
		})
	}
}

// onThread runs fn on a goroutine locked to an OS thread and returns the
// CPU time that thread spent: SQLite (modernc.org/sqlite) runs on the
// goroutine that queries.
func onThread(t *testing.T, fn func() error) time.Duration {
	t.Helper()
	type result struct {
		cpu time.Duration
		err error
	}
	done := make(chan result)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		before, ok := threadCPU()
		err := fn()
		after, _ := threadCPU()
		if !ok {
			err = fmt.Errorf("no thread CPU time on this system")
		}
		done <- result{after - before, err}
	}()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.cpu
}

// rowsRead sums, over a plan's scans of the history's table, the rows
// they returned and those their filter removed, per loop.
func rowsRead(node map[string]any) float64 {
	var n float64
	if rel, _ := node["Relation Name"].(string); rel == pgTable {
		loops, _ := node["Actual Loops"].(float64)
		rows, _ := node["Actual Rows"].(float64)
		removed, _ := node["Rows Removed by Filter"].(float64)
		n += (rows + removed) * max(loops, 1)
	}
	if kids, ok := node["Plans"].([]any); ok {
		for _, k := range kids {
			if m, ok := k.(map[string]any); ok {
				n += rowsRead(m)
			}
		}
	}
	return n
}
