package rules

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"

	"github.com/fieldwatch/fieldwatch/change"
)

const statesRules = `rules:
  - name: states
    match: {resources: [{group: '*', kind: '*'}, {group: '', kind: Secret}], namespaces: [ns]}
    on: [delete]
    fields: [spec.never]
    redact: ['spec.items[name=a].value', 'spec.m[*]', 'spec["x.y"]']
    history: {states: true}
    actions: [{log: {}}]
  - name: more-redaction
    match: {resources: [{group: '*', kind: '*'}]}
    redact: ['spec.items[*].secret']
    history: {states: true}
    actions: [{log: {}}]
`

var thingsResource = change.Resource{Group: "example.com", Version: "v1", Resource: "things", Kind: "Thing", Namespaced: true, Custom: true, Preferred: true}

// TestStateKinds: which changes keep states, and what each holds.
func TestStateKinds(t *testing.T) {
	set, err := Parse("s.yaml", []byte(statesRules))
	if err != nil {
		t.Fatal(err)
	}
	obj := func(rv string, size int64, ns string) map[string]any {
		return map[string]any{"apiVersion": "example.com/v1", "kind": "Thing",
			"metadata": map[string]any{"name": "o", "namespace": ns, "uid": "u", "resourceVersion": rv,
				"managedFields": []any{map[string]any{"manager": "kubectl", "operation": "Update", "time": "2026-01-01T00:00:00Z"}}},
			"spec": map[string]any{"size": size}}
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 6789, time.UTC)
	for _, tc := range []struct {
		name          string
		c             Change
		want          bool
		base, ops, rv string
		full          bool
	}{
		{"created", Change{Type: change.Created, New: obj("1", 1, "ns")}, true, "", "", "1", true},
		{"updated", Change{Type: change.Updated, Old: obj("1", 1, "ns"), New: obj("2", 2, "ns")}, true, "1",
			`[{"op":"replace","path":"/spec/size","value":2,"oldValue":1}]`, "2", true},
		{"only the resourceVersion", Change{Type: change.Updated, Old: obj("1", 1, "ns"), New: obj("2", 1, "ns")}, true, "1", `[]`, "2", true},
		{"deleted", Change{Type: change.Deleted, Old: obj("2", 2, "ns")}, true, "2", "", "2", false},
		{"a Secret in a namespace no rule selects", Change{Type: change.Created, Resource: secretsResource, New: obj("1", 1, "other")}, false, "", "", "", false},
		{"a Secret", Change{Type: change.Created, Resource: secretsResource, New: obj("1", 1, "ns")}, true, "", "", "1", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			if c.Resource.Resource == "" {
				c.Resource = thingsResource
			}
			c.Time = at
			st, ok, err := set.State(&c)
			if err != nil || ok != tc.want {
				t.Fatalf("ok %v, err %v; want ok %v", ok, err, tc.want)
			}
			if !ok {
				return
			}
			if st.Base != tc.base || string(st.Ops) != tc.ops || st.Object.ResourceVersion != tc.rv || (st.Full != nil) != tc.full {
				t.Errorf("base %q ops %s rv %q full %s", st.Base, st.Ops, st.Object.ResourceVersion, st.Full)
			}
			if !st.Time.Equal(at.Truncate(time.Microsecond)) || st.Object.UID != "u" || st.Object.Namespace != tc.c.meta()["metadata"].(map[string]any)["namespace"] {
				t.Errorf("time %v object %+v", st.Time, st.Object)
			}
			if bytes.Contains(st.Full, []byte("managedFields")) || bytes.Contains(st.Full, []byte("resourceVersion")) {
				t.Errorf("full state keeps managedFields or resourceVersion: %s", st.Full)
			}
			if tc.c.Type == change.Created && st.Manager != "kubectl" {
				t.Errorf("manager %q, want kubectl", st.Manager)
			}
		})
	}
	if !set.KeepsStates(thingsResource) || !set.KeepsStates(secretsResource) {
		t.Error("KeepsStates: want true for things and Secrets")
	}
}

// FuzzStates: for random objects and updates, the operations of a state
// applied to the previous state give the new one exactly, and no
// redacted value is in either, on Secrets and other resources.
func FuzzStates(f *testing.F) {
	set, err := Parse("s.yaml", []byte(statesRules))
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte("seed: a list of named items, maps and leaves"), []byte("another seed, other values"), uint8(0))
	f.Add([]byte{3, 3, 2, 3, 1, 5, 2, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 2, 3, 3, 3, 1, 0, 9, 9, 2}, []byte{3, 3, 2, 3, 1, 5, 2, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 2, 3, 3, 3, 1, 0, 9, 9, 3}, uint8(1))
	f.Add(bytes.Repeat([]byte{5, 2, 3, 1}, 40), bytes.Repeat([]byte{5, 2, 3, 2}, 40), uint8(1))
	resources := []change.Resource{secretsResource, thingsResource}
	f.Fuzz(func(t *testing.T, a, b []byte, res uint8) {
		old := (&objGen{b: a}).object("1")
		g := &objGen{b: b, n: 100000} // other tokens
		new := g.object("2")
		c := &Change{Type: change.Updated, Resource: resources[int(res)%len(resources)], Old: old, New: new, Time: time.Unix(0, 0)}
		prev, ok, err := set.State(&Change{Type: change.Created, Resource: c.Resource, New: old, Time: c.Time})
		if err != nil || !ok {
			t.Fatalf("created: ok %v err %v", ok, err)
		}
		st, ok, err := set.State(c)
		if err != nil || !ok {
			t.Fatalf("updated: ok %v err %v", ok, err)
		}
		patch, err := jsonpatch.DecodePatch(st.Ops)
		if err != nil {
			t.Fatalf("ops %s: %v", st.Ops, err)
		}
		got, err := patch.Apply(prev.Full)
		if err != nil {
			t.Fatalf("apply %s to %s: %v", st.Ops, prev.Full, err)
		}
		if !jsonEqual(t, got, st.Full) {
			t.Fatalf("ops %s\napplied to %s\ngive %s\nwant  %s", st.Ops, prev.Full, got, st.Full)
		}
		var paths []*fieldPath
		for _, r := range set.Rules() {
			paths = append(paths, r.redact...)
		}
		if isSecret(c.Resource.Group, c.Resource.Resource) {
			paths = append(paths, secretRedact...)
		}
		tokens := map[string]bool{}
		redactedTokens(paths, old, tokens)
		redactedTokens(paths, new, tokens)
		for tok := range tokens {
			for _, b := range [][]byte{prev.Full, st.Full, st.Ops} {
				if bytes.Contains(b, []byte(tok)) {
					t.Fatalf("redacted %s is in a state: %s", tok, b)
				}
			}
		}
	})
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}
