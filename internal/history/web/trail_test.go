package web

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/internal/history"
)

// TestTrailMark: the timeline says whether the trail's last verification
// in place covered its entries and found them intact: not yet before the
// first, verified after it, in part once an entry came after it, and
// with problems once a row was edited, that entry marked. The summary
// at /history/trail names the chain and the entry to a caller who may
// read everything, and only the counts to a one-namespace reader.
func TestTrailMark(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	store, err := history.OpenSQLite(path, history.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	entry := func(i int, recorded time.Time) history.Entry {
		t.Helper()
		p := fmt.Sprintf(`{"id":"u%d/1/r","time":%q,"rule":"r","type":"updated","resource":{"group":"example.com","version":"v1","resource":"widgets","kind":"Widget"},"namespace":"lab","name":"w%d","uid":"u%d","resourceVersion":"1","changes":[]}`,
			i, t0.Add(time.Duration(i)*time.Second).Format(time.RFC3339Nano), i, i)
		e, err := history.ParsePayload([]byte(p), history.Delivered)
		if err != nil {
			t.Fatal(err)
		}
		e.Recorded = recorded
		return e
	}
	var es []history.Entry
	for i := range 5 {
		es = append(es, entry(i, time.Now()))
	}
	if _, err := store.Write(context.Background(), es); err != nil {
		t.Fatal(err)
	}
	v := history.NewVerifier(store, history.VerifierOptions{})
	_, base := serve(t, store, func(o *Options) { o.Verification = v.Last })
	timeline := func(want ...string) string {
		t.Helper()
		code, _, html := get(t, base, "/history", "", "")
		for _, w := range want {
			if code != 200 || !strings.Contains(html, w) {
				t.Errorf("the timeline: %d, want %q in:\n%s", code, w, html)
			}
		}
		return html
	}
	timeline(`class="mark pending"`, "Not verified yet: the trail&#39;s first verification has not finished.")

	v.VerifyNow(context.Background())
	timeline(`class="mark verified"`, "Verified: every entry here was in the trail intact; no signing key", `href="/history/trail"`)

	if _, err := store.Write(context.Background(), []history.Entry{entry(5, time.Now())}); err != nil {
		t.Fatal(err)
	}
	timeline(`class="mark partial"`, "1 of 6 entries here were recorded after the last verification")

	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	if _, err := db.Exec(`UPDATE entries SET namespace = 'kube-system' WHERE id = 'u2/1/r'`); err != nil {
		t.Fatal(err)
	}
	v.VerifyNow(context.Background())
	html := timeline(`class="mark problems"`, "Not verified: the verification found 1 problem in the trail, 1 of them with entries on this page (marked).")
	if n := strings.Count(html, `class="badge problem"`); n != 1 {
		t.Errorf("%d entries marked, want the edited one", n)
	}

	code, _, summary := get(t, base, "/history/trail", "", "")
	if code != 200 || !strings.Contains(summary, "found <strong>1 problem</strong>") || !strings.Contains(summary, `<td>local</td>`) ||
		!strings.Contains(summary, "entry <code>u2/1/r</code>") {
		t.Errorf("the summary as loopback: %d\n%s", code, summary)
	}
	r := newReaders(t)
	code, _, summary = get(t, base, "/history/trail", r.lab, "")
	if code != 200 || !strings.Contains(summary, "found <strong>1 problem</strong>") || strings.Contains(summary, "u2/1/r") ||
		strings.Contains(summary, "<td>local</td>") || !strings.Contains(summary, "shown to callers who may list every resource") {
		t.Errorf("the summary as the lab reader: %d\n%s", code, summary)
	}
}
