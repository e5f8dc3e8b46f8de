package watchstream

import (
	"encoding/json"
	"reflect"
	"testing"

	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/fieldwatch/fieldwatch/change"
)

// decodeObjects are objects of several shapes: a ConfigMap, a custom
// object with numbers of each kind and nested lists, odd top-level
// values, and a CRD.
var decodeObjects = []string{
	`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","uid":"u","resourceVersion":"5","labels":{"x":"y"},"generation":3,
	  "managedFields":[{"manager":"m","operation":"Update","time":"2026-01-01T00:00:00Z","fieldsV1":{"f:data":{"f:owner":{}}}}]},
	  "data":{"owner":"team-1","note":"x"}}`,
	`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","uid":"u2","resourceVersion":"9"},
	  "spec":{"size":3,"ratio":1.5,"big":12345678901234,"parts":[{"n":1},{"n":2}],"nested":{"a":{"b":{"c":true}},"z":null},"s":"str"},
	  "status":{"phase":"Ready"}}`,
	`{"metadata":{"name":"n"},"spec":null,"status":"odd"}`,
	`{"metadata":{"name":"crd"},"spec":{"group":"g","names":{"plural":"things","kind":"Thing"},"versions":[{"name":"v1","schema":{"openAPIV3Schema":{"type":"object"}}}]}}`,
}

// TestDecodeProjected: what DecodeProjected returns is exactly what a
// selection of the whole object, decoded as apimachinery decodes it,
// holds: all of it for a Full projection, else the metadata and the
// subtree of each path (or the first value on its way that is not an
// object).
func TestDecodeProjected(t *testing.T) {
	projections := []change.Projection{
		{Full: true},
		{},
		{Paths: [][]string{{"data"}}},
		{Paths: [][]string{{"data", "owner"}}},
		{Paths: [][]string{{"spec", "size"}, {"spec", "nested", "a", "b"}, {"spec", "parts"}}},
		{Paths: [][]string{{"spec", "ratio"}, {"spec", "big"}, {"spec", "s", "deeper"}}},
		{Paths: [][]string{{"spec", "group"}, {"spec", "names"}}},
		{Paths: [][]string{{"spec", "nested", "z", "w"}, {"status", "phase"}, {"missing", "x"}}},
		{Paths: [][]string{{"spec", "nested", "a"}, {"spec", "nested"}}},
		{Paths: [][]string{{"metadata", "annotations"}, {"status"}}},
	}
	for _, raw := range decodeObjects {
		for _, p := range projections {
			var whole map[string]any
			if err := utiljson.Unmarshal([]byte(raw), &whole); err != nil {
				t.Fatal(err)
			}
			want := selectPaths(p, whole)
			got, err := DecodeProjected(p, []byte(raw))
			if err != nil {
				t.Fatalf("%v of %.40s: %v", p, raw, err)
			}
			if !reflect.DeepEqual(got, want) {
				wj, _ := json.Marshal(want)
				gj, _ := json.Marshal(got)
				t.Errorf("%v of %.40s:\n got %s\nwant %s", p, raw, gj, wj)
			}
		}
	}
	for _, bad := range []string{`{"spec":`, `{"metadata":[1,}`, `[1]`} {
		if _, err := DecodeProjected(change.Projection{Paths: [][]string{{"spec"}}}, []byte(bad)); err == nil {
			t.Errorf("%s decoded", bad)
		}
	}
}

// selectPaths is DecodeProjected's reference: the selection of whole, a
// decoded object, that p keeps.
func selectPaths(p change.Projection, whole map[string]any) map[string]any {
	if p.Full {
		return whole
	}
	out := map[string]any{}
	if meta, ok := whole["metadata"]; ok {
		out["metadata"] = meta
	}
	for _, path := range p.Paths {
		if path[0] == "metadata" {
			continue
		}
		src, dst := whole, out
		for i, name := range path {
			v, ok := src[name]
			if !ok {
				break
			}
			next, isMap := v.(map[string]any)
			if i == len(path)-1 || !isMap {
				dst[name] = v
				break
			}
			d, ok := dst[name].(map[string]any)
			if !ok {
				d = map[string]any{}
				dst[name] = d
			}
			src, dst = next, d
		}
	}
	return out
}
