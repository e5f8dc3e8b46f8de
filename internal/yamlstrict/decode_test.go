package yamlstrict

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

type inner struct {
	Name string `yaml:"name"`
}

// short may be written as its name alone.
type short struct {
	Name  string `yaml:"name"`
	Count int    `yaml:"count"`
}

func (*short) YAMLShorthand() string { return "name" }

// upper decodes itself from a scalar through yaml.Unmarshaler.
type upper string

func (u *upper) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || IsNull(n) {
		return errors.New("must be a word, not " + Describe(n))
	}
	*u = upper(strings.ToUpper(n.Value))
	return nil
}

// text decodes itself through encoding.TextUnmarshaler.
type text struct{ s string }

func (t *text) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		return errors.New("empty")
	}
	t.s = string(b)
	return nil
}

type doc struct {
	S       string            `yaml:"s"`
	B       bool              `yaml:"b"`
	I       int               `yaml:"i"`
	D       time.Duration     `yaml:"d"`
	L       []string          `yaml:"l"`
	M       map[string]string `yaml:"m"`
	Inner   *inner            `yaml:"inner"`
	Any     any               `yaml:"any"`
	Opt     *any              `yaml:"opt"`
	Short   []short           `yaml:"short"`
	Upper   upper             `yaml:"upper"`
	Text    *text             `yaml:"text"`
	Node    *yaml.Node        `yaml:"node"`
	Untaged string
}

func TestUnmarshal(t *testing.T) {
	src := `
s: 42
b: true
i: 7
d: 1m30s
l: [a, b]
m: {X-Retries: 3, Y: "z"}
inner:
any: {a: [1, 2.5, "x", null, true], t: 2026-01-01T00:00:00Z}
opt: null
short: [spec.size, {name: n, count: 2}]
upper: shout
text: hello
node: {k: v}
untaged: yes
base: &b {name: from-anchor}
`
	// base is an unknown key: the rest must decode all the same.
	var d doc
	pos, errs := Unmarshal([]byte(src), &d)
	if len(errs) != 1 || errs[0].Error() != `16:1: base: unknown key "base" (known keys: any, b, d, i, inner, l, m, node, opt, s, short, text, untaged, upper)` {
		t.Errorf("errors = %v", errs)
	}
	if d.S != "42" || !d.B || d.I != 7 || d.D != 90*time.Second || !reflect.DeepEqual(d.L, []string{"a", "b"}) ||
		!reflect.DeepEqual(d.M, map[string]string{"X-Retries": "3", "Y": "z"}) || d.Untaged != "yes" {
		t.Errorf("scalars = %+v", d)
	}
	if d.Inner == nil || d.Inner.Name != "" {
		t.Errorf("inner: null must allocate an empty struct, got %+v", d.Inner)
	}
	wantAny := map[string]any{"a": []any{int64(1), 2.5, "x", nil, true}, "t": "2026-01-01T00:00:00Z"}
	if !reflect.DeepEqual(d.Any, wantAny) {
		t.Errorf("any = %#v", d.Any)
	}
	if d.Opt == nil || *d.Opt != nil {
		t.Errorf("opt: a present null must be a pointer to nil, got %v", d.Opt)
	}
	if !reflect.DeepEqual(d.Short, []short{{Name: "spec.size"}, {Name: "n", Count: 2}}) {
		t.Errorf("short = %+v", d.Short)
	}
	if d.Upper != "SHOUT" || d.Text == nil || d.Text.s != "hello" || d.Node == nil || d.Node.Kind != yaml.MappingNode {
		t.Errorf("self-decoding = %q %+v %+v", d.Upper, d.Text, d.Node)
	}
	for path, want := range map[string][2]int{"s": {2, 4}, "short[0].name": {11, 9}, "m.X-Retries": {7, 16}, "any.a[2]": {9, 19}, "missing.key": {2, 1}, "inner.name": {8, 7}} {
		if l, c := pos.At(path); l != want[0] || c != want[1] {
			t.Errorf("At(%q) = %d:%d, want %d:%d", path, l, c, want[0], want[1])
		}
	}
	if !pos.Has("opt") || pos.Has("missing") || pos.Node("upper").Value != "shout" {
		t.Error("Has or Node is wrong")
	}
}

