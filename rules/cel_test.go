package rules

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

func TestCELEval(t *testing.T) {
	old := map[string]any{"spec": map[string]any{"size": int64(1), "tags": []any{"a"}, "ratio": 0.5,
		"parts": []any{map[string]any{"n": int64(1)}}}, "metadata": map[string]any{"labels": map[string]any{"app": "shop"}}}
	new := map[string]any{"spec": map[string]any{"size": 2.0, "tags": []any{"a", "b"}, "ratio": 0.5,
		"sizes": []any{int64(2), int64(1), int64(3)}, "ratios": []any{0.5, 0.25, 0.25, 0.75, -0.75}, "none": []any{},
		"parts": []any{map[string]any{"n": int64(1)}, map[string]any{"n": 2}},
		"bytes": []any{int64(30_000_000_000), int64(15_000_000_000), int64(5_000_000_000)},
		"huge":  []any{int64(math.MaxInt64), int64(1)}, "mixed": []any{int64(1), 2.5}, "nothing": nil,
	}, "metadata": map[string]any{"labels": map[string]any{"app": "shop"}}}
	tests := []struct {
		name    string
		expr    string
		typ     change.Type
		want    bool
		wantErr string
	}{
		{"int vs double", "object.spec.size > oldObject.spec.size", change.Updated, true, ""},
		{"double vs int literal", "object.spec.size == 2", change.Updated, true, ""},
		{"int vs double literal", "oldObject.spec.size == 1.0", change.Updated, true, ""},
		{"list size", "size(object.spec.tags) > size(oldObject.spec.tags)", change.Updated, true, ""},
		{"exists", "object.spec.tags.exists(t, t == 'b')", change.Updated, true, ""},
		{"labels index", "object.metadata.labels['app'] == 'shop'", change.Updated, true, ""},
		{"has", "has(object.spec.color)", change.Updated, false, ""},
		{"optional", "object.?spec.color.orValue('none') == 'none'", change.Updated, true, ""},
		{"strings ext", "object.metadata.labels.app.upperAscii() == 'SHOP'", change.Updated, true, ""},
		{"sets ext", "sets.contains(object.spec.tags, oldObject.spec.tags)", change.Updated, true, ""},
		{"created: oldObject null", "oldObject == null && object.spec.size == 2", change.Created, true, ""},
		{"deleted: object null", "object == null", change.Deleted, true, ""},
		{"no such key", "object.spec.color == 'red'", change.Updated, false, "no such key: color"},
		{"null member", "oldObject.spec.size > 0", change.Created, false, "no such key"},
		{"dyn not bool", "object.spec.size", change.Updated, false, "result is not a bool"},
		// The cost limit stops it within a quarter of a second, or, under
		// -race on a loaded machine (twenty times slower), MaxEvalTime.
		{"cost limit", "[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, [1,2,3,4,5,6,7,8,9,10].all(e, [1,2,3,4,5,6,7,8,9,10].all(f, a+b+c+d+e+f > 0))))))", change.Updated, false, "limit exceeded"},

		// sum, min and max over lists of numbers (listNumberFunctions).
		{"sum of ints", "object.spec.sizes.sum() == 6", change.Updated, true, ""},
		{"sum of ints is an int", "type(object.spec.sizes.sum()) == int", change.Updated, true, ""},
		{"sum of doubles is a double", "object.spec.ratios.sum() == 1.0 && type(object.spec.ratios.sum()) == double", change.Updated, true, ""},
		{"sum of uints is a uint", "[1u, 2u].sum() == 3u && type([1u].sum()) == uint", change.Updated, true, ""},
		{"sum of an empty list is 0", "object.spec.none.sum() == 0 && type(object.spec.none.sum()) == int", change.Updated, true, ""},
		{"sum of an empty double list is 0.0", "type([1.0].filter(x, x > 2.0).sum()) == double", change.Updated, true, ""},
		{"sum of literals", "[1, 2, 3].sum() == 6 && [0.5, 0.25].sum() == 0.75", change.Updated, true, ""},
		{"sum of a mapped list", "object.spec.parts.map(p, p.n).sum() == 3 && oldObject.spec.parts.map(p, p.n).sum() == 1", change.Updated, true, ""},
		{"sum of big sizes", "object.spec.bytes.sum() == 50000000000", change.Updated, true, ""},
		{"sum overflows", "object.spec.huge.sum() > 0", change.Updated, false, "overflow"},
		{"sum of mixed numbers", "object.spec.mixed.sum() > 0", change.Updated, false, "list item 1 is double, not int"},
		{"sum of strings", "object.spec.tags.sum() == ''", change.Updated, false, "no such overload"},
		{"sum of maps", "object.spec.parts.sum() > 0", change.Updated, false, "no such overload"},
		{"sum of a map", "object.metadata.labels.sum() > 0", change.Updated, false, "no such overload"},
		{"min and max of ints", "object.spec.sizes.min() == 1 && object.spec.sizes.max() == 3", change.Updated, true, ""},
		{"min and max keep the type", "type(object.spec.sizes.max()) == int && type(object.spec.ratios.min()) == double", change.Updated, true, ""},
		{"min and max of doubles", "object.spec.ratios.min() == -0.75 && object.spec.ratios.max() == 0.75", change.Updated, true, ""},
		{"min and max of one", "[5].min() == 5 && [5.0].max() == 5.0", change.Updated, true, ""},
		{"min of an empty list", "object.spec.none.min() == 0", change.Updated, false, "min called on empty list"},
		{"max of an empty list", "object.spec.none.max() == 0", change.Updated, false, "max called on empty list"},
		{"max of mixed numbers", "object.spec.mixed.max() > 0", change.Updated, false, "max: list item 1 is double, not int"},
		{"min of strings", "object.spec.tags.min() == 'a'", change.Updated, false, "no such overload"},
		{"max of a null", "object.spec.nothing.max() == 0", change.Updated, false, "no such overload"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, issues := compileCEL(tt.expr, false)
			if issues != nil {
				t.Fatalf("compile: %v", issues)
			}
			c := &Change{Type: tt.typ, New: new, Old: old}
			switch tt.typ {
			case change.Created:
				c.Old = nil
			case change.Deleted:
				c.New = nil
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
	x, _ := compileCEL("object.spec.size", false)
	if _, err := x.eval(newCELVars(&Change{Type: change.Created, New: new})); !errors.Is(err, errNotBool) {
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
		{"object.spec.l.sum() > 0 && object.spec.l.min() < object.spec.l.max()", false},
		{"object.spec.l.map(x, x * 2).sum() > 0", true},
		{strings.Repeat("object.a == oldObject.a && ", 40) + "true", true},
		{"object.spec.size > oldObject.spec.size + 1", false},
		{"object.spec.size + 1.5 > 2.0", false},
		{"object.spec.s + 'x' == oldObject.spec.s", true},
		{"object.spec.a + object.spec.b == oldObject.spec.s", true},
		{"size(object.spec.l + [1]) > 2", true},
		{"object.metadata.name.matches('^web-') && object.spec.size > 2", false},
		{"matches(object.metadata.name, '^web-')", false},
		{"matches(object.metadata.name, oldObject.spec.pattern)", true},
		{"object.metadata.name.matches('^web-' + 'x')", true},
		{"object.metadata.name.matches('^web-') || object.metadata.name.matches('^db-')", true},
		{"object.spec.s.indexOf('x') > 0 && object.spec.s.lastIndexOf('x', 3) < 5", false},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			x, issues := compileCEL(tt.expr, false)
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
			x, issues := compileCEL(tt.expr, false)
			if issues != nil {
				t.Fatalf("compile: %v", issues)
			}
			if x.full != tt.full {
				t.Errorf("full = %v, want %v", x.full, tt.full)
			}
			if got, want := (change.Projection{Paths: x.paths}).Minimal(), (change.Projection{Paths: tt.paths}).Minimal(); !tt.full && !reflect.DeepEqual(got, want) {
				t.Errorf("paths = %q, want %q", x.paths, tt.paths)
			}
		})
	}
}

// TestCELListCost checks that sum, min and max are charged one unit per
// item in metered expressions, so that CostLimit bounds them.
func TestCELListCost(t *testing.T) {
	testenv.SkipShort(t, testenv.LoadTest)
	list := func(n int) map[string]any {
		l := make([]any, n)
		for i := range l {
			l[i] = int64(i % 7)
		}
		return map[string]any{"l": l}
	}
	cost := func(t *testing.T, x *celExpr, obj map[string]any) uint64 {
		t.Helper()
		_, det, err := x.prg.Eval(newCELVars(&Change{Type: change.Created, New: obj}))
		if err != nil || det == nil || det.ActualCost() == nil {
			t.Fatalf("eval: %v, details %v", err, det)
		}
		return *det.ActualCost()
	}
	for _, fn := range []string{"sum", "min", "max"} {
		t.Run(fn, func(t *testing.T) {
			// The loop turns metering on.
			x, issues := compileCEL("[1].all(i, i > 0) && object.l."+fn+"() >= 0", false)
			if issues != nil || !x.metered {
				t.Fatalf("compile: %v, metered %v", issues, x != nil && x.metered)
			}
			if d := cost(t, x, list(3000)) - cost(t, x, list(1000)); d != 2000 {
				t.Errorf("2000 more items cost %d more, want 2000", d)
			}
		})
	}
	// And the limit stops a list longer than it.
	x, _ := compileCEL("[1].all(i, i > 0) && object.l.sum() >= 0", false)
	if ok, err := x.eval(newCELVars(&Change{Type: change.Created, New: list(CostLimit + 1)})); err == nil || !strings.Contains(err.Error(), "cost limit") {
		t.Errorf("sum of %d items = %v, %v; want the cost limit exceeded", CostLimit+1, ok, err)
	}
}

// TestCELErrorsOfRedactedObjects: an evaluation error on a Secret, or of a
// rule with redact paths, names the rule and the class of error, never a
// value; on other objects it is the whole error.
func TestCELErrorsOfRedactedObjects(t *testing.T) {
	secret := map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "s", "namespace": "ns"},
		"data": map[string]any{"p": "SECRETVALUE"}}
	tests := []struct {
		name, rules string
		res         change.Resource
		want        string
	}{
		{"secret, key from a value", "    when: object.data[object.data.p] == 'x'\n", secretsResource,
			"rule r: when: no such key (details withheld: the object's values are redacted)"},
		{"secret, conversion", "    when: int(object.data.p) > 0\n", secretsResource,
			"rule r: when: type conversion error (details withheld: the object's values are redacted)"},
		{"secret, regexp from a value", "    when: \"'a'.matches(object.data.p + '[')\"\n", secretsResource,
			"rule r: when: error parsing regexp (details withheld: the object's values are redacted)"},
		{"redact paths", "    redact: [data.p]\n    when: object.data[object.data.p] == 'x'\n", widgetsV1,
			"rule r: when: no such key (details withheld: the object's values are redacted)"},
		{"nothing redacted", "    when: object.data[object.data.p] == 'x'\n", widgetsV1,
			"rule r: when: no such key: SECRETVALUE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := Parse("f.yaml", []byte("rules:\n  - name: r\n    match: {resources: [{group: '*', kind: '*'}, {group: '', kind: Secret}]}\n"+tt.rules+"    actions: [{log: {}}]\n"))
			if err != nil {
				t.Fatal(err)
			}
			_, errs := set.Eval(&Change{Type: change.Created, Resource: tt.res, New: secret})
			if len(errs) != 1 || errs[0].Error() != tt.want {
				t.Errorf("errors %v, want %q", errs, tt.want)
			}
		})
	}
}
