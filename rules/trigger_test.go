package rules

import (
	"testing"

	"github.com/fieldwatch/fieldwatch/change"
)

func TestFieldTriggers(t *testing.T) {
	// field is a YAML fields entry; old and new are JSON objects ("" = none).
	tests := []struct {
		name     string
		field    string
		typ      change.Type
		old, new string
		want     bool
	}{
		// update: plain
		{"changed", "spec.size", change.Updated, `{"spec":{"size":1}}`, `{"spec":{"size":2}}`, true},
		{"unchanged", "spec.size", change.Updated, `{"spec":{"size":1}}`, `{"spec":{"size":1},"x":1}`, false},
		{"int and float equal", "spec.size", change.Updated, `{"spec":{"size":1}}`, `{"spec":{"size":1.0}}`, false},
		{"number to string", "spec.size", change.Updated, `{"spec":{"size":1}}`, `{"spec":{"size":"1"}}`, true},
		{"appeared", "spec.size", change.Updated, `{"spec":{}}`, `{"spec":{"size":1}}`, true},
		{"vanished", "spec.size", change.Updated, `{"spec":{"size":1}}`, `{}`, true},
		{"absent both", "spec.size", change.Updated, `{}`, `{"spec":{}}`, false},
		{"null to absent", "spec.size", change.Updated, `{"spec":{"size":null}}`, `{"spec":{}}`, true},
		{"deep change", "spec", change.Updated, `{"spec":{"a":{"b":[1]}}}`, `{"spec":{"a":{"b":[2]}}}`, true},
		{"deep same", "spec", change.Updated, `{"spec":{"a":{"b":[1]}}}`, `{"spec":{"a":{"b":[1.0]}}}`, false},
		// update: from / to
		{"from to", "{path: spec.size, from: 1, to: 2}", change.Updated, `{"spec":{"size":1}}`, `{"spec":{"size":2}}`, true},
		{"from to json floats", "{path: spec.size, from: 1, to: 2}", change.Updated, `{"spec":{"size":1.0}}`, `{"spec":{"size":2.0}}`, true},
		{"wrong from", "{path: spec.size, from: 1, to: 2}", change.Updated, `{"spec":{"size":3}}`, `{"spec":{"size":2}}`, false},
		{"wrong to", "{path: spec.size, from: 1, to: 2}", change.Updated, `{"spec":{"size":1}}`, `{"spec":{"size":3}}`, false},
		{"to is typed", "{path: spec.size, to: 2}", change.Updated, `{"spec":{"size":1}}`, `{"spec":{"size":"2"}}`, false},
		{"to string", "{path: spec.size, to: '2'}", change.Updated, `{"spec":{"size":1}}`, `{"spec":{"size":"2"}}`, true},
		{"to only", "{path: spec.phase, to: Ready}", change.Updated, `{"spec":{"phase":"Pending"}}`, `{"spec":{"phase":"Ready"}}`, true},
		{"from only", "{path: spec.phase, from: Ready}", change.Updated, `{"spec":{"phase":"Ready"}}`, `{"spec":{"phase":"Failed"}}`, true},
		{"to a map", "{path: spec.x, to: {a: 1}}", change.Updated, `{"spec":{}}`, `{"spec":{"x":{"a":1}}}`, true},
		{"to a list", "{path: 'spec.tags[*]', to: [a, b]}", change.Updated, `{"spec":{"tags":["a"]}}`, `{"spec":{"tags":["a","b"]}}`, true},
		{"from null: absent", "{path: spec.x, from: null}", change.Updated, `{"spec":{}}`, `{"spec":{"x":1}}`, true},
		{"from null: null", "{path: spec.x, from: null}", change.Updated, `{"spec":{"x":null}}`, `{"spec":{"x":1}}`, true},
		{"to null: removed", "{path: spec.x, to: null}", change.Updated, `{"spec":{"x":1}}`, `{"spec":{}}`, true},
		{"from set, was absent", "{path: spec.x, from: 1}", change.Updated, `{"spec":{}}`, `{"spec":{"x":2}}`, false},
		// update: added / removed
		{"added", "{path: spec.x, added: true}", change.Updated, `{"spec":{}}`, `{"spec":{"x":1}}`, true},
		{"added with to", "{path: spec.x, added: true, to: 1}", change.Updated, `{"spec":{}}`, `{"spec":{"x":1}}`, true},
		{"added: only changed", "{path: spec.x, added: true}", change.Updated, `{"spec":{"x":0}}`, `{"spec":{"x":1}}`, false},
		{"removed", "{path: spec.x, removed: true}", change.Updated, `{"spec":{"x":1}}`, `{"spec":{}}`, true},
		{"removed: parent gone", "{path: spec.x, removed: true}", change.Updated, `{"spec":{"x":1}}`, `{}`, true},
		{"removed: only changed", "{path: spec.x, removed: true}", change.Updated, `{"spec":{"x":1}}`, `{"spec":{"x":2}}`, false},
		// update: list selectors
		{"index", "spec.l[1].v", change.Updated, `{"spec":{"l":[{"v":1},{"v":1}]}}`, `{"spec":{"l":[{"v":1},{"v":2}]}}`, true},
		{"other index", "spec.l[0].v", change.Updated, `{"spec":{"l":[{"v":1},{"v":1}]}}`, `{"spec":{"l":[{"v":1},{"v":2}]}}`, false},
		{"key", "spec.l[n=b].v", change.Updated, `{"spec":{"l":[{"n":"a","v":1},{"n":"b","v":1}]}}`, `{"spec":{"l":[{"n":"b","v":2},{"n":"a","v":1}]}}`, true},
		{"key moved, same value", "spec.l[n=b].v", change.Updated, `{"spec":{"l":[{"n":"a","v":1},{"n":"b","v":1}]}}`, `{"spec":{"l":[{"n":"b","v":1},{"n":"a","v":2}]}}`, false},
		{"key item added", "{path: 'spec.l[n=c]', added: true}", change.Updated, `{"spec":{"l":[{"n":"a"}]}}`, `{"spec":{"l":[{"n":"a"},{"n":"c"}]}}`, true},
		{"numeric key", "spec.ports[port=80].proto", change.Updated, `{"spec":{"ports":[{"port":80,"proto":"TCP"}]}}`, `{"spec":{"ports":[{"port":80,"proto":"UDP"}]}}`, true},
		{"star", "spec.l[*].v", change.Updated, `{"spec":{"l":[{"v":1},{"v":1}]}}`, `{"spec":{"l":[{"v":1},{"v":2}]}}`, true},
		{"star reordered", "spec.l[*].v", change.Updated, `{"spec":{"l":[{"v":1},{"v":2}]}}`, `{"spec":{"l":[{"v":2},{"v":1}]}}`, true},
		{"star other field", "spec.l[*].v", change.Updated, `{"spec":{"l":[{"v":1,"w":1}]}}`, `{"spec":{"l":[{"v":1,"w":2}]}}`, false},
		{"star on map", "spec.m[*]", change.Updated, `{"spec":{"m":{"a":1}}}`, `{"spec":{"m":{"a":2}}}`, true},
		{"quoted key", `metadata.annotations["example.com/x"]`, change.Updated, `{"metadata":{"annotations":{"example.com/x":"1"}}}`, `{"metadata":{"annotations":{"example.com/x":"2"}}}`, true},
		// create
		{"create: present", "spec.size", change.Created, ``, `{"spec":{"size":1}}`, true},
		{"create: absent", "spec.size", change.Created, ``, `{"spec":{}}`, false},
		{"create: to", "{path: spec.size, to: 1}", change.Created, ``, `{"spec":{"size":1}}`, true},
		{"create: wrong to", "{path: spec.size, to: 2}", change.Created, ``, `{"spec":{"size":1}}`, false},
		{"create: added", "{path: spec.size, added: true}", change.Created, ``, `{"spec":{"size":1}}`, true},
		{"create: from never", "{path: spec.size, from: 1}", change.Created, ``, `{"spec":{"size":1}}`, false},
		{"create: removed never", "{path: spec.size, removed: true}", change.Created, ``, `{"spec":{"size":1}}`, false},
		// delete
		{"delete: present", "spec.size", change.Deleted, `{"spec":{"size":1}}`, ``, true},
		{"delete: absent", "spec.size", change.Deleted, `{}`, ``, false},
		{"delete: from", "{path: spec.size, from: 1}", change.Deleted, `{"spec":{"size":1}}`, ``, true},
		{"delete: wrong from", "{path: spec.size, from: 2}", change.Deleted, `{"spec":{"size":1}}`, ``, false},
		{"delete: removed", "{path: spec.size, removed: true}", change.Deleted, `{"spec":{"size":1}}`, ``, true},
		{"delete: to never", "{path: spec.size, to: 1}", change.Deleted, `{"spec":{"size":1}}`, ``, false},
		{"delete: added never", "{path: spec.size, added: true}", change.Deleted, `{"spec":{"size":1}}`, ``, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := Parse("f.yaml", []byte(rule(match+logAction+"    fields:\n      - "+tt.field+"\n")))
			if err != nil {
				t.Fatal(err)
			}
			f := set.Rules()[0].fields[0]
			var old, new map[string]any
			if tt.old != "" {
				old = obj(t, tt.old)
			}
			if tt.new != "" {
				new = obj(t, tt.new)
			}
			if got := f.fires(tt.typ, old, new); got != tt.want {
				t.Errorf("fires = %v, want %v", got, tt.want)
			}
		})
	}
}
