package web

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/history"
)

var statesT0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// statesStore is a store holding the states of shop/w1 (created by
// alice, its size changed by bob then carol, its owner redacted) and of
// lab/w2 (created by alice).
func statesStore(t *testing.T) history.Store {
	t.Helper()
	s, err := history.OpenSQLite(filepath.Join(t.TempDir(), "history.db"), history.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	st := func(ns, name, uid, rv, base string, typ change.Type, at time.Duration, user, full, ops string) history.State {
		h := history.State{Time: statesT0.Add(at), Type: typ, Group: "example.com", Version: "v1", Resource: "widgets", Kind: "Widget",
			Namespace: ns, Name: name, UID: uid, ResourceVersion: rv, Base: base, User: user, Source: history.Delivered, Full: []byte(full)}
		if ops != "" {
			h.Ops = []byte(ops)
		}
		return h
	}
	obj := func(ns, name string, size int) string {
		return `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"` + name + `","namespace":"` + ns + `"},"spec":{"owner":"<redacted>","size":` + string(rune('0'+size)) + `}}`
	}
	_, err = s.WriteStates(context.Background(), []history.State{
		st("shop", "w1", "u1", "10", "", change.Created, 0, "alice", obj("shop", "w1", 1), ""),
		st("shop", "w1", "u1", "11", "10", change.Updated, time.Hour, "bob", obj("shop", "w1", 2), `[{"op":"replace","path":"/spec/size","value":2,"oldValue":1}]`),
		st("shop", "w1", "u1", "12", "11", change.Updated, 2*time.Hour, "carol", obj("shop", "w1", 3),
			`[{"op":"replace","path":"/spec/size","value":3,"oldValue":2},{"op":"replace","path":"/spec/owner","value":"<redacted>","oldValue":"<redacted>"}]`),
		st("lab", "w2", "u2", "20", "", change.Created, 0, "alice", obj("lab", "w2", 5), ""),
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func getJSON(t *testing.T, url, token string, into any) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK && into != nil {
		if err := json.Unmarshal(body, into); err != nil {
			t.Fatalf("%s: %v: %s", url, err, body)
		}
	}
	return resp.StatusCode, string(body)
}

// TestObjectsAPI: an object at a time and between two times, for a
// caller that may get it (SubjectAccessReview by the real apiserver);
// 403 for one that may not, whatever the store holds; 401 for a forged
// token; 400 with a reason for bad input.
func TestObjectsAPI(t *testing.T) {
	_, base := serve(t, statesStore(t))
	r := newReaders(t)
	w1 := history.ObjectKey{Group: "example.com", Resource: "widgets", Namespace: "shop", Name: "w1"}

	var o APIObject
	if code, body := getJSON(t, base+ObjectURL(w1, statesT0.Add(90*time.Minute), time.Time{}, time.Time{}), r.shop, &o); code != http.StatusOK {
		t.Fatalf("shop reader, shop/w1 at 10:30: %d %s", code, body)
	}
	if string(o.Object) != `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w1","namespace":"shop","resourceVersion":"11"},"spec":{"owner":"<redacted>","size":2}}` ||
		o.Last.User != "bob" || o.Last.ResourceVersion != "11" || o.Applied != 1 {
		t.Errorf("shop/w1 at 10:30: %+v\n%s", o, o.Object)
	}

	var d APIDiff
	if code, body := getJSON(t, base+ObjectURL(w1, time.Time{}, statesT0.Add(time.Minute), statesT0.Add(3*time.Hour)), "", &d); code != http.StatusOK {
		t.Fatalf("loopback, diff: %d %s", code, body)
	}
	if d.From.Last.ResourceVersion != "10" || d.To.Last.ResourceVersion != "12" || len(d.Changes) != 2 ||
		d.Changes[0].User != "bob" || d.Changes[1].User != "carol" || !strings.Contains(string(d.Changes[1].Changes), `"/spec/owner"`) {
		t.Errorf("diff: %+v", d)
	}

	lab := ObjectURL(history.ObjectKey{Group: "example.com", Resource: "widgets", Namespace: "lab", Name: "w2"}, statesT0.Add(time.Hour), time.Time{}, time.Time{})
	for _, tc := range []struct {
		name, token, url string
		code             int
		says             string
	}{
		{"shop reader, lab/w2", r.shop, lab, http.StatusForbidden, "may not get widgets.example.com lab/w2"},
		{"nobody, shop/w1", r.none, ObjectURL(w1, statesT0, time.Time{}, time.Time{}), http.StatusForbidden, "may not get"},
		{"nobody, an object never watched", r.none, ObjectsPath + "widgets.example.com/shop/never?at=1h", http.StatusForbidden, "may not get"},
		{"forged token", "forged", lab, http.StatusUnauthorized, "the token is not valid"},
		{"never watched", "", ObjectsPath + "widgets.example.com/shop/never?at=1h", http.StatusBadRequest, "no recorded states"},
		{"no such resource", "", ObjectsPath + "nosuchthings/shop/w1?at=1h", http.StatusBadRequest, "no recorded states"},
		{"before the first state", "", ObjectURL(w1, statesT0.Add(-time.Minute), time.Time{}, time.Time{}), http.StatusBadRequest, "before the oldest recorded state"},
		{"in the future", "", ObjectsPath + "widgets.example.com/shop/w1?at=2199-01-01T00:00:00Z", http.StatusBadRequest, "in the future"},
		{"a wrong format", "", ObjectsPath + "widgets.example.com/shop/w1?at=yesterday", http.StatusBadRequest, "want an RFC 3339 time"},
		{"no time", "", ObjectsPath + "widgets.example.com/shop/w1", http.StatusBadRequest, "give at=TIME"},
		{"at and from", "", ObjectsPath + "widgets.example.com/shop/w1?at=1h&from=2h&to=1h", http.StatusBadRequest, "give at=TIME"},
		{"from after to", "", ObjectsPath + "widgets.example.com/shop/w1?from=1h&to=2h", http.StatusBadRequest, "from must be before to"},
		{"an unknown parameter", "", ObjectsPath + "widgets.example.com/shop/w1?at=1h&limit=3", http.StatusBadRequest, `parameter \"limit\"`},
		{"a path too long", "", ObjectsPath + "widgets.example.com/shop/w1/extra?at=1h", http.StatusBadRequest, "want /api/v1/history/objects/"},
	} {
		if code, body := getJSON(t, base+tc.url, tc.token, nil); code != tc.code || !strings.Contains(body, tc.says) {
			t.Errorf("%s: %d %s; want %d saying %q", tc.name, code, body, tc.code, tc.says)
		}
	}
}
