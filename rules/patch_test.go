package rules

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/payloadtest"
)

// The property of a payload's changes: applied in order to the old object
// as an RFC 6902 JSON Patch, they give the new object, except for what the
// rule leaves out by design. How each part of "by design" is handled:
//
//   - noise (metadata.resourceVersion, managedFields, generation) and
//     ignoreFields, and for a rule with fields whatever its fields do not
//     select: the rule itself decides. After the changes are applied, the
//     rule must find no change left between the patched and the new
//     object (Rule.changes on the pair). The fuzz target, whose rule has
//     no fields and no ignoreFields, compares the objects directly
//     instead, noise paths removed from both.
//   - redaction: a value shown as "<redacted>" stands for the value at
//     that place (of the new object for value, of the object being
//     patched for oldValue); the operation's path and the rest of its
//     value are still checked.
//   - oldValue, which RFC 6902 lacks: each remove and replace is preceded
//     by a test operation that the path holds oldValue then.
//   - created and deleted: the changes are a snapshot of the object (adds
//     of what the fields select in the new one, removes from the old one),
//     not a path from one to the other: each add must be what the new
//     object holds at its path; the removes, with their tests, must apply
//     to the old object.

// CheckChanges checks the property for the changes (decoded from a
// payload) that rule gave on c. Exported for the golden cases' test
// (package rules_test).
func CheckChanges(set *Set, rule string, c *Change, changes []any) error {
	r := set.Rule(rule)
	if r == nil {
		return fmt.Errorf("no rule %s", rule)
	}
	switch c.Type {
	case change.Updated:
		patched, err := applyChanges(c.Old, c.New, changes)
		if err != nil {
			return err
		}
		newN, err := normalize(c.New)
		if err != nil {
			return err
		}
		st := evalState{c: &Change{Type: change.Updated, Resource: c.Resource, Old: patched, New: newN}}
		if left := r.changes(&st); len(left) > 0 {
			b, _ := json.Marshal(left)
			return fmt.Errorf("rule %s: with its changes applied to the old object, the rule still sees changes: %s", rule, b)
		}
	case change.Created:
		newN, err := normalize(c.New)
		if err != nil {
			return err
		}
		for i, x := range changes {
			op, _ := x.(map[string]any)
			path, _ := op["path"].(string)
			if op["op"] != "add" {
				return fmt.Errorf("rule %s: change %d of a creation is %v, not an add", rule, i, op["op"])
			}
			at, ok := pointerGet(newN, path)
			if !ok {
				return fmt.Errorf("rule %s: change %d adds %s, which the new object lacks", rule, i, path)
			}
			if v := unredact(op["value"], at, true); !reflect.DeepEqual(v, at) {
				return fmt.Errorf("rule %s: change %d adds %v at %s, the new object holds %v", rule, i, op["value"], path, at)
			}
		}
	case change.Deleted:
		if _, err := applyChanges(c.Old, nil, changes); err != nil {
			return err
		}
	}
	return nil
}

