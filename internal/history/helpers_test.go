package history

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// fixture describes a payload for tests.
type fixture struct {
	uid, rv, rule, typ string
	group, resource    string
	namespace, name    string
	user, imp, manager string
	cluster            string
	time               time.Time
	changes            string // JSON array; default one replace
}

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// payload renders f as fieldwatch renders a payload.
func (f fixture) payload() []byte {
	if f.rule == "" {
		f.rule = "audit"
	}
	if f.typ == "" {
		f.typ = "updated"
	}
	if f.resource == "" {
		f.group, f.resource = "example.com", "widgets"
	}
	if f.changes == "" {
		f.changes = `[{"op":"replace","path":"/spec/size","value":3,"oldValue":1}]`
	}
	id := f.uid + "/" + f.rv + "/" + f.rule
	if f.typ == "deleted" {
		id = f.uid + "/deleted/" + f.rule
	}
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	actor := ""
	if f.manager != "" || f.user != "" {
		actor = `,"actor":{"manager":` + q(f.manager) + `,"operation":"Update"`
		if f.user != "" {
			actor += `,"user":{"username":` + q(f.user) + `,"groups":["system:authenticated"]}`
		}
		if f.imp != "" {
			actor += `,"impersonatedUser":{"username":` + q(f.imp) + `}`
		}
		actor += `,"match":"window"}`
	}
	if f.cluster != "" {
		actor += `,"cluster":` + q(f.cluster)
	}
	return fmt.Appendf(nil, `{"id":%s,"time":%s,"rule":%s,"type":%s,"resource":{"group":%s,"version":"v1","resource":%s,"kind":"Widget"},"namespace":%s,"name":%s,"uid":%s,"resourceVersion":%s,"changes":%s%s}`,
		q(id), q(f.time.UTC().Format("2006-01-02T15:04:05.000000Z")), q(f.rule), q(f.typ), q(f.group), q(f.resource),
		q(f.namespace), q(f.name), q(f.uid), q(f.rv), f.changes, actor)
}

// entry is f as a parsed Entry.
func (f fixture) entry(t testing.TB, source Source) Entry {
	t.Helper()
	e, err := ParsePayload(f.payload(), source)
	if err != nil {
		t.Fatalf("ParsePayload: %v\n%s", err, f.payload())
	}
	e.Recorded = f.time
	return e
}

// write writes entries and returns how many were new.
func write(t testing.TB, s Store, entries ...Entry) int {
	t.Helper()
	n, err := s.Write(context.Background(), entries)
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	return n
}

// ids returns the ids of a page's entries.
func ids(p Page) []string {
	out := make([]string, len(p.Entries))
	for i, e := range p.Entries {
		out[i] = e.ID
	}
	return out
}

// queryAll pages through q and returns every id, in order.
func queryAll(t testing.TB, s Store, q Query) []string {
	t.Helper()
	var out []string
	for pages := 0; ; pages++ {
		if pages > 10000 {
			t.Fatal("paging does not end")
		}
		p, err := s.Query(context.Background(), q)
		if err != nil {
			t.Fatalf("Query: %v", err)
		}
		out = append(out, ids(p)...)
		if p.Next == nil {
			return out
		}
		q.After = p.Next
	}
}
