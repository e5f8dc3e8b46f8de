package rules

import (
	"math"
	"testing"
)

func TestEqual(t *testing.T) {
	tests := []struct {
		name string
		a, b any
		want bool
	}{
		{"int and int64", 1, int64(1), true},
		{"int64 and float64", int64(1), 1.0, true},
		{"int and float64", 2, 2.0, true},
		{"float and fraction", 1, 1.5, false},
		{"int and string", 1, "1", false},
		{"float and string", 1.0, "1", false},
		{"uint64 max and float", uint64(math.MaxUint64), float64(math.MaxUint64), true},
		{"big int64 and nearby float", int64(1<<53 + 1), float64(1 << 53), false},
		{"float beyond int64", int64(math.MaxInt64), math.Pow(2, 63), false},
		{"int32 and int8", int32(5), int8(5), true},
		{"float32 and float64", float32(0.5), 0.5, true},
		{"strings", "a", "a", true},
		{"different strings", "a", "b", false},
		{"bools", true, true, true},
		{"bool and string", true, "true", false},
		{"nils", nil, nil, true},
		{"nil and empty string", nil, "", false},
		{"nil and empty map", nil, map[string]any{}, false},
		{"maps with mixed numbers", map[string]any{"a": 1, "b": []any{2.0}}, map[string]any{"a": int64(1), "b": []any{int64(2)}}, true},
		{"maps with a different key", map[string]any{"a": 1}, map[string]any{"b": 1}, false},
		{"maps of different size", map[string]any{"a": 1}, map[string]any{"a": 1, "b": 2}, false},
		{"lists in order", []any{1, "x"}, []any{int64(1), "x"}, true},
		{"lists out of order", []any{1, 2}, []any{2, 1}, false},
		{"list and map", []any{}, map[string]any{}, false},
		{"empty lists", []any{}, []any{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := equal(tt.a, tt.b); got != tt.want {
				t.Errorf("equal(%#v, %#v) = %v, want %v", tt.a, tt.b, got, tt.want)
			}
			if got := equal(tt.b, tt.a); got != tt.want {
				t.Errorf("equal(%#v, %#v) = %v, want %v (not symmetric)", tt.b, tt.a, got, tt.want)
			}
		})
	}
}

func TestReplaceUnderCopies(t *testing.T) {
	orig := map[string]any{"a": map[string]any{"b": "secret", "c": "keep"}, "l": []any{"x", map[string]any{"k": "v"}}}
	replace := func(locs ...[]string) any {
		t.Helper()
		var tree locTree
		for _, l := range locs {
			tree.add(l)
		}
		got, _ := tree.replaceUnder(orig, Redacted)
		return got
	}
	got := replace([]string{"a", "b"}).(map[string]any)
	if got["a"].(map[string]any)["b"] != Redacted || orig["a"].(map[string]any)["b"] != "secret" {
		t.Errorf("replace did not copy: got %v, orig %v", got, orig)
	}
	got = replace([]string{"l", "1", "k"}, []string{"l", "0"}).(map[string]any)
	if l := got["l"].([]any); l[0] != Redacted || l[1].(map[string]any)["k"] != Redacted || orig["l"].([]any)[1].(map[string]any)["k"] != "v" || orig["l"].([]any)[0] != "x" {
		t.Errorf("list replace did not copy: got %v, orig %v", got, orig)
	}
	if got := replace([]string{"missing", "x"}, []string{"l", "7"}, []string{"a", "b", "deeper"}); !equal(got, orig) {
		t.Errorf("replacing a missing path changed the value: %v", got)
	}
}

func TestAppendJSON(t *testing.T) {
	tests := []struct {
		v    any
		want string
	}{
		{nil, "null"},
		{"<redacted>", `"<redacted>"`},
		{"a\"b\\c\n\u2028é", `"a\"b\\c\n\u2028é"`},
		{int64(-3), "-3"},
		{7, "7"},
		{2.0, "2"},
		{0.5, "0.5"},
		{1e21, "1e+21"},
		{1e-7, "1e-7"},
		{true, "true"},
		{map[string]any{"b": 1, "a": []any{nil, "x"}}, `{"a":[null,"x"],"b":1}`},
		{map[string]any(nil), "null"},
		{[]any(nil), "null"},
		{[]string{"typed"}, `["typed"]`},
	}
	for _, tt := range tests {
		got, err := appendJSON(nil, tt.v)
		if err != nil || string(got) != tt.want {
			t.Errorf("appendJSON(%#v) = %s, %v; want %s", tt.v, got, err, tt.want)
		}
	}
	if _, err := appendJSON(nil, math.NaN()); err == nil {
		t.Error("NaN encoded without error")
	}
}
