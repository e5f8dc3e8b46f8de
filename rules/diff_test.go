package rules

import (
	"encoding/json"
	"testing"
)

// opsJSON renders ops as a payload does.
func opsJSON(t *testing.T, ops []patchOp) string {
	t.Helper()
	for i := range ops {
		ops[i].Path = pointer(ops[i].toks)
	}
	if ops == nil {
		ops = []patchOp{}
	}
	b, err := json.Marshal(ops)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// obj decodes a JSON object for tests.
func obj(t testing.TB, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("bad test object %s: %v", s, err)
	}
	return m
}

func TestDiff(t *testing.T) {
	tests := []struct {
		name     string
		old, new string
		include  []string // field paths; nil = all
		exclude  []string
		want     string
	}{
		{"no change", `{"a":1}`, `{"a":1.0}`, nil, nil, `[]`},
		{"replace", `{"a":1}`, `{"a":2}`, nil, nil, `[{"op":"replace","path":"/a","value":2,"oldValue":1}]`},
		{"type change", `{"a":1}`, `{"a":"1"}`, nil, nil, `[{"op":"replace","path":"/a","value":"1","oldValue":1}]`},
		{"add and remove in key order", `{"b":1,"d":2}`, `{"a":0,"c":3,"d":2}`, nil, nil,
			`[{"op":"add","path":"/a","value":0},{"op":"remove","path":"/b","oldValue":1},{"op":"add","path":"/c","value":3}]`},
		{"nested", `{"spec":{"x":{"y":1}}}`, `{"spec":{"x":{"y":2}}}`, nil, nil, `[{"op":"replace","path":"/spec/x/y","value":2,"oldValue":1}]`},
		{"null value", `{"a":null}`, `{"a":1}`, nil, nil, `[{"op":"replace","path":"/a","value":1,"oldValue":null}]`},
		{"escaped pointer", `{"m":{"a/b~c":1}}`, `{"m":{"a/b~c":2}}`, nil, nil, `[{"op":"replace","path":"/m/a~1b~0c","value":2,"oldValue":1}]`},
		{"list item by item", `{"l":[1,{"a":1},3]}`, `{"l":[1,{"a":2},4]}`, nil, nil,
			`[{"op":"replace","path":"/l/1/a","value":2,"oldValue":1},{"op":"replace","path":"/l/2","value":4,"oldValue":3}]`},
		{"list append", `{"l":[1]}`, `{"l":[1,2,3]}`, nil, nil,
			`[{"op":"add","path":"/l/1","value":2},{"op":"add","path":"/l/2","value":3}]`},
		{"list truncate last first", `{"l":[1,2,3]}`, `{"l":[1]}`, nil, nil,
			`[{"op":"remove","path":"/l/2","oldValue":3},{"op":"remove","path":"/l/1","oldValue":2}]`},
		{"list insert replaces whole", `{"l":[1,2]}`, `{"l":[0,1,2]}`, nil, nil,
			`[{"op":"replace","path":"/l","value":[0,1,2],"oldValue":[1,2]}]`},
		{"map to list", `{"a":{}}`, `{"a":[]}`, nil, nil, `[{"op":"replace","path":"/a","value":[],"oldValue":{}}]`},
		{"exclude", `{"a":1,"status":{"x":1}}`, `{"a":2,"status":{"x":2}}`, nil, []string{"status"},
			`[{"op":"replace","path":"/a","value":2,"oldValue":1}]`},
		{"exclude stripped from an added value", `{}`, `{"spec":{"a":1,"secret":2}}`, nil, []string{"spec.secret"},
			`[{"op":"add","path":"/spec","value":{"a":1}}]`},
		{"include", `{"a":1,"spec":{"size":1,"color":"r"}}`, `{"a":2,"spec":{"size":2,"color":"b"}}`, []string{"spec.size"}, nil,
			`[{"op":"replace","path":"/spec/size","value":2,"oldValue":1}]`},
		{"include under a list item", `{"l":[{"n":"a","c":1},{"n":"b","c":1}]}`, `{"l":[{"n":"a","c":1},{"n":"b","c":2}]}`, []string{"l[n=b].c"}, nil,
			`[{"op":"replace","path":"/l/1/c","value":2,"oldValue":1}]`},
		{"include keeps a whole list replaced above it", `{"l":[{"n":"b","c":1}]}`, `{"l":[{"n":"a"},{"n":"b","c":2}]}`, []string{"l[n=b].c"}, nil,
			`[{"op":"replace","path":"/l","value":[{"n":"a"},{"c":2,"n":"b"}],"oldValue":[{"c":1,"n":"b"}]}]`},
		{"include an added parent", `{}`, `{"spec":{"size":1,"color":"r"}}`, []string{"spec.size"}, nil,
			`[{"op":"add","path":"/spec","value":{"color":"r","size":1}}]`},
		{"include and exclude", `{"spec":{"a":1,"b":1}}`, `{"spec":{"a":2,"b":2}}`, []string{"spec"}, []string{"spec.b"},
			`[{"op":"replace","path":"/spec/a","value":2,"oldValue":1}]`},

		// Ignored subtrees never count nor show, not even as the maps
		// that held them.
		{"a new map of ignored keys only", `{"metadata":{"name":"x"}}`, `{"metadata":{"name":"x","annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{}"}}}`,
			nil, []string{`metadata.annotations["kubectl.kubernetes.io/last-applied-configuration"]`}, `[]`},
		{"a removed map of ignored keys only", `{"metadata":{"name":"x","annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{}"}}}`, `{"metadata":{"name":"x"}}`,
			nil, []string{`metadata.annotations["kubectl.kubernetes.io/last-applied-configuration"]`}, `[]`},
		{"a new map of ignored keys beside a change", `{"metadata":{"name":"x"}}`, `{"metadata":{"name":"y","annotations":{"a":"1"}}}`,
			nil, []string{"metadata.annotations.a"}, `[{"op":"replace","path":"/metadata/name","value":"y","oldValue":"x"}]`},
		{"nested maps of ignored keys only", `{}`, `{"spec":{"a":{"secret":1,"token":2}}}`, nil, []string{"spec.a.secret", "spec.a.token"}, `[]`},
		{"maps of ignored keys only are left out of a value", `{}`, `{"spec":{"a":{"secret":1},"b":1}}`, nil, []string{"spec.a.secret"},
			`[{"op":"add","path":"/spec","value":{"b":1}}]`},
		{"an empty map is not ignored", `{}`, `{"spec":{"a":{}}}`, nil, []string{"spec.a.secret"},
			`[{"op":"add","path":"/spec","value":{"a":{}}}]`},
		{"an added empty map is a change", `{"metadata":{}}`, `{"metadata":{"annotations":{}}}`, nil, []string{`metadata.annotations["x"]`},
			`[{"op":"add","path":"/metadata/annotations","value":{}}]`},
		{"a value replaced by a map of ignored keys is removed", `{"a":"x"}`, `{"a":{"secret":1}}`, nil, []string{"a.secret"},
			`[{"op":"remove","path":"/a","oldValue":"x"}]`},
		{"a map of ignored keys replaced by a value is an add", `{"a":{"secret":1}}`, `{"a":"x"}`, nil, []string{"a.secret"},
			`[{"op":"add","path":"/a","value":"x"}]`},
		{"a list item of ignored keys only stays", `{"l":[1]}`, `{"l":[1,{"secret":1}]}`, nil, []string{"l[*].secret"},
			`[{"op":"add","path":"/l/1","value":{}}]`},
		{"a removed list item of ignored keys only stays", `{"l":[1,{"secret":1}]}`, `{"l":[1]}`, nil, []string{"l[*].secret"},
			`[{"op":"remove","path":"/l/1","oldValue":{}}]`},
		{"a list grown whose items changed only in ignored parts", `{"l":[{"n":"a","t":1}]}`, `{"l":[{"n":"a","t":2},{"n":"b","t":2}]}`, nil, []string{"l[*].t"},
			`[{"op":"add","path":"/l/1","value":{"n":"b"}}]`},
		{"a list shrunk whose items changed only in ignored parts", `{"l":[{"n":"a","t":1},{"n":"b","t":1}]}`, `{"l":[{"n":"a","t":2}]}`, nil, []string{"l[*].t"},
			`[{"op":"remove","path":"/l/1","oldValue":{"n":"b"}}]`},
		{"a list grown whose ignored item changed", `{"l":[1,2]}`, `{"l":[3,2,4]}`, nil, []string{"l[0]"},
			`[{"op":"add","path":"/l/2","value":4}]`},
		{"a list changed in more than ignored parts is replaced", `{"l":[{"n":"a","t":1}]}`, `{"l":[{"n":"c","t":2},{"n":"b","t":2}]}`, nil, []string{"l[*].t"},
			`[{"op":"replace","path":"/l","value":[{"n":"c"},{"n":"b"}],"oldValue":[{"n":"a"}]}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old, new := obj(t, tt.old), obj(t, tt.new)
			var pr *pruner
			if tt.include != nil || tt.exclude != nil {
				pr = newPruner(nil)
				for _, p := range tt.include {
					mustCompilePath(p).locations(old, pr.includeLoc)
					mustCompilePath(p).locations(new, pr.includeLoc)
				}
				for _, p := range tt.exclude {
					mustCompilePath(p).locations(old, pr.excludeLoc)
					mustCompilePath(p).locations(new, pr.excludeLoc)
				}
			}
			if got := opsJSON(t, diffObjects(old, new, pr)); got != tt.want {
				t.Errorf("diff =\n  %s\nwant\n  %s", got, tt.want)
			}
		})
	}
}

func TestRemoveUnder(t *testing.T) {
	tests := []struct {
		name, v string
		toks    []string
		want    string
		changed bool
		emptied bool
	}{
		{"a key", `{"a":1,"b":2}`, []string{"a"}, `{"b":2}`, true, false},
		{"the last key", `{"a":1}`, []string{"a"}, `{}`, true, true},
		{"the maps that held only it", `{"a":{"b":{"c":1}},"d":1}`, []string{"a", "b", "c"}, `{"d":1}`, true, false},
		{"everything", `{"a":{"b":{"c":1}}}`, []string{"a", "b", "c"}, `{}`, true, true},
		{"in a list item, which stays", `{"l":[{"c":1},2]}`, []string{"l", "0", "c"}, `{"l":[{},2]}`, true, false},
		{"not a list item", `{"l":[1,2]}`, []string{"l", "0"}, `{"l":[1,2]}`, false, false},
		{"a missing key", `{"a":{"b":1}}`, []string{"a", "x"}, `{"a":{"b":1}}`, false, false},
		{"below a scalar", `{"a":1}`, []string{"a", "b"}, `{"a":1}`, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := obj(t, tt.v)
			var locs locTree
			locs.add(tt.toks)
			out, changed, emptied := locs.removeUnder(v)
			if !equal(out, obj(t, tt.want)) || changed != tt.changed || emptied != tt.emptied {
				t.Errorf("removeUnder = %v, %v, %v; want %s, %v, %v", out, changed, emptied, tt.want, tt.changed, tt.emptied)
			}
			if !equal(v, obj(t, tt.v)) {
				t.Errorf("removeUnder changed its input: %v", v)
			}
		})
	}
}
