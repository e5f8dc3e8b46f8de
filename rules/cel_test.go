package rules

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestCELEval(t *testing.T) {
	old := map[string]any{"spec": map[string]any{"size": int64(1), "tags": []any{"a"}, "ratio": 0.5}, "metadata": map[string]any{"labels": map[string]any{"app": "shop"}}}
	new := map[string]any{"spec": map[string]any{"size": 2.0, "tags": []any{"a", "b"}, "ratio": 0.5}, "metadata": map[string]any{"labels": map[string]any{"app": "shop"}}}
	tests := []struct {
		name    string
		expr    string
		typ     ChangeType
		want    bool
		wantErr string
	}{
		{"int vs double", "object.spec.size > oldObject.spec.size", Updated, true, ""},
		{"double vs int literal", "object.spec.size == 2", Updated, true, ""},
		{"int vs double literal", "oldObject.spec.size == 1.0", Updated, true, ""},
		{"list size", "size(object.spec.tags) > size(oldObject.spec.tags)", Updated, true, ""},
		{"exists", "object.spec.tags.exists(t, t == 'b')", Updated, true, ""},
		{"labels index", "object.metadata.labels['app'] == 'shop'", Updated, true, ""},
		{"has", "has(object.spec.color)", Updated, false, ""},
		{"optional", "object.?spec.color.orValue('none') == 'none'", Updated, true, ""},
		{"strings ext", "object.metadata.labels.app.upperAscii() == 'SHOP'", Updated, true, ""},
		{"sets ext", "sets.contains(object.spec.tags, oldObject.spec.tags)", Updated, true, ""},
		{"created: oldObject null", "oldObject == null && object.spec.size == 2", Created, true, ""},
		{"deleted: object null", "object == null", Deleted, true, ""},
		{"no such key", "object.spec.color == 'red'", Updated, false, "no such key: color"},
		{"null member", "oldObject.spec.size > 0", Created, false, "no such key"},
		{"dyn not bool", "object.spec.size", Updated, false, "result is not a bool"},
		{"cost limit", "[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, [1,2,3,4,5,6,7,8,9,10].all(e, [1,2,3,4,5,6,7,8,9,10].all(f, a+b+c+d+e+f > 0))))))", Updated, false, "cost limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, issues := compileCEL(tt.expr)
			if issues != nil {
				t.Fatalf("compile: %v", issues)
			}
			c := &Change{Type: tt.typ, Object: new, OldObject: old}
			switch tt.typ {
			case Created:
				c.OldObject = nil
			case Deleted:
				c.Object = nil
			}
			got, err := x.eval(newCELVars(c))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("eval = %v, %v; want error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("eval = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
	x, _ := compileCEL("object.spec.size")
	if _, err := x.eval(newCELVars(&Change{Type: Created, Object: new})); !errors.Is(err, errNotBool) {
		t.Errorf("non-bool result: %v", err)
	}
}

func TestCELMetering(t *testing.T) {
	tests := []struct {
		expr    string
		metered bool
	}{
		{"object.spec.size > oldObject.spec.size", false},
		{"has(object.spec.x) && object.spec.x.startsWith('a') && size(object.spec.l) > 2", false},
		{"object.?spec.x.orValue(1) == 1 ? true : 'a' in object.spec.l", false},
		{"object.spec.l.exists(x, x == 1)", true},
		{"object.spec.l.all(x, x > 0)", true},
		{"sets.contains(object.spec.l, oldObject.spec.l)", true},
		{"object.spec.s.replace('a', object.spec.s) == ''", true},
		{"lists.range(5).size() == 5", true},
		{strings.Repeat("object.a == oldObject.a && ", 40) + "true", true},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			x, issues := compileCEL(tt.expr)
			if issues != nil {
				t.Fatalf("compile: %v", issues)
			}
			if x.metered != tt.metered {
				t.Errorf("metered = %v, want %v", x.metered, tt.metered)
			}
		})
	}
}

func TestCELPaths(t *testing.T) {
	tests := []struct {
		expr  string
		paths [][]string
		full  bool
	}{
		{"object.spec.size > oldObject.spec.size", [][]string{{"spec", "size"}, {"spec", "size"}}, false},
		{"has(object.spec.color)", [][]string{{"spec", "color"}}, false},
		{"object['spec']['size'] > 1", [][]string{{"spec", "size"}}, false},
		{"object.?spec.size.orValue(0) > 1", [][]string{{"spec", "size"}}, false},
		{"object.spec.tags.exists(t, t == 'a')", [][]string{{"spec", "tags"}}, false},
		{"object.metadata.labels[oldObject.spec.key] == 'x'", [][]string{{"metadata", "labels"}, {"spec", "key"}}, false},
		{"1 == 1", nil, false},
		{"object == null", nil, true},
		{"size(object) > 0", nil, true},
		{"object.spec == oldObject", nil, true},
		{"[object].size() == 1", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			x, issues := compileCEL(tt.expr)
			if issues != nil {
				t.Fatalf("compile: %v", issues)
			}
			if x.full != tt.full {
				t.Errorf("full = %v, want %v", x.full, tt.full)
			}
			if !tt.full && !reflect.DeepEqual(minimalPaths(x.paths), minimalPaths(tt.paths)) {
				t.Errorf("paths = %q, want %q", x.paths, tt.paths)
			}
		})
	}
}
