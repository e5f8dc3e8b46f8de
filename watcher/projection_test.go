package watcher

import (
	"encoding/json"
	"reflect"
	"testing"

	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/watcher/internal/watchstream"
)

// TestDecodeProjected: decoding only what a projection keeps projects to
// the same as decoding the whole object, numbers included.
func TestDecodeProjected(t *testing.T) {
	objects := []string{
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","uid":"u","resourceVersion":"5","labels":{"x":"y"},"generation":3,
		  "managedFields":[{"manager":"m","operation":"Update","time":"2026-01-01T00:00:00Z","fieldsV1":{"f:data":{"f:owner":{}}}}]},
		  "data":{"owner":"team-1","note":"x"}}`,
		`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","uid":"u2","resourceVersion":"9"},
		  "spec":{"size":3,"ratio":1.5,"big":12345678901234,"parts":[{"n":1},{"n":2}],"nested":{"a":{"b":{"c":true}},"z":null},"s":"str"},
		  "status":{"phase":"Ready"}}`,
		`{"metadata":{"name":"n"},"spec":null,"status":"odd"}`,
		`{"metadata":{"name":"crd"},"spec":{"group":"g","names":{"plural":"things","kind":"Thing"},"versions":[{"name":"v1","schema":{"openAPIV3Schema":{"type":"object"}}}]}}`,
	}
	projections := []change.Projection{
		{Full: true},
		{},
		{Paths: [][]string{{"data"}}},
		{Paths: [][]string{{"data", "owner"}}},
		{Paths: [][]string{{"spec", "size"}, {"spec", "nested", "a", "b"}, {"spec", "parts"}}},
		{Paths: [][]string{{"spec", "ratio"}, {"spec", "big"}, {"spec", "s", "deeper"}}},
		{Paths: [][]string{{"spec", "group"}, {"spec", "names"}}},
		{Paths: [][]string{{"spec", "nested", "z", "w"}, {"status", "phase"}, {"missing", "x"}}},
		{Paths: [][]string{{"metadata", "annotations"}, {"status"}}},
	}
	for _, raw := range objects {
		var whole map[string]any
		mustf(t, utiljson.Unmarshal([]byte(raw), &whole), "decode")
		for _, p := range projections {
			part, err := watchstream.DecodeProjected(p, []byte(raw))
			if err != nil {
				t.Fatalf("%v of %.40s: %v", p, raw, err)
			}
			want, got := project(p, whole), project(p, part)
			if !reflect.DeepEqual(got, want) {
				wj, _ := json.Marshal(want)
				gj, _ := json.Marshal(got)
				t.Errorf("%v of %.40s:\n got %s\nwant %s", p, raw, gj, wj)
			}
		}
	}
	if _, err := watchstream.DecodeProjected(change.Projection{Paths: [][]string{{"spec"}}}, []byte(`{"spec":`)); err == nil {
		t.Error("truncated JSON decoded")
	}
}
