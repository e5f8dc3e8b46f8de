package fieldpath

import (
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		src       string
		canonical string // "" = src
		segs      []Segment
	}{
		{src: "spec", segs: []Segment{{Kind: Field, Name: "spec"}}},
		{src: "spec.size", segs: []Segment{{Name: "spec"}, {Name: "size"}}},
		{src: "spec.containers[0].image", segs: []Segment{{Name: "spec"}, {Name: "containers"}, {Kind: Index}, {Name: "image"}}},
		{src: "spec.containers[*].image", segs: []Segment{{Name: "spec"}, {Name: "containers"}, {Kind: All}, {Name: "image"}}},
		{src: "spec.containers[name=web].image", segs: []Segment{{Name: "spec"}, {Name: "containers"}, {Kind: Match, Name: "name", Value: "web"}, {Name: "image"}}},
		{src: `spec.ports[name="80"]`, segs: []Segment{{Name: "spec"}, {Name: "ports"}, {Kind: Match, Name: "name", Value: "80", Quoted: true}}},
		{src: "spec.ports[port=80].protocol", segs: []Segment{{Name: "spec"}, {Name: "ports"}, {Kind: Match, Name: "port", Value: "80"}, {Name: "protocol"}}},
		{src: `metadata.annotations["example.com/x"]`, segs: []Segment{{Name: "metadata"}, {Name: "annotations"}, {Name: "example.com/x"}}},
		{src: `metadata.labels['app.kubernetes.io/name']`, canonical: `metadata.labels["app.kubernetes.io/name"]`, segs: []Segment{{Name: "metadata"}, {Name: "labels"}, {Name: "app.kubernetes.io/name"}}},
		{src: `["a.b"].c`, segs: []Segment{{Name: "a.b"}, {Name: "c"}}},
		{src: `metadata["labels"]`, canonical: "metadata.labels", segs: []Segment{{Name: "metadata"}, {Name: "labels"}}},
		{src: `a["x\"y"]`, segs: []Segment{{Name: "a"}, {Name: `x"y`}}},
		{src: `a[k="a b"]`, segs: []Segment{{Name: "a"}, {Kind: Match, Name: "k", Value: "a b", Quoted: true}}},
		{src: `a["k.k"="v"]`, segs: []Segment{{Name: "a"}, {Kind: Match, Name: "k.k", Value: "v", Quoted: true}}},
		{src: "a[image=nginx:1.2].b", segs: []Segment{{Name: "a"}, {Kind: Match, Name: "image", Value: "nginx:1.2"}, {Name: "b"}}},
		{src: "a[*][*]", segs: []Segment{{Name: "a"}, {Kind: All}, {Kind: All}}},
		{src: "a[0][1]", segs: []Segment{{Name: "a"}, {Kind: Index}, {Kind: Index, Index: 1}}},
		{src: "a-b_c/d:e", segs: []Segment{{Name: "a-b_c/d:e"}}},
		{src: "données.größe", segs: []Segment{{Name: "données"}, {Name: "größe"}}},
		// * is a key after a dot, written quoted so as not to read as [*].
		{src: "a.*", canonical: `a["*"]`, segs: []Segment{{Name: "a"}, {Name: "*"}}},
		{src: `a["0"=1]`, segs: []Segment{{Name: "a"}, {Kind: Match, Name: "0", Value: "1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			segs, err := Parse(tt.src)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(segs, tt.segs) {
				t.Errorf("Parse = %+v, want %+v", segs, tt.segs)
			}
			want := tt.canonical
			if want == "" {
				want = tt.src
			}
			if got := Format(segs); got != want {
				t.Errorf("Format = %q, want %q", got, want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ src, want string }{
		{"", "empty path"},
		{".spec.size", `a path starts with a field name, not "." (write "spec.size")`},
		{"spec..size", `expected a field name at offset 5, found '.'`},
		{"spec.", `path ends with "."`},
		{"[0]", `a path starts with a field name, not "[0]"`},
		{"[*].a", `a path starts with a field name, not "[*]"`},
		{"a[", `unterminated "[" at offset 1`},
		{"a[0", `unterminated "[" at offset 1`},
		{"a[-1]", "negative list index at offset 2"},
		{"a[99999999999]", `list index "99999999999" out of range`},
		{"a[]", `bad selector at offset 1: use [n], [*], [key=value] or ["key"]`},
		{"a[x]", "bad selector at offset 1"},
		{"a[x=]", `empty value in selector at offset 1 (write [x=""] for the empty string)`},
		{"a[x=1", `unterminated "[" at offset 1`},
		{`a["x]`, "unterminated quote at offset 2"},
		{`a["\q"]`, `bad quoted key "\q" at offset 2`},
		{"a b", `unexpected ' ' at offset 1 (a field name follows a dot; quote keys with special characters: ["a.b"])`},
		{"a]", "unexpected ']' at offset 1"},
		{"a[0]b", "unexpected 'b' at offset 4"},
		{"a.[0]", "expected a field name at offset 2"},
		{`a"b"`, "unexpected"},
		{"a=b", "unexpected"},
		{strings.Repeat("a", MaxLen+1), "path longer than 1024 characters"},
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			_, err := Parse(tt.src)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse(%q) = %v, want an error containing %q", tt.src, err, tt.want)
			}
		})
	}
}

