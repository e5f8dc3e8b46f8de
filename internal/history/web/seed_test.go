package web

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/history"
	"github.com/fieldwatch/fieldwatch/rules"
)

// The tests' history: payloads rendered by the rules engine (as
// fieldwatch delivers them, attribution included) for Widgets in shop
// and lab, and a CRD change whose breaking check hits objects in both
// namespaces.

var widgets = change.Resource{Group: "example.com", Version: "v1", Resource: "widgets", Kind: "Widget", Namespaced: true, Custom: true, Preferred: true}

const seedRules = `rules:
  - name: widget-audit
    match: {resources: [{group: example.com, kind: Widget}]}
    actions: [{log: {}}]
`

// widget returns a Widget object.
func widget(ns, name, uid string, rv int, size int64, color string) map[string]any {
	return map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": name, "namespace": ns, "uid": uid, "resourceVersion": fmt.Sprint(rv)},
		"spec":     map[string]any{"size": size, "color": color},
	}
}

// by is an attribution naming user.
func by(user, verb string) *change.Attribution {
	return &change.Attribution{Match: change.MatchWindow, User: &change.UserInfo{Username: user, Groups: []string{"system:authenticated"}}, Verb: verb, UserAgent: "kubectl/v1.37.2"}
}

// crdPayload is a CRD change as fieldwatch delivers it with crd: {impact:
// true} (docs/payload.md): a removed enum value that rejects one Widget in
// shop and one in lab.
func crdPayload(at time.Time) []byte {
	return fmt.Appendf(nil, `{"id":"crd-uid/900/crd-breaking","time":%q,"rule":"crd-breaking","type":"updated",`+
		`"resource":{"group":"apiextensions.k8s.io","version":"v1","resource":"customresourcedefinitions","kind":"CustomResourceDefinition"},`+
		`"namespace":"","name":"widgets.example.com","uid":"crd-uid","resourceVersion":"900",`+
		`"changes":[{"op":"replace","path":"/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/color/enum","value":["red","blue"],"oldValue":["red","blue","green"]}],`+
		`"actor":{"manager":"kubectl-client-side-apply","operation":"Update","user":{"username":"dave","groups":["system:masters"]},"verb":"update","match":"window"},`+
		`"crd":{"crd":"widgets.example.com","checks":[{"version":"v1","path":"/properties/spec/properties/color/enum","field":"spec.color","check":"enum-values-removed","old":["green"],"severity":"breaking","message":"spec.color no longer accepts \"green\""}],`+
		`"breaking":1,"unknown":0,"safe":0,"scanned":4,"impact":[{"check":"enum-values-removed","version":"v1","path":"/properties/spec/properties/color/enum","field":"spec.color","effect":"rejected","count":2,`+
		`"objects":[{"namespace":"lab","name":"w2","field":"spec.color","error":"spec.color: Unsupported value: \"green\""},{"namespace":"shop","name":"w9","field":"spec.color","error":"spec.color: Unsupported value: \"green\""}],`+
		`"message":"2 object(s) fail the new schema at spec.color"}]}}`, at.UTC().Format(rules.TimeFormat))
}

// seed fills a new SQLite history with the test entries, extra more
// generated Widget updates in namespaces bulk-0..9, and returns it.
func seed(t testing.TB, extra int) history.Store {
	t.Helper()
	set, err := rules.Parse("rules.yaml", []byte(seedRules))
	if err != nil {
		t.Fatal(err)
	}
	store, err := history.OpenSQLite(filepath.Join(t.TempDir(), "history.db"), history.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	var entries []history.Entry
	add := func(c *rules.Change) {
		t.Helper()
		firings, errs := set.Eval(c)
		if len(errs) > 0 || len(firings) != 1 {
			t.Fatalf("eval: %v, %d firings", errs, len(firings))
		}
		e, err := history.ParsePayload(firings[0].Payload, history.Delivered)
		if err != nil {
			t.Fatal(err)
		}
		e.Recorded = c.Time
		entries = append(entries, e)
	}
	for i := range extra {
		ns := fmt.Sprintf("bulk-%d", i%10)
		uid := fmt.Sprintf("bulk-uid-%d", i%500)
		add(&rules.Change{Type: change.Updated, Resource: widgets, Time: t0.Add(-time.Duration(extra-i) * time.Second),
			Old: widget(ns, fmt.Sprintf("b%d", i%500), uid, 10+i, int64(i), "blue"), New: widget(ns, fmt.Sprintf("b%d", i%500), uid, 11+i, int64(i+1), "blue"),
			Attribution: by(fmt.Sprintf("bot-%d", i%7), "patch")})
	}
	w1 := func(rv int, size int64, color string) map[string]any {
		return widget("shop", "w1", "w1-uid", rv, size, color)
	}
	w2 := func(rv int, size int64, color string) map[string]any {
		return widget("lab", "w2", "w2-uid", rv, size, color)
	}
	add(&rules.Change{Type: change.Created, Resource: widgets, Time: t0, New: w1(100, 1, "blue"), Attribution: by("alice", "create")})
	add(&rules.Change{Type: change.Created, Resource: widgets, Time: t0.Add(time.Minute), New: w2(101, 5, "green"), Attribution: by("carol", "create")})
	add(&rules.Change{Type: change.Updated, Resource: widgets, Time: t0.Add(2 * time.Minute), Old: w1(100, 1, "blue"), New: w1(102, 3, "blue"), Attribution: by("alice", "patch")})
	add(&rules.Change{Type: change.Updated, Resource: widgets, Time: t0.Add(3 * time.Minute), Old: w2(101, 5, "green"), New: w2(103, 6, "green"), Attribution: by("carol", "patch")})
	add(&rules.Change{Type: change.Updated, Resource: widgets, Time: t0.Add(4 * time.Minute), Old: w1(102, 3, "blue"), New: w1(104, 3, "red"), Attribution: by("bob", "update")})
	crd, err := history.ParsePayload(crdPayload(t0.Add(5*time.Minute)), history.Delivered)
	if err != nil {
		t.Fatal(err)
	}
	crd.Recorded = crd.Time
	entries = append(entries, crd)
	for len(entries) > 0 {
		n := min(len(entries), 500)
		if _, err := store.Write(context.Background(), entries[:n]); err != nil {
			t.Fatal(err)
		}
		entries = entries[n:]
	}
	return store
}
