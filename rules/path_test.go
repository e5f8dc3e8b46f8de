package rules

import (
	"reflect"
	"testing"
)

func TestCompilePath(t *testing.T) {
	tests := []struct {
		src       string
		canonical string // "" = src
		prefix    []string
		multi     bool
	}{
		{src: "spec", prefix: []string{"spec"}},
		{src: "spec.size", prefix: []string{"spec", "size"}},
		{src: "spec.containers[0].image", prefix: []string{"spec", "containers"}},
		{src: "spec.containers[*].image", prefix: []string{"spec", "containers"}, multi: true},
		{src: "spec.containers[name=web].image", prefix: []string{"spec", "containers"}},
		{src: `spec.ports[name="80"]`, prefix: []string{"spec", "ports"}},
		{src: "spec.ports[port=80].protocol", prefix: []string{"spec", "ports"}},
		{src: `metadata.annotations["example.com/x"]`, prefix: []string{"metadata", "annotations", "example.com/x"}},
		{src: `metadata.labels['app.kubernetes.io/name']`, canonical: `metadata.labels["app.kubernetes.io/name"]`, prefix: []string{"metadata", "labels", "app.kubernetes.io/name"}},
		{src: `["a.b"].c`, prefix: []string{"a.b", "c"}},
		{src: `metadata["labels"]`, canonical: "metadata.labels", prefix: []string{"metadata", "labels"}},
		{src: `a["x\"y"]`, prefix: []string{"a", `x"y`}},
		{src: `a[k="a b"]`, prefix: []string{"a"}},
		{src: `a["k.k"="v"]`, prefix: []string{"a"}},
		{src: "a[image=nginx:1.2].b", prefix: []string{"a"}},
		{src: "a[*][*]", prefix: []string{"a"}, multi: true},
		{src: "a[0][1]", prefix: []string{"a"}},
		{src: "a-b_c/d:e", prefix: []string{"a-b_c/d:e"}},
		{src: "données.größe", prefix: []string{"données", "größe"}},
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			p, err := compilePath(tt.src)
			if err != nil {
				t.Fatal(err)
			}
			want := tt.canonical
			if want == "" {
				want = tt.src
			}
			if got := p.String(); got != want {
				t.Errorf("String() = %q, want %q", got, want)
			}
			if got := p.prefix(); !reflect.DeepEqual(got, tt.prefix) {
				t.Errorf("prefix() = %q, want %q", got, tt.prefix)
			}
			if p.multi != tt.multi {
				t.Errorf("multi = %v, want %v", p.multi, tt.multi)
			}
			again, err := compilePath(p.String())
			if err != nil || !reflect.DeepEqual(again.segs, p.segs) {
				t.Errorf("String() does not compile back to the same path: %v", err)
			}
		})
	}
}

// pathObject is a small object with every shape paths select in.
var pathObject = map[string]any{
	"metadata": map[string]any{
		"annotations": map[string]any{"example.com/x": "1", "a~b": "2"},
	},
	"spec": map[string]any{
		"size": int64(2),
		"containers": []any{
			map[string]any{"name": "web", "image": "nginx:1", "ports": []any{map[string]any{"port": int64(80)}, map[string]any{"port": 443.0}}},
			map[string]any{"name": "side", "image": "envoy:1", "ports": []any{map[string]any{"port": int64(9000)}}},
			map[string]any{"name": int64(80), "image": "numbered"},
			map[string]any{"name": true, "image": "truthy"},
		},
		"tags":  []any{"a", "b"},
		"empty": []any{},
		"null":  nil,
		"map":   map[string]any{"b": int64(2), "a": int64(1)},
	},
}

