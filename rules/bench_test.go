package rules

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
)

// benchWidget returns a realistic custom object of about 5 KiB, with
// numbers as int64 as Kubernetes' unstructured decoder makes them.
func benchWidget(size int, rv string) map[string]any {
	parts := make([]any, 28)
	for i := range parts {
		parts[i] = map[string]any{
			"name":        fmt.Sprintf("part-%d", i),
			"count":       int64(i + 1),
			"props":       map[string]any{"material": "steel", "finish": "matte", "weight": 1.5 * float64(i)},
			"description": fmt.Sprintf("part %d of the widget", i),
		}
	}
	tags := make([]any, 10)
	for i := range tags {
		tags[i] = fmt.Sprintf("tag-%d", i)
	}
	return map[string]any{
		"apiVersion": "example.com/v1",
		"kind":       "Widget",
		"metadata": map[string]any{
			"name":              "web-1",
			"namespace":         "shop",
			"uid":               "6f1c2a52-94c3-4b7e-a1d2-3c4d5e6f7a8b",
			"resourceVersion":   rv,
			"generation":        int64(size),
			"creationTimestamp": "2026-01-01T00:00:00Z",
			"labels":            map[string]any{"app": "shop", "tier": "frontend", "team": "widgets"},
			"annotations": map[string]any{
				"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat(`{"spec":{"size":3}}`, 40),
				"example.com/owner": "alice",
			},
			"managedFields": []any{
				map[string]any{"manager": "kubectl", "operation": "Apply", "apiVersion": "example.com/v1", "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1",
					"fieldsV1": map[string]any{"f:spec": map[string]any{"f:size": map[string]any{}, "f:color": map[string]any{}, "f:tags": map[string]any{}}}},
				map[string]any{"manager": "widget-controller", "operation": "Update", "apiVersion": "example.com/v1", "time": "2026-01-01T00:00:0" + rv[len(rv)-1:] + "Z", "fieldsType": "FieldsV1", "subresource": "status",
					"fieldsV1": map[string]any{"f:status": map[string]any{"f:phase": map[string]any{}, "f:observedGeneration": map[string]any{}}}},
			},
		},
		"spec": map[string]any{
			"size":  int64(size),
			"color": "blue",
			"owner": "alice",
			"tags":  tags,
			"parts": parts,
		},
		"status": map[string]any{
			"phase":              "Ready",
			"observedGeneration": int64(size - 1),
			"conditions": []any{
				map[string]any{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "AllGood", "message": "the widget is ready"},
			},
		},
	}
}

func benchChange(b *testing.B) *Change {
	b.Helper()
	old, new := benchWidget(3, "100"), benchWidget(4, "101")
	data, _ := json.Marshal(new)
	if len(data) < 4500 || len(data) > 6000 {
		b.Fatalf("object is %d bytes, want about 5 KiB", len(data))
	}
	return &Change{
		Type:     change.Updated,
		Resource: change.Resource{Group: "example.com", Version: "v1", Resource: "widgets", Kind: "Widget", Namespaced: true, Custom: true, Preferred: true},
		New:      new,
		Old:      old,
		Time:     time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC),
	}
}

// Kinds of rules the benchmarks evaluate.
const (
	pathRules       = iota // fields only
	celRules               // a when expression without loops (unmetered)
	meteredCELRules        // a when expression with a loop (cost-limited)
	regexCELRules          // a when expression with matches
)