func TestJoin(t *testing.T) {
	for _, tt := range []struct{ got, want string }{
		{Child("", "rules"), "rules"},
		{Child("", "a.b"), `["a.b"]`},
		{Child("m", "a"), "m.a"},
		{Child("m", "a.b/c"), `m["a.b/c"]`},
		{Child("m", ""), `m[""]`},
		{Child("m", "*"), `m["*"]`},
		{Child("m", "a=b"), `m["a=b"]`},
		{Child("m", "tab\there"), `m["tab\there"]`},
		{Child("m", "\x7f"), `m["\x7f"]`},
		{Child("m", "x/y:z"), "m.x/y:z"},
		{Item("rules", 2), "rules[2]"},
		{Every("spec.items"), "spec.items[*]"},
		{Child(Every(Child("spec", "a.b")), "c"), `spec["a.b"][*].c`},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

// TestChildParses checks that what Child writes parses back to the key it
// appended, whatever the key.
func TestChildParses(t *testing.T) {
	for _, name := range []string{"a", "", "*", "a.b", `"`, "'", "[x]", "a=b", " ", "\x00", "\xff", "é", "-1", "0"} {
		p := Child("spec", name)
		segs, err := Parse(p)
		if err != nil {
			t.Errorf("Child(spec, %q) = %q: %v", name, p, err)
			continue
		}
		if want := []Segment{{Name: "spec"}, {Name: name}}; !reflect.DeepEqual(segs, want) {
			t.Errorf("Child(spec, %q) = %q parses to %+v", name, p, segs)
		}
	}
}

// FuzzParse checks that the parser never panics, that what it accepts
// formats to a canonical form that parses back to the same segments, and
// that the canonical form is its own.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"spec.size", "spec.containers[0].image", "a[*].b", "a[k=v]", `a["x.y"]`, `a['x']`,
		`a[k="v"]`, `a["k"=v]`, "a[", "[0]", "a..b", `a["\u00e9"]`, "a[k=v][0][*]", "a.*",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		segs, err := Parse(src)
		if err != nil {
			return
		}
		canon := Format(segs)
		again, err := Parse(canon)
		if err != nil {
			t.Fatalf("canonical form %q of %q does not parse: %v", canon, src, err)
		}
		if !reflect.DeepEqual(again, segs) {
			t.Fatalf("canonical form %q of %q parses to another path", canon, src)
		}
		if Format(again) != canon {
			t.Fatalf("canonical form %q of %q is not canonical", canon, src)
		}
	})
}