func TestPathValue(t *testing.T) {
	tests := []struct {
		path    string
		want    any
		present bool
	}{
		{"spec.size", int64(2), true},
		{"spec.null", nil, true},
		{"spec.missing", nil, false},
		{"spec.size.deeper", nil, false},
		{"nope.size", nil, false},
		{`metadata.annotations["example.com/x"]`, "1", true},
		{"spec.containers[0].image", "nginx:1", true},
		{"spec.containers[1].name", "side", true},
		{"spec.containers[9].name", nil, false},
		{"spec.size[0]", nil, false},
		{"spec.containers[name=side].image", "envoy:1", true},
		{"spec.containers[name=none].image", nil, false},
		{"spec.containers[name=80].image", "numbered", true},
		{`spec.containers[name="80"].image`, nil, false},
		{"spec.containers[name=true].image", "truthy", true},
		{"spec.containers[name=web].ports[port=443].port", 443.0, true},
		{"spec.containers[name=web].ports[port=80]", map[string]any{"port": int64(80)}, true},
		{"spec.containers[*].image", []any{"nginx:1", "envoy:1", "numbered", "truthy"}, true},
		{"spec.containers[*].ports[*].port", []any{int64(80), 443.0, int64(9000)}, true},
		{"spec.tags[*]", []any{"a", "b"}, true},
		{"spec.empty[*]", []any(nil), false},
		{"spec.missing[*]", []any(nil), false},
		{"spec.map[*]", []any{int64(1), int64(2)}, true},
		{"spec.size[*]", []any(nil), false},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			p := mustCompilePath(tt.path)
			got, present := p.value(pathObject)
			if present != tt.present || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("value = %#v, %v; want %#v, %v", got, present, tt.want, tt.present)
			}
		})
	}
	if _, ok := mustCompilePath("a").value(nil); ok {
		t.Error("a path is present in a nil object")
	}
}

func TestPathLocations(t *testing.T) {
	tests := []struct {
		path string
		want []string
	}{
		{"spec.size", []string{"/spec/size"}},
		{"spec.missing.deeper", []string{"/spec/missing/deeper"}},
		{"spec.size.deeper", nil}, // under a scalar: nowhere
		{"spec.containers[1].image", []string{"/spec/containers/1/image"}},
		{"spec.containers[7].image", []string{"/spec/containers/7/image"}},
		{"spec.containers[name=side].image", []string{"/spec/containers/1/image"}},
		{"spec.containers[name=none].image", nil},
		{"spec.containers[*].name", []string{"/spec/containers/0/name", "/spec/containers/1/name", "/spec/containers/2/name", "/spec/containers/3/name"}},
		{"spec.map[*]", []string{"/spec/map/a", "/spec/map/b"}},
		{"spec.missing[*]", nil},
		{`metadata.annotations["a~b"]`, []string{"/metadata/annotations/a~0b"}},
		{`metadata.annotations["example.com/x"]`, []string{"/metadata/annotations/example.com~1x"}},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			var got []string
			mustCompilePath(tt.path).locations(pathObject, func(toks []string) { got = append(got, pointer(toks)) })
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("locations = %q, want %q", got, tt.want)
			}
		})
	}
	var got []string
	mustCompilePath("spec.size").locations(nil, func(toks []string) { got = append(got, pointer(toks)) })
	if !reflect.DeepEqual(got, []string{"/spec/size"}) {
		t.Errorf("locations in a nil object = %q", got)
	}
}

// FuzzCompilePath checks that evaluating what the path compiler accepts
// never panics (package fieldpath's FuzzParse holds the syntax).
func FuzzCompilePath(f *testing.F) {
	for _, s := range []string{
		"spec.size", "spec.containers[0].image", "a[*].b", "a[k=v]", `a["x.y"]`, `a['x']`,
		`a[k="v"]`, `a["k"=v]`, "a[", "[0]", "a..b", `a["\u00e9"]`, "a[k=v][0][*]",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		p, err := compilePath(src)
		if err != nil {
			return
		}
		p.value(pathObject)
		p.locations(pathObject, func([]string) {})
		p.everyLocation(pathObject, func([]string) {})
	})
}