// applyChanges applies changes to old, one at a time (each remove and
// replace after a test of its oldValue), unredacting values from new and
// oldValues from the document being patched. It returns the patched
// object as encoding/json decodes it.
func applyChanges(old, new map[string]any, changes []any) (map[string]any, error) {
	doc, err := json.Marshal(old)
	if err != nil {
		return nil, err
	}
	newN, err := normalize(new)
	if err != nil {
		return nil, err
	}
	if !hasRedacted(changes) {
		// Nothing to unredact: one patch, the same operations.
		var ops []any
		for _, x := range changes {
			op, _ := x.(map[string]any)
			if op["op"] != "add" {
				ops = append(ops, map[string]any{"op": "test", "path": op["path"], "value": op["oldValue"]})
			}
			ops = append(ops, op) // json-patch ignores oldValue
		}
		raw, err := json.Marshal(ops)
		if err != nil {
			return nil, err
		}
		patch, err := jsonpatch.DecodePatch(raw)
		if err != nil {
			return nil, fmt.Errorf("changes %s: %w", raw, err)
		}
		if doc, err = patch.Apply(doc); err != nil {
			return nil, fmt.Errorf("the changes do not apply: %w", err)
		}
		var out map[string]any
		err = json.Unmarshal(doc, &out)
		return out, err
	}
	for i, x := range changes {
		op, ok := x.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("change %d is not an object: %v", i, x)
		}
		path, _ := op["path"].(string)
		name, _ := op["op"].(string)
		var cur any
		if err := json.Unmarshal(doc, &cur); err != nil {
			return nil, err
		}
		var ops []map[string]any
		if name != "add" {
			at, ok := pointerGet(cur, path)
			ops = append(ops, map[string]any{"op": "test", "path": path, "value": unredact(op["oldValue"], at, ok)})
		}
		if name == "remove" {
			ops = append(ops, map[string]any{"op": "remove", "path": path})
		} else {
			at, ok := pointerGet(newN, path)
			ops = append(ops, map[string]any{"op": name, "path": path, "value": unredact(op["value"], at, ok)})
		}
		raw, err := json.Marshal(ops)
		if err != nil {
			return nil, err
		}
		patch, err := jsonpatch.DecodePatch(raw)
		if err != nil {
			return nil, fmt.Errorf("change %d %s: %w", i, raw, err)
		}
		if doc, err = patch.Apply(doc); err != nil {
			return nil, fmt.Errorf("change %d (%s %s) does not apply: %w", i, name, path, err)
		}
	}
	var out map[string]any
	if err := json.Unmarshal(doc, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// normalize returns obj as encoding/json decodes its encoding (float64
// numbers), to compare with a patched object.
func normalize(obj map[string]any) (map[string]any, error) {
	if obj == nil {
		return nil, nil
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	err = json.Unmarshal(b, &out)
	return out, err
}

// unredact returns v with every Redacted string replaced by what ref holds
// at the same place.
func unredact(v, ref any, ok bool) any {
	switch x := v.(type) {
	case string:
		if x == Redacted && ok {
			return ref
		}
	case map[string]any:
		rm, _ := ref.(map[string]any)
		out := make(map[string]any, len(x))
		for k, e := range x {
			r, ok := rm[k]
			out[k] = unredact(e, r, ok)
		}
		return out
	case []any:
		rl, _ := ref.([]any)
		out := make([]any, len(x))
		for i, e := range x {
			if i < len(rl) {
				out[i] = unredact(e, rl[i], true)
			} else {
				out[i] = unredact(e, nil, false)
			}
		}
		return out
	}
	return v
}

// hasRedacted reports whether v holds the string Redacted anywhere.
func hasRedacted(v any) bool {
	switch x := v.(type) {
	case string:
		return x == Redacted
	case map[string]any:
		for _, e := range x {
			if hasRedacted(e) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if hasRedacted(e) {
				return true
			}
		}
	}
	return false
}

// pointerGet returns the value at a JSON Pointer in v.
func pointerGet(v any, ptr string) (any, bool) {
	if ptr == "" {
		return v, true
	}
	if !strings.HasPrefix(ptr, "/") {
		return nil, false
	}
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[tok]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// withoutNoise returns a copy of a normalized object without the noise
// paths.
func withoutNoise(obj map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range obj {
		out[k] = v
	}
	if m, ok := obj["metadata"].(map[string]any); ok {
		mc := map[string]any{}
		for k, v := range m {
			mc[k] = v
		}
		for _, p := range noisePaths {
			if p[0] == "metadata" && len(p) == 2 {
				delete(mc, p[1])
			}
		}
		out["metadata"] = mc
	}
	return out
}

const patchFuzzRules = `rules:
  - name: everything
    match: {resources: [{group: '*', kind: '*'}]}
    on: [update]
    actions: [{log: {}}]
`

// FuzzChangesApply generates random old and new objects (lists of named
// items, maps, leaves, keys with dots), evaluates a rule without fields on
// the update, and checks that its payload's changes, applied to the old
// object as a JSON Patch (each remove and replace after a test of its
// oldValue), give the new object, noise paths aside; that nothing
// fires when only noise changed; and that the payload decodes strictly
// into payload.Payload and encodes again as it was (payloadtest.Check).
func FuzzChangesApply(f *testing.F) {
	set, err := Parse("fuzz.yaml", []byte(patchFuzzRules))
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte("seed: a list of named items, maps and leaves"), []byte("seed: a list of named items, maps and leaves"))
	f.Add([]byte("seed: a list of named items, maps and leaves"), []byte("seed: a list of named items, maps and leafs"))
	f.Add([]byte{3, 3, 2, 3, 1, 5, 2, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 2, 3, 3, 3, 1, 0, 9, 9, 2}, []byte{3, 3, 2, 3, 1, 5, 2, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 2, 3, 3, 3, 1, 0, 9, 9, 3})
	f.Add(bytes.Repeat([]byte{5, 2, 3, 1}, 40), bytes.Repeat([]byte{5, 2, 3, 2}, 40))
	f.Add([]byte{2, 3, 3, 2, 3, 2, 1}, []byte{2, 3, 2, 2, 3, 2, 1, 3, 3})
	res := change.Resource{Group: "example.com", Version: "v1", Resource: "things", Kind: "Thing", Namespaced: true, Custom: true, Preferred: true}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		old, obj := (&objGen{b: a}).object("1"), (&objGen{b: b}).object("2")
		firings, errs := set.Eval(&Change{Type: change.Updated, Resource: res, Old: old, New: obj, Time: time.Unix(0, 0).UTC()})
		if len(errs) > 0 {
			t.Fatalf("evaluation errors: %v", errs)
		}
		oldN, err := normalize(old)
		if err != nil {
			t.Fatal(err)
		}
		newN, err := normalize(obj)
		if err != nil {
			t.Fatal(err)
		}
		if reflect.DeepEqual(withoutNoise(oldN), withoutNoise(newN)) {
			if len(firings) > 0 {
				t.Fatalf("fired on a change of noise only: %s", firings[0].Payload)
			}
			return
		}
		if len(firings) != 1 {
			t.Fatalf("%d firings on a change, want 1", len(firings))
		}
		if _, err := payloadtest.Check(firings[0].Payload); err != nil {
			t.Fatal(err)
		}
		var p struct {
			Changes []any `json:"changes"`
		}
		if err := json.Unmarshal(firings[0].Payload, &p); err != nil {
			t.Fatal(err)
		}
		patched, err := applyChanges(old, obj, p.Changes)
		if err != nil {
			t.Fatalf("%v\nold: %v\nnew: %v\npayload: %s", err, oldN, newN, firings[0].Payload)
		}
		if !reflect.DeepEqual(withoutNoise(patched), withoutNoise(newN)) {
			t.Fatalf("the changes applied to the old object do not give the new one\nold:     %v\nnew:     %v\npatched: %v\npayload: %s",
				oldN, newN, patched, firings[0].Payload)
		}
	})
}