// benchRules makes n rules of which only the first fires on benchChange.
func benchRules(b *testing.B, n int, kind int) *Set {
	b.Helper()
	var sb strings.Builder
	sb.WriteString("rules:\n")
	for i := range n {
		fmt.Fprintf(&sb, "  - name: r%d\n    match: {resources: [{group: example.com, kind: Widget}], labelSelector: app=shop}\n", i)
		switch {
		case kind == celRules:
			fmt.Fprintf(&sb, "    when: object.spec.size > oldObject.spec.size + %d\n", i)
		case kind == regexCELRules:
			fmt.Fprintf(&sb, "    when: object.spec.size > oldObject.spec.size + %d && object.metadata.name.matches('^web-[0-9]+$')\n", i)
		case kind == meteredCELRules:
			fmt.Fprintf(&sb, "    when: object.spec.size > oldObject.spec.size + %d && object.spec.tags.exists(t, t == 'tag-3')\n", i)
		case i == 0:
			sb.WriteString("    fields: [spec.size]\n")
		default:
			fmt.Fprintf(&sb, "    fields: ['spec.parts[name=part-%d].count']\n", i%20)
		}
		sb.WriteString("    actions: [{log: {}}]\n")
	}
	set, err := Parse("bench.yaml", []byte(sb.String()))
	if err != nil {
		b.Fatal(err)
	}
	return set
}

func benchmarkEval(b *testing.B, n int, kind int) {
	set, c := benchRules(b, n, kind), benchChange(b)
	if f, errs := set.Eval(c); len(f) != 1 || len(errs) > 0 {
		b.Fatalf("got %d firings, errors %v; want 1 firing", len(f), errs)
	}
	b.ReportAllocs()
	for b.Loop() {
		set.Eval(c)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/rule")
}

// Path-only rules: each compares one field of the old and new object.
func BenchmarkEvalPath1(b *testing.B)   { benchmarkEval(b, 1, pathRules) }
func BenchmarkEvalPath10(b *testing.B)  { benchmarkEval(b, 10, pathRules) }
func BenchmarkEvalPath100(b *testing.B) { benchmarkEval(b, 100, pathRules) }

// CEL rules: no fields, so every rule also needs the whole update's
// changes (computed once per change), then its when expression.
func BenchmarkEvalCEL1(b *testing.B)   { benchmarkEval(b, 1, celRules) }
func BenchmarkEvalCEL10(b *testing.B)  { benchmarkEval(b, 10, celRules) }
func BenchmarkEvalCEL100(b *testing.B) { benchmarkEval(b, 100, celRules) }

// Metered CEL rules: a loop in the expression turns on the cost limit.
func BenchmarkEvalCELMetered1(b *testing.B)   { benchmarkEval(b, 1, meteredCELRules) }
func BenchmarkEvalCELMetered10(b *testing.B)  { benchmarkEval(b, 10, meteredCELRules) }
func BenchmarkEvalCELMetered100(b *testing.B) { benchmarkEval(b, 100, meteredCELRules) }

// CEL rules that match a regex.
func BenchmarkEvalCELRegex1(b *testing.B)  { benchmarkEval(b, 1, regexCELRules) }
func BenchmarkEvalCELRegex10(b *testing.B) { benchmarkEval(b, 10, regexCELRules) }

// benchCRD returns a CRD with two versions whose schema has props
// properties under spec, each an object of five typed fields (about 14
// lines of YAML per property); narrow narrows one enum.
func benchCRD(props int, rv string, narrow bool) map[string]any {
	properties := map[string]any{}
	for i := range props {
		enum := []any{"a", "b", "c"}
		if narrow && i == props/2 {
			enum = []any{"a", "b"}
		}
		properties[fmt.Sprintf("field%03d", i)] = map[string]any{
			"type": "object", "description": fmt.Sprintf("field %d of the widget", i),
			"properties": map[string]any{
				"name":    map[string]any{"type": "string", "maxLength": int64(63)},
				"count":   map[string]any{"type": "integer", "minimum": int64(0), "maximum": int64(100)},
				"mode":    map[string]any{"type": "string", "enum": enum},
				"enabled": map[string]any{"type": "boolean"},
				"tags":    map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
			},
		}
	}
	version := func(name string, storage bool) map[string]any {
		return map[string]any{"name": name, "served": true, "storage": storage, "schema": map[string]any{"openAPIV3Schema": map[string]any{
			"type": "object", "properties": map[string]any{"spec": map[string]any{"type": "object", "properties": properties}}}}}
	}
	return map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "widgets.example.com", "uid": "c1", "resourceVersion": rv, "generation": int64(2)},
		"spec": map[string]any{"group": "example.com", "scope": "Namespaced",
			"names":    map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
			"versions": []any{version("v1beta1", false), version("v1", true)}},
		"status": map[string]any{"storedVersions": []any{"v1"}},
	}
}

