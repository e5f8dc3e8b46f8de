package history

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func openSQLite(t *testing.T) Store {
	t.Helper()
	s, err := OpenSQLite(filepath.Join(t.TempDir(), "history.db"), SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

func TestSQLite(t *testing.T) { storeSuite(t, openSQLite) }

// TestSQLiteIndexInMemory: queries by uid and namespace find late
// entries (a retried delivery's older time) in order, and find the same
// after the file is opened again (the index is rebuilt from the table)
// and after the oldest entries are trimmed; a file of an earlier version,
// with the indexes in it, loses them when opened.
func TestSQLiteIndexInMemory(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "history.db")
	s, err := OpenSQLite(path, SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var all []Entry
	for i := range 60 {
		f := fixture{uid: fmt.Sprintf("u%d", i%4), rv: fmt.Sprint(100 + i), namespace: []string{"shop", "lab", "dev"}[i%3], name: "w",
			rule: []string{"audit", "resize"}[i%2], time: t0.Add(time.Duration(i) * time.Minute)}
		if i%10 == 9 {
			f.time = t0.Add(time.Duration(i-30) * time.Minute) // late: written after newer ones
		}
		all = append(all, f.entry(t, Delivered))
		write(t, s, all[len(all)-1]) // one batch each: the late ones come after newer keys
	}
	want := func(keep func(Entry) bool) []string {
		es := slices.Clone(all)
		slices.SortStableFunc(es, func(a, b Entry) int { return b.Time.Compare(a.Time) })
		var ids []string
		for _, e := range es {
			if keep(e) {
				ids = append(ids, e.ID)
			}
		}
		return ids
	}
	queries := []struct {
		q    Query
		keep func(Entry) bool
	}{
		{Query{UID: "u1"}, func(e Entry) bool { return e.UID == "u1" }},
		{Query{Namespace: "lab"}, func(e Entry) bool { return e.Namespace == "lab" }},
		{Query{Namespace: "lab", Rule: "resize"}, func(e Entry) bool { return e.Namespace == "lab" && e.Rule == "resize" }},
		{Query{UID: "u2", Since: t0.Add(10 * time.Minute), Until: t0.Add(40 * time.Minute)}, func(e Entry) bool {
			return e.UID == "u2" && !e.Time.Before(t0.Add(10*time.Minute)) && e.Time.Before(t0.Add(40*time.Minute))
		}},
		{Query{Namespace: "nowhere"}, func(Entry) bool { return false }},
	}
	checkAll := func(when string, s Store) {
		t.Helper()
		for _, tc := range queries {
			for _, limit := range []int{0, 2} {
				q := tc.q
				q.Limit = limit
				if got, w := queryAll(t, s, q), want(tc.keep); !slices.Equal(got, w) {
					t.Errorf("%s: %+v: %v, want %v", when, q, got, w)
				}
			}
		}
	}
	checkAll("written", s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// An earlier version's file: the same table with the indexes in it.
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, ddl := range []string{"CREATE INDEX entries_uid ON entries(uid)", "CREATE INDEX entries_namespace ON entries(namespace)"} {
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	_ = db.Close()

	s, err = OpenSQLite(path, SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	checkAll("opened again", s)
	var indexes int
	if err := s.write.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = 'entries'").Scan(&indexes); err != nil || indexes != 0 {
		t.Errorf("%d indexes of the entries left in the file (%v), want none", indexes, err)
	}

	// Trimmed by age: the index forgets the entries removed.
	cut := t0.Add(20 * time.Minute)
	if tr, err := s.Trim(ctx, cut, 0); err != nil || tr.Age == 0 {
		t.Fatalf("Trim = %+v, %v", tr, err)
	}
	all = slices.DeleteFunc(all, func(e Entry) bool { return e.Time.Before(cut) })
	checkAll("trimmed", s)
	if n := s.index.len(); n != len(all) {
		t.Errorf("%d entries indexed, %d kept", n, len(all))
	}
}

// TestSQLiteTrimWaitsForTheIndex: the size bound is applied only once
// the index's load has counted the file's entries (with a count too low
// a trim removes far more than the bound asks).
func TestSQLiteTrimWaitsForTheIndex(t *testing.T) {
	ctx := context.Background()
	s, err := OpenSQLite(filepath.Join(t.TempDir(), "history.db"), SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	var es []Entry
	for i := range 200 {
		es = append(es, fixture{uid: fmt.Sprintf("u%d", i), rv: "1", namespace: "ns", name: "n", time: t0.Add(time.Duration(i) * time.Second)}.entry(t, Delivered))
	}
	write(t, s, es...)
	// As just after opening a large file: the load has not counted yet.
	loading := newMemIndex()
	s.mu.Lock()
	s.index = loading
	s.mu.Unlock()
	s.count.Store(0)
	done := make(chan Trimmed, 1)
	go func() {
		tr, err := s.Trim(ctx, time.Time{}, 1) // a bound every entry is over
		if err != nil {
			t.Error(err)
		}
		done <- tr
	}()
	select {
	case tr := <-done:
		t.Fatalf("Trim returned %+v before the index was loaded", tr)
	case <-time.After(200 * time.Millisecond):
	}
	rows, err := s.read.QueryContext(ctx, "SELECT seq, uid, namespace FROM entries ORDER BY seq")
	if err != nil {
		t.Fatal(err)
	}
	n := loading.load(func(seq *int64, uid, namespace *[]byte) bool {
		if !rows.Next() {
			return false
		}
		return rows.Scan(seq, uid, namespace) == nil
	}, rows.Err, func(n int) { s.count.Add(int64(n)) }) // as loadIndex counts them
	_ = rows.Close()
	select {
	case tr := <-done:
		if tr.Size == 0 {
			t.Errorf("Trim removed nothing of %d entries over the bound", n)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Trim did not return once the index was loaded")
	}
}
