package rules

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// Hostile inputs: one object must not stall evaluation. Every cost here
// grows linearly with the object's size; the benchmarks show the growth
// at several sizes, the tests hold the largest size to a deadline the
// linear code meets by orders of magnitude.

var secretsResource = change.Resource{Version: "v1", Resource: "secrets", Kind: "Secret", Namespaced: true, Preferred: true}

// manyKeySecret returns a Secret with n keys in data, the values made of
// gen.
func manyKeySecret(n int, gen string) map[string]any {
	data := make(map[string]any, n)
	for i := range n {
		data[fmt.Sprintf("key-%06d", i)] = fmt.Sprintf("c2VjcmV0LSVk-%s-%d", gen, i)
	}
	return map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": "big", "namespace": "ns", "uid": "u-1", "resourceVersion": gen},
		"data":     data,
	}
}

// secretRotation is an update of an n-key Secret in which every value
// changes.
func secretRotation(n int) *Change {
	return &Change{
		Type: change.Updated, Resource: secretsResource,
		Old: manyKeySecret(n, "1"), New: manyKeySecret(n, "2"),
		Time: time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC),
	}
}

// secretRules reads data (every changed key is a change to redact) and
// includes the whole object (one value with every key to redact).
const secretRules = `rules:
  - name: data
    match: {resources: [{group: "", kind: Secret}]}
    fields: [data]
    includeObject: true
    actions: [{log: {}}]
`

// longList returns an object whose spec.items holds n items, each with a
// field that changes (gen) and one that does not.
func longList(n int, gen int) map[string]any {
	items := make([]any, n)
	for i := range items {
		items[i] = map[string]any{"name": fmt.Sprintf("i%d", i), "seen": int64(gen), "size": int64(i)}
	}
	return map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w", "namespace": "ns", "uid": "u-2", "resourceVersion": fmt.Sprint(gen)},
		"spec":     map[string]any{"items": items, "size": int64(gen)},
	}
}

// ignoreRules ignore a field of every item of a long list.
const ignoreRules = `rules:
  - name: ignore
    match: {resources: [{group: example.com, kind: Widget}]}
    ignoreFields: ['spec.items[*].seen']
    actions: [{log: {}}]
`

func longListUpdate(n int) *Change {
	return &Change{
		Type:     change.Updated,
		Resource: change.Resource{Group: "example.com", Version: "v1", Resource: "widgets", Kind: "Widget", Namespaced: true, Custom: true, Preferred: true},
		Old:      longList(n, 1), New: longList(n, 2),
		Time: time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC),
	}
}

func benchmarkHostile(b *testing.B, rules string, c *Change) {
	set, err := Parse("hostile.yaml", []byte(rules))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if f, errs := set.Eval(c); len(f) != 1 || len(errs) > 0 {
			b.Fatalf("got %d firings, errors %v; want 1 firing", len(f), errs)
		}
	}
}

// BenchmarkRedactSecretKeys evaluates an update of a Secret whose every
// key changed, with a rule that reads data and includes the object: the
// cost per key must stay flat as the keys grow.
func BenchmarkRedactSecretKeys(b *testing.B) {
	for _, n := range []int{2000, 4000, 16000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) { benchmarkHostile(b, secretRules, secretRotation(n)) })
	}
}

// BenchmarkIgnoreAllItems evaluates an update of a long list with
// ignoreFields over every item.
func BenchmarkIgnoreAllItems(b *testing.B) {
	for _, n := range []int{4000, 8000, 32000} {
		b.Run(fmt.Sprintf("items=%d", n), func(b *testing.B) { benchmarkHostile(b, ignoreRules, longListUpdate(n)) })
	}
}

// fieldsRules read a field of every item of a long list: a creation
// gives one change per item.
const fieldsRules = `rules:
  - name: fields
    match: {resources: [{group: example.com, kind: Widget}]}
    fields: ['spec.items[*].size']
    actions: [{log: {}}]
`

// BenchmarkFieldsAllItems evaluates the creation of a long list with a
// rule whose field selects every item.
func BenchmarkFieldsAllItems(b *testing.B) {
	for _, n := range []int{4000, 8000, 32000} {
		c := longListUpdate(n)
		c.Type, c.Old = change.Created, nil
		b.Run(fmt.Sprintf("items=%d", n), func(b *testing.B) { benchmarkHostile(b, fieldsRules, c) })
	}
}

// TestHostileObjectsEvaluateInLinearTime evaluates the largest inputs of
// the benchmarks above under a deadline on the CPU time of the thread
// that evaluates (the wall clock counts the machine's other work: under
// make test's load one evaluation took 11 s of it): quadratic code took
// 53 s (16,000 Secret keys) and 109 s (ignoreFields over 32,000 items)
// without -race; linear code takes well under a second.
func TestHostileObjectsEvaluateInLinearTime(t *testing.T) {
	testenv.SkipShort(t, testenv.LoadTest)
	created := longListUpdate(32000)
	created.Type, created.Old = change.Created, nil
	tests := []struct {
		name, rules string
		c           *Change
		check       func(t *testing.T, p map[string]any)
	}{
		{"secret with 16,000 keys", secretRules, secretRotation(16000), func(t *testing.T, p map[string]any) {
			if n := len(p["changes"].([]any)); n != 16000 {
				t.Errorf("got %d changes, want 16000", n)
			}
		}},
		{"ignoreFields over 32,000 items", ignoreRules, longListUpdate(32000), func(t *testing.T, p map[string]any) {
			if got, _ := json.Marshal(p["changes"]); string(got) != `[{"oldValue":1,"op":"replace","path":"/spec/size","value":2}]` {
				t.Errorf("changes = %s, want only /spec/size", got)
			}
		}},
		{"fields over 32,000 items", fieldsRules, created, func(t *testing.T, p map[string]any) {
			if n := len(p["changes"].([]any)); n != 32000 {
				t.Errorf("got %d changes, want 32000", n)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := Parse("hostile.yaml", []byte(tt.rules))
			if err != nil {
				t.Fatal(err)
			}
			var f []Firing
			var errs []error
			if d := testenv.SpentCPU(t, func() { f, errs = set.Eval(tt.c) }); d > 10*time.Second {
				t.Errorf("evaluation took %v of CPU, want well under 10s", d)
			}
			if len(f) != 1 || len(errs) > 0 {
				t.Fatalf("got %d firings, errors %v; want 1 firing", len(f), errs)
			}
			if bytes.Contains(f[0].Payload, []byte("c2VjcmV0")) {
				t.Errorf("a Secret value is in the payload")
			}
			var p map[string]any
			if err := json.Unmarshal(f[0].Payload, &p); err != nil {
				t.Fatal(err)
			}
			tt.check(t, p)
		})
	}
}
