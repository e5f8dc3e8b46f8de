package app

import (
	"reflect"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/history"
	"github.com/fieldwatch/fieldwatch/rules"
)

// TestEntryOfIsThePayloads: the history entry the pipeline records from
// a firing's fields is the one the history would read from its payload,
// for each type of change, with and without attribution, with a value
// JSON escapes, a cluster-scoped object, a cluster's name and a secret's
// redaction.
func TestEntryOfIsThePayloads(t *testing.T) {
	set, err := rules.Parse("rules.yaml", []byte(`rules:
  - name: widgets
    match: {resources: [{group: example.com, resource: widgets}]}
    actions: [{log: {}}]
  - name: secrets
    match: {resources: [{group: "", resource: secrets}]}
    actions: [{log: {}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	widgets := change.Resource{Group: "example.com", Version: "v1", Resource: "widgets", Kind: "Widget", Namespaced: true, Custom: true, Preferred: true}
	clusterWidgets := widgets
	clusterWidgets.Namespaced = false
	secrets := change.Resource{Version: "v1", Resource: "secrets", Kind: "Secret", Namespaced: true, Preferred: true}
	obj := func(ns, rv string, manager string) map[string]any {
		meta := map[string]any{"name": "w-\"1\"", "uid": "6a1f-2", "resourceVersion": rv,
			"managedFields": []any{map[string]any{"manager": manager, "operation": "Update", "time": "2026-12-05T12:00:00Z"}}}
		if ns != "" {
			meta["namespace"] = ns
		}
		return map[string]any{"metadata": meta, "spec": map[string]any{"size": rv}, "data": map[string]any{"k": "djE="}}
	}
	at := time.Date(2026, 12, 5, 12, 0, 1, 987654321, time.Local)
	alice := &change.Attribution{Match: change.MatchExact, User: &change.UserInfo{Username: "admin"}, ImpersonatedUser: &change.UserInfo{Username: "alice"}}
	for _, tc := range []struct {
		name string
		c    rules.Change
	}{
		{"updated, attributed, a cluster named", rules.Change{Type: change.Updated, Resource: widgets, Old: obj("shop", "1", "kubectl"), New: obj("shop", "2", "kubectl-edit"), Time: at,
			Attribution: alice, Cluster: "prod"}},
		{"created, cluster-scoped", rules.Change{Type: change.Created, Resource: clusterWidgets, New: obj("", "3", "helm"), Time: at}},
		{"deleted, unattributed", rules.Change{Type: change.Deleted, Resource: widgets, Old: obj("shop", "4", "kubectl"), Time: at,
			Attribution: &change.Attribution{Match: change.MatchNone}}},
		{"secret", rules.Change{Type: change.Updated, Resource: secrets, Old: obj("vault", "5", "a"), New: obj("vault", "6", "b"), Time: at}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			firings, errs := set.Eval(&tc.c)
			if len(errs) > 0 || len(firings) != 1 {
				t.Fatalf("%d firings, %v", len(firings), errs)
			}
			for _, source := range []history.Source{history.Delivered, history.Confirmed} {
				got := entryOf(&firings[0], source)
				want, err := history.ParsePayload(firings[0].Payload, source)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("entryOf  %+v\nParsePayload %+v", got, want)
				}
			}
		})
	}
}
