package watcher

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fieldwatch/fieldwatch/change"
)

// TestHashRestAndUnhash: every scalar under a hashed path (maps, lists,
// "*") becomes a hash and nothing else changes; unhash puts back what
// still matches and leaves the hash of what changed.
func TestHashRestAndUnhash(t *testing.T) {
	salt := []byte("salt")
	paths := [][]string{{"data", change.AnyKey}, {"spec", "env", change.AnyKey, "value"}, {"spec", "n"}}
	orig := `{"data":{"a":"x","b":"y"},"spec":{"env":[{"name":"A","value":"1"},{"name":"B","value":{"deep":[true,2.5,null]}}],"n":3,"keep":"k"}}`
	rest, err := hashRest(salt, []byte(orig), paths)
	if err != nil {
		t.Fatal(err)
	}
	for _, plain := range []string{`"x"`, `"y"`, `"1"`, `true`, `2.5`, `"n":3`} {
		if strings.Contains(string(rest), plain) {
			t.Errorf("hashed %s still holds %s", rest, plain)
		}
	}
	for _, kept := range []string{`"name":"A"`, `"name":"B"`, `"keep":"k"`, `null`, `"deep":[`} {
		if !strings.Contains(string(rest), kept) {
			t.Errorf("hashed %s lost %s", rest, kept)
		}
	}
	typ := &objectType{projection: change.Projection{Full: true, Hashed: paths}}
	old := &Object{rest: rest, typ: typ}
	now := `{"data":{"a":"x","b":"changed","c":"new"},"spec":{"env":[{"name":"A","value":"1"},{"name":"B","value":{"deep":[true,2.5,null]}}],"n":3,"keep":"k"}}`
	got := unhash(salt, old, &Object{rest: []byte(now), typ: typ})
	var m map[string]any
	if err := json.Unmarshal(got.rest, &m); err != nil {
		t.Fatal(err)
	}
	data := m["data"].(map[string]any)
	if data["a"] != "x" || !strings.HasPrefix(data["b"].(string), hashPrefix) || data["c"] != nil {
		t.Errorf("data after unhash = %v, want a restored, b its hash, no c", data)
	}
	if b, _ := json.Marshal(m["spec"]); string(b) != `{"env":[{"name":"A","value":"1"},{"name":"B","value":{"deep":[true,2.5,null]}}],"keep":"k","n":3}` {
		t.Errorf("spec after unhash = %s, want it restored", b)
	}
	if string(old.rest) != string(rest) {
		t.Errorf("unhash changed its input")
	}
	if unhash(salt, &Object{rest: []byte(orig), typ: typ}, &Object{rest: []byte(now), typ: typ}).rest == nil {
		t.Error("unhash of an object without hashes lost it")
	}
}