// BenchmarkEvalCRD evaluates an update of a CRD of about 2,800 lines of
// schema (100 properties in two versions) that narrows one enum, side by
// side: a rule that looks for a schema change through object and
// oldObject (what rules could do before crd), a rule that reads the
// comparison (when: crd.breaking > 0), the same with the comparison in
// the payload, and five rules reading it (the comparison is computed once
// per change).
func BenchmarkEvalCRD(b *testing.B) {
	old, new := benchCRD(100, "1", false), benchCRD(100, "2", true)
	crdRule := func(name, body string) string {
		return "  - name: " + name + "\n    match: {resources: [{group: apiextensions.k8s.io, kind: CustomResourceDefinition}]}\n    on: [update]\n" +
			body + "    actions: [{log: {}}]\n"
	}
	five := ""
	for i := range 5 {
		five += crdRule(fmt.Sprintf("r%d", i), "    when: crd.breaking > 0\n")
	}
	for _, bc := range []struct{ name, rules string }{
		{"object", crdRule("r", "    fields: ['spec.versions[*].schema']\n    when: >-\n      object.spec.versions.exists(n, oldObject.spec.versions.exists(o,\n        o.name == n.name && o.?schema.orValue({}) != n.?schema.orValue({})))\n")},
		{"crd", crdRule("r", "    fields: ['spec.versions[*].schema']\n    when: crd.breaking > 0\n")},
		{"crd-in-payload", crdRule("r", "    fields: ['spec.versions[*].schema']\n    when: crd.breaking > 0\n    crd: {}\n")},
		{"crd-5-rules", five},
	} {
		b.Run(bc.name, func(b *testing.B) {
			set, err := Parse("bench.yaml", []byte("rules:\n"+bc.rules))
			if err != nil {
				b.Fatal(err)
			}
			c := &Change{Type: change.Updated, Resource: crdResource, New: new, Old: old, Time: time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)}
			if f, errs := set.Eval(c); len(f) == 0 || len(errs) > 0 {
				b.Fatalf("got %d firings, errors %v", len(f), errs)
			}
			b.ReportAllocs()
			for b.Loop() {
				set.Eval(c)
			}
		})
	}
}

// BenchmarkEvalLongValue evaluates a ConfigMap update whose changed value
// is a string of 3.5 KB (old and new), a webhook backlog's payload of
// about 7.5 KB, as make bench's drain makes them.
func BenchmarkEvalLongValue(b *testing.B) {
	set, err := Parse("bench.yaml", []byte("rules:\n  - name: counter\n    match: {resources: [{group: '', kind: ConfigMap}]}\n    fields: [data.counter]\n    actions: [{log: {}}]\n"))
	if err != nil {
		b.Fatal(err)
	}
	cm := func(rv, value string) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "cm-00558", "namespace": "bench", "uid": "a470083b-08c5-4073-834f-79e95e5ae618", "resourceVersion": rv,
				"managedFields": []any{map[string]any{"manager": "bench", "operation": "Update", "apiVersion": "v1", "time": "2026-12-05T14:05:03Z"}}},
			"data": map[string]any{"counter": value}}
	}
	pad := strings.Repeat("x", 3500)
	c := &Change{Type: change.Updated, Resource: change.Resource{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespaced: true, Preferred: true},
		Old: cm("100", "1-drain-1-"+pad), New: cm("101", "1-drain-2-"+pad), Time: time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)}
	f, errs := set.Eval(c)
	if len(f) != 1 || len(errs) > 0 {
		b.Fatalf("got %d firings, errors %v; want 1 firing", len(f), errs)
	}
	b.SetBytes(int64(len(f[0].Payload)))
	b.ReportAllocs()
	for b.Loop() {
		set.Eval(c)
	}
}
