package impact

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/fieldwatch/fieldwatch/crd/diff"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

const benchOldSpec = `{type: object, x-kubernetes-validations: [{rule: "!has(self.ports) || self.ports.size() <= 16", message: too many ports}],
  properties: {
    name: {type: string, minLength: 1, maxLength: 63, pattern: "^[a-z0-9-]+$"},
    replicas: {type: integer, minimum: 0, maximum: 100, default: 1},
    mode: {type: string, enum: [Always, Never, IfNotPresent]},
    legacy: {type: string},
    target: {x-kubernetes-int-or-string: true, anyOf: [{type: integer}, {type: string}]},
    labels: {type: object, additionalProperties: {type: string, maxLength: 63}},
    ports: {type: array, maxItems: 16, items: {type: object, required: [port], properties: {
      name: {type: string}, port: {type: integer, minimum: 1, maximum: 65535}, protocol: {type: string, enum: [TCP, UDP, SCTP]}}}}}}`

// benchNewSpec narrows mode, tightens replicas and removes legacy.
const benchNewSpec = `{type: object, x-kubernetes-validations: [{rule: "!has(self.ports) || self.ports.size() <= 16", message: too many ports}],
  properties: {
    name: {type: string, minLength: 1, maxLength: 63, pattern: "^[a-z0-9-]+$"},
    replicas: {type: integer, minimum: 0, maximum: 50, default: 1},
    mode: {type: string, enum: [Always, Never]},
    target: {x-kubernetes-int-or-string: true, anyOf: [{type: integer}, {type: string}]},
    labels: {type: object, additionalProperties: {type: string, maxLength: 63}},
    ports: {type: array, maxItems: 16, items: {type: object, required: [port], properties: {
      name: {type: string}, port: {type: integer, minimum: 1, maximum: 65535}, protocol: {type: string, enum: [TCP, UDP, SCTP]}}}}}}`

// benchObjects returns n Widgets of about 1 KiB as JSON, one in twenty
// hit by the change (mode IfNotPresent, replicas over 50, legacy set).
func benchObjects(b *testing.B, n int) [][]byte {
	b.Helper()
	out := make([][]byte, n)
	for i := range out {
		mode, replicas := "Always", i%50
		spec := map[string]any{
			"name": fmt.Sprintf("widget-%d", i), "mode": mode, "replicas": replicas, "target": "80%",
			"labels": map[string]any{"app": "shop", "tier": "web", "team": "payments", "release": fmt.Sprintf("r%d", i%7)},
			"ports": []any{
				map[string]any{"name": "http", "port": 8080, "protocol": "TCP"},
				map[string]any{"name": "https", "port": 8443, "protocol": "TCP"},
				map[string]any{"name": "metrics", "port": 9090, "protocol": "TCP"},
			},
		}
		if i%20 == 0 {
			spec["mode"], spec["replicas"], spec["legacy"] = "IfNotPresent", 80, "yes"
		}
		obj := map[string]any{
			"apiVersion": "example.com/v1", "kind": "Widget",
			"metadata": map[string]any{"name": fmt.Sprintf("w%05d", i), "namespace": fmt.Sprintf("ns%02d", i%40),
				"uid": fmt.Sprintf("6a1f0000-0000-0000-0000-%012d", i), "resourceVersion": fmt.Sprint(1000 + i), "generation": 1,
				"labels": map[string]any{"app": "shop"}, "annotations": map[string]any{"owner": "team-payments@example.com"}},
			"spec": spec,
		}
		raw, err := json.Marshal(obj)
		if err != nil {
			b.Fatal(err)
		}
		out[i] = raw
	}
	return out
}

// BenchmarkScan runs the impact scan over 10,000 Widgets, side by side
// with bare iterations over the same objects: reading each one's name
// (iterate), and decoding each from JSON (decode: what receiving a list
// of them costs a client).
func BenchmarkScan(b *testing.B) {
	const n = 10000
	raw := benchObjects(b, n)
	objects := make([]map[string]any, n)
	size := 0
	for i, r := range raw {
		size += len(r)
		if err := utiljson.Unmarshal(r, &objects[i]); err != nil {
			b.Fatal(err)
		}
	}
	old, new := crdWith(b, benchOldSpec), crdWith(b, benchNewSpec)
	perObject := func(b *testing.B) {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/object")
		b.ReportMetric(float64(size)/n, "bytes/object")
	}
	b.Run("iterate", func(b *testing.B) {
		for b.Loop() {
			names := 0
			for _, o := range objects {
				if m, ok := o["metadata"].(map[string]any); ok && m["name"] != "" {
					names++
				}
			}
			if names != n {
				b.Fatal(names)
			}
		}
		perObject(b)
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, r := range raw {
				var o map[string]any
				if err := utiljson.Unmarshal(r, &o); err != nil {
					b.Fatal(err)
				}
			}
		}
		perObject(b)
	})
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		ctx := context.Background()
		var res *diff.Result
		for b.Loop() {
			res = diff.Compare(old, new)
			s, err := New(new, res)
			if err != nil {
				b.Fatal(err)
			}
			for _, o := range objects {
				if err := s.Add(ctx, o); err != nil {
					b.Fatal(err)
				}
			}
			s.Finish()
		}
		if res.Scanned != n || len(res.Impact) != 3 || res.Impact[0].Count != n/20 {
			b.Fatalf("scanned %d, impact %+v", res.Scanned, res.Impact)
		}
		perObject(b)
	})
}