func TestUnmarshalErrors(t *testing.T) {
	tests := []struct {
		name, src string
		want      []string
	}{
		{"empty", "", []string{"1:1: empty file"}},
		{"comment only", "# nothing\n", []string{"1:1: empty file"}},
		{"syntax", "s: [", []string{"1:1: invalid YAML: did not find expected node content"}},
		{"two documents", "s: a\n---\ns: b\n", []string{"2:1: a file holds one YAML document; found a second one"}},
		{"not a mapping", "- a\n", []string{"1:1: must be a mapping, not a list"}},
		{"duplicate key", "s: a\ns: b\n", []string{`2:1: s: duplicate key "s"`}},
		{"string from a list", "s: [a]\n", []string{"1:4: s: must be a string, not a list"}},
		{"bool", "b: yes\n", []string{`1:4: b: must be true or false, not "yes"`}},
		{"int", "i: 1.5\n", []string{`1:4: i: must be an integer, not "1.5"`}},
		{"duration", "d: 5\n", []string{`1:4: d: must be a duration such as 5s or 1m30s, not "5"`}},
		{"negative duration", "d: -1s\n", []string{"1:4: d: must not be negative"}},
		{"list", "l: a\n", []string{"1:4: l: must be a list, not a scalar"}},
		{"map value", "m: {X: [a]}\n", []string{"1:8: m.X: must be a string, not a list"}},
		{"map null value", "m: {X: ~}\n", []string{"1:8: m.X: must be a string, not null"}},
		{"odd map key", "m: {'a.b': [a]}\n", []string{`1:12: m["a.b"]: must be a string, not a list`}},
		{"unmarshaler", "upper: [a]\n", []string{"1:8: upper: must be a word, not a list"}},
		{"unmarshaler null", "upper: ~\n", []string{"1:8: upper: must be a word, not null"}},
		{"text unmarshaler", "text: ''\n", []string{"1:7: text: empty"}},
		{"text from a list", "text: [a]\n", []string{"1:7: text: must be a string, not a list"}},
		{"infinity", "any: .inf\n", []string{"1:6: any: .inf cannot be represented in JSON"}},
		{"big int", "any: 123456789012345678901234567890\n", []string{}},
		{"too deep", "any: " + strings.Repeat("[", 250) + strings.Repeat("]", 250) + "\n", []string{"any" + strings.Repeat("[0]", 201) + ": value nested too deeply"}},
		{"bad merge", "inner: {<<: 1}\n", []string{"1:13: inner: a merge key (<<) needs a mapping or a list of mappings, not a scalar"}},
		{"alias bomb", bomb(), []string{"too many values: aliases and merge keys expand to more than"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d doc
			_, errs := Unmarshal([]byte(tt.src), &d)
			var lines []string
			for _, e := range errs {
				lines = append(lines, e.Error())
			}
			got := strings.Join(lines, "\n")
			if len(tt.want) == 0 && got != "" {
				t.Errorf("errors:\n%s\nwant none", got)
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("errors:\n%s\ndo not contain %q", got, w)
				}
			}
		})
	}
}

// bomb returns a document whose aliases expand to 10^9 values.
func bomb() string {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 9; i++ {
		b.WriteString("a" + string(rune('0'+i)) + ": &a" + string(rune('0'+i)) + " [")
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*a" + string(rune('0'+i-1)))
		}
		b.WriteString("]\n")
	}
	return "any:\n  " + strings.ReplaceAll(strings.TrimSuffix(b.String(), "\n"), "\n", "\n  ") + "\n"
}

func TestMergeKeys(t *testing.T) {
	var d struct {
		Base  inner   `yaml:"base"`
		Items []short `yaml:"items"`
	}
	_, errs := Unmarshal([]byte("base: &b {name: a}\nitems:\n  - <<: *b\n    count: 1\n  - <<: [*b]\n    name: c\n"), &d)
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	if !reflect.DeepEqual(d.Items, []short{{Name: "a", Count: 1}, {Name: "c"}}) {
		t.Errorf("items = %+v", d.Items)
	}
}

// FuzzUnmarshal checks that no input makes Unmarshal panic or report an
// error without a position.
func FuzzUnmarshal(f *testing.F) {
	f.Add([]byte("s: a\nl: [a, b]\nm: {a: b}\nany: {a: [1, 2]}\nshort: [x, {name: y}]\n"))
	f.Add([]byte("a: &a [x, *a]\nany: *a\n"))
	f.Add([]byte("inner: {<<: [{name: a}, {name: b}]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var d doc
		_, errs := Unmarshal(data, &d)
		for _, e := range errs {
			if e.Line < 1 || e.Col < 1 {
				t.Fatalf("error without a position: %v", e)
			}
		}
	})
}
