package impact

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/fieldwatch/fieldwatch/crd/diff"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// crdWith returns a Widget CRD (v1 served and stored, v0 served) whose v1
// spec has the given schema.
func crdWith(t testing.TB, spec string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	docs, err := diff.Parse("crd.yaml", []byte(`
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
    - {name: v0, served: true, storage: false, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
    - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	crd := docs[0].CRD
	var s apiextensionsv1.JSONSchemaProps
	if err := yaml.UnmarshalStrict([]byte(spec), &s); err != nil {
		t.Fatalf("spec schema: %v", err)
	}
	crd.Spec.Versions[1].Schema.OpenAPIV3Schema.Properties = map[string]apiextensionsv1.JSONSchemaProps{"spec": s}
	return crd
}

// widget is an object of the CRD at v1.
func widget(ns, name, spec string) map[string]any {
	var s map[string]any
	if err := yaml.Unmarshal([]byte(spec), &s); err != nil {
		panic(err)
	}
	return map[string]any{"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"namespace": ns, "name": name, "uid": "u-" + name}, "spec": s}
}

// impactSummary is one line per Impact: check field effect count objects.
func impactSummary(r *diff.Result) []string {
	var out []string
	for _, im := range r.Impact {
		names := make([]string, len(im.Objects))
		for i, h := range im.Objects {
			names[i] = h.String()
		}
		out = append(out, fmt.Sprintf("%s %s %s %d [%s]", im.Check, im.Field, im.Effect, im.Count, strings.Join(names, " ")))
	}
	return out
}

func TestScan(t *testing.T) {
	const oldSpec = `{type: object, properties: {color: {type: string, enum: [red, blue, green]}, size: {type: integer}, legacy: {type: string},
		ports: {type: array, items: {type: object, properties: {name: {type: string}, port: {type: integer}}}}, labels: {type: object, additionalProperties: {type: string}}}}`
	tests := []struct {
		name    string
		newSpec string
		objects []map[string]any
		want    []string
	}{
		{
			name:    "enum narrowed",
			newSpec: `{type: object, properties: {color: {type: string, enum: [blue, green]}, size: {type: integer}, legacy: {type: string}, ports: {type: array, items: {type: object, properties: {name: {type: string}, port: {type: integer}}}}, labels: {type: object, additionalProperties: {type: string}}}}`,
			objects: []map[string]any{widget("b", "w2", `{color: red}`), widget("a", "w1", `{color: red}`), widget("a", "w3", `{color: blue}`), widget("a", "w4", `{}`)},
			want:    []string{"enum-values-removed spec.color rejected 2 [a/w1 b/w2]"},
		},
		{
			name:    "field removed",
			newSpec: `{type: object, properties: {color: {type: string, enum: [red, blue, green]}, size: {type: integer}, ports: {type: array, items: {type: object, properties: {name: {type: string}, port: {type: integer}}}}, labels: {type: object, additionalProperties: {type: string}}}}`,
			objects: []map[string]any{widget("a", "w1", `{legacy: x}`), widget("a", "w2", `{color: red}`)},
			want:    []string{"field-removed spec.legacy pruned 1 [a/w1]"},
		},
		{
			name:    "required added in list items, limit tightened in a map",
			newSpec: `{type: object, properties: {color: {type: string, enum: [red, blue, green]}, size: {type: integer, maximum: 5}, legacy: {type: string}, ports: {type: array, items: {type: object, required: [port], properties: {name: {type: string}, port: {type: integer}}}}, labels: {type: object, additionalProperties: {type: string, maxLength: 3}}}}`,
			objects: []map[string]any{
				widget("a", "w1", `{ports: [{name: http, port: 80}, {name: x}]}`),
				widget("a", "w2", `{ports: [{name: http, port: 80}], size: 9}`),
				widget("a", "w3", `{labels: {a: abcd, b: ab}, size: 5}`),
			},
			want: []string{"max-length-added spec.labels[*] rejected 1 [a/w3]", "required-added spec.ports[*].port rejected 1 [a/w1]", "maximum-added spec.size rejected 1 [a/w2]"},
		},
		{
			name:    "validation rule added, default set before validation",
			newSpec: `{type: object, x-kubernetes-validations: [{rule: "self.size <= 10", message: too big}], properties: {color: {type: string, enum: [red, blue, green]}, size: {type: integer, default: 1}, legacy: {type: string}, ports: {type: array, items: {type: object, properties: {name: {type: string}, port: {type: integer}}}}, labels: {type: object, additionalProperties: {type: string}}}}`,
			objects: []map[string]any{widget("a", "big", `{size: 11}`), widget("a", "none", `{}`), widget("a", "ok", `{size: 10}`)},
			want:    []string{"validation-rule-added spec rejected 1 [a/big]"},
		},
		{
			name:    "a default and a limit added to the same field: the limit rejects",
			newSpec: `{type: object, properties: {color: {type: string, enum: [red, blue, green]}, size: {type: integer, default: 1, maximum: 5}, legacy: {type: string}, ports: {type: array, items: {type: object, properties: {name: {type: string}, port: {type: integer}}}}, labels: {type: object, additionalProperties: {type: string}}}}`,
			objects: []map[string]any{widget("a", "big", `{size: 6}`), widget("a", "none", `{}`)},
			want:    []string{"maximum-added spec.size rejected 1 [a/big]"},
		},
		{
			name:    "required and a limit on the same field: each error goes to the check that makes it",
			newSpec: `{type: object, required: [size], properties: {color: {type: string, enum: [red, blue]}, size: {type: integer, maximum: 5}, legacy: {type: string}, ports: {type: array, items: {type: object, properties: {name: {type: string}, port: {type: integer}}}}, labels: {type: object, additionalProperties: {type: string}}}}`,
			objects: []map[string]any{widget("a", "none", `{}`), widget("a", "big", `{size: 6, color: green}`), widget("a", "ok", `{size: 5}`)},
			want:    []string{"required-added spec.size rejected 1 [a/none]", "enum-values-removed spec.color rejected 1 [a/big]", "maximum-added spec.size rejected 1 [a/big]"},
		},
		{
			name:    "type changed; an object already invalid",
			newSpec: `{type: object, properties: {color: {type: string, enum: [red, blue, green]}, size: {type: string}, legacy: {type: string}, ports: {type: array, items: {type: object, properties: {name: {type: string}, port: {type: integer}}}}, labels: {type: object, additionalProperties: {type: string}}}}`,
			objects: []map[string]any{widget("a", "w1", `{size: 3}`), widget("a", "w2", `{size: "3"}`), widget("a", "bad", `{color: purple}`)},
			want:    []string{"type-changed spec.size rejected 1 [a/w1]", "invalid  rejected 1 [a/bad]"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old, new := crdWith(t, oldSpec), crdWith(t, tt.newSpec)
			res := diff.Compare(old, new)
			if err := Scan(context.Background(), new, res, slices.Values(tt.objects)); err != nil {
				t.Fatal(err)
			}
			got := impactSummary(res)
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("impact:\n  %s\nwant:\n  %s\nchecks: %+v", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "), res.Checks)
			}
			if res.Scanned != len(tt.objects) {
				t.Errorf("scanned %d, want %d", res.Scanned, len(tt.objects))
			}
		})
	}
}

func TestScanVersionsKindsAndSamples(t *testing.T) {
	old := crdWith(t, `{type: object, properties: {color: {type: string, enum: [red, blue]}}}`)
	new := old.DeepCopy()
	new.Spec.Versions[0].Served = false // v0 no longer served
	new.Spec.Versions[1].Schema.OpenAPIV3Schema.Properties["spec"].Properties["color"] = apiextensionsv1.JSONSchemaProps{Type: "string", Enum: []apiextensionsv1.JSON{{Raw: []byte(`"blue"`)}}}
	res := diff.Compare(old, new)

	var objects []map[string]any
	// 25 red widgets in a shuffled order: the samples are the first ten
	// in namespace/name order whatever the scan order.
	for _, i := range []int{17, 3, 24, 0, 11, 8, 21, 5, 14, 1, 19, 9, 23, 2, 12, 6, 20, 15, 4, 22, 10, 13, 7, 18, 16} {
		objects = append(objects, widget(fmt.Sprintf("ns%d", i%2), fmt.Sprintf("w%02d", i), `{color: red}`))
	}
	v0 := widget("a", "old-version", `{color: red}`)
	v0["apiVersion"] = "example.com/v0"
	v9 := widget("a", "unknown-version", `{}`)
	v9["apiVersion"] = "example.com/v9"
	other := widget("a", "gadget", `{color: red}`)
	other["kind"] = "Gadget"
	cm := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "cm"}}
	objects = append(objects, v0, v9, other, cm)

	s, err := New(new, res)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objects {
		if err := s.Add(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	s.Finish()
	checkVersionsKindsAndSamples(t, s, res, objects)

	// Finish again after more objects: counts go on.
	if err := s.Add(context.Background(), widget("ns0", "a-first", `{color: red}`)); err != nil {
		t.Fatal(err)
	}
	s.Finish()
	if im := res.Impact[1]; im.Count != 27 || im.Objects[1].Name != "a-first" || len(im.Objects) != diff.MaxSamples {
		t.Errorf("after one more: %+v", im)
	}

	// The same objects dealt round-robin to several Scanners, merged:
	// the same impact.
	for _, n := range []int{2, 3, 7} {
		t.Run(fmt.Sprintf("merged-%d", n), func(t *testing.T) {
			res := diff.Compare(old, new)
			scanners := make([]*Scanner, n)
			for i := range scanners {
				if scanners[i], err = New(new, res); err != nil {
					t.Fatal(err)
				}
			}
			for i, o := range objects {
				if err := scanners[i%n].Add(context.Background(), o); err != nil {
					t.Fatal(err)
				}
			}
			for _, o := range scanners[1:] {
				scanners[0].Merge(o)
			}
			scanners[0].Finish()
			checkVersionsKindsAndSamples(t, scanners[0], res, objects)
		})
	}
}

// checkVersionsKindsAndSamples checks the impact of
// TestScanVersionsKindsAndSamples' objects.
func checkVersionsKindsAndSamples(t *testing.T, s *Scanner, res *diff.Result, objects []map[string]any) {
	t.Helper()
	want := []string{
		"served-version-removed  unserved 1 [a/old-version]",
		// The v0 object is also read at v1 (conversion None), where red
		// is rejected.
		"enum-values-removed spec.color rejected 26 [a/old-version ns0/w00 ns0/w02 ns0/w04 ns0/w06 ns0/w08 ns0/w10 ns0/w12 ns0/w14 ns0/w16]",
		"invalid  rejected 1 [a/unknown-version]",
	}
	if got := impactSummary(res); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("impact:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	if s.Scanned() != 27 || s.Skipped() != 2 || res.Scanned != 27 {
		t.Errorf("scanned %d (result %d), skipped %d; want 27 and 2", s.Scanned(), res.Scanned, s.Skipped())
	}
	for _, o := range objects[:25] {
		if o["spec"].(map[string]any)["color"] != "red" {
			t.Fatal("the scan modified an object")
		}
	}
}

func TestScanValues(t *testing.T) {
	old := crdWith(t, `{type: object, properties: {num: {type: integer}}}`)
	new := crdWith(t, `{type: object, properties: {num: {type: integer, maximum: 3}}}`)
	tests := []struct {
		name    string
		n       any
		hit     bool
		wantErr string
	}{
		{name: "int64", n: int64(4), hit: true},
		{name: "float64 from encoding/json", n: float64(4), hit: true},
		{name: "int from YAML", n: 2},
		{name: "not JSON", n: struct{}{}, wantErr: "a/w: value of type struct {} is not JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := diff.Compare(old, new)
			obj := widget("a", "w", `{}`)
			obj["spec"] = map[string]any{"num": tt.n}
			err := Scan(context.Background(), new, res, slices.Values([]map[string]any{obj}))
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if hit := len(res.Impact) == 1 && res.Impact[0].Check == "maximum-added"; hit != tt.hit {
				t.Errorf("impact %+v, want hit %v", res.Impact, tt.hit)
			}
		})
	}
}

func TestNewRefusesNonStructural(t *testing.T) {
	crd := crdWith(t, `{type: object, properties: {a: {enum: [x]}}}`)
	_, err := New(crd, diff.Compare(crd, crd))
	if err == nil || !strings.Contains(err.Error(), "version v1: schema is not structural") {
		t.Errorf("error %v", err)
	}
}

func TestSplitPaths(t *testing.T) {
	for _, tt := range []struct {
		field string
		segs  []string
	}{
		{"", nil},
		{"spec.items[*].name", []string{"spec", "items", wildcard, "name"}},
		{`spec["a.b"].c`, []string{"spec", "a.b", "c"}},
		{`spec.x/y[*][*]`, []string{"spec", "x/y", wildcard, wildcard}},
		{`["a.b"]`, []string{"a.b"}},
		{`spec["*"]`, []string{"spec", "*"}},
		{`spec["x[y"]["\x01"]`, []string{"spec", "x[y", "\x01"}},
	} {
		got, err := splitField(tt.field)
		if err != nil || !slices.Equal(got, tt.segs) {
			t.Errorf("splitField(%q) = %q, %v; want %q", tt.field, got, err, tt.segs)
		}
	}
	for _, bad := range []string{`spec["a`, `spec[3]`, `spec["a"`, "spec[name=x]", "spec..a"} {
		if _, err := splitField(bad); err == nil {
			t.Errorf("splitField(%q): no error", bad)
		}
	}
	for _, tt := range []struct {
		path string
		segs []string
	}{
		{"spec.items[2].name", []string{"spec", "items", "2", "name"}},
		{"spec.labels[app]", []string{"spec", "labels", "app"}},
		{"spec.labels.app", []string{"spec", "labels", "app"}},
		{"spec[", []string{"spec", ""}},
	} {
		if got := splitErrorPath(tt.path); !slices.Equal(got, tt.segs) {
			t.Errorf("splitErrorPath(%q) = %q, want %q", tt.path, got, tt.segs)
		}
	}
}

// TestScanAfterChange checks that objects read after a change say that
// the impact of removals and of versions no longer served cannot be
// computed from them, while the other checks' impact is.
func TestScanAfterChange(t *testing.T) {
	old := crdWith(t, `{type: object, properties: {color: {type: string, enum: [red, blue]}, legacy: {type: string}}}`)
	new := crdWith(t, `{type: object, properties: {color: {type: string, enum: [blue]}}}`)
	new.Spec.Versions[0].Served = false
	res := diff.Compare(old, new)
	s, err := New(new, res)
	if err != nil {
		t.Fatal(err)
	}
	s.AfterChange("listed after the change")
	for _, o := range []map[string]any{widget("a", "red", `{color: red}`), widget("a", "blue", `{color: blue}`)} {
		if err := s.Add(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	s.Finish()
	got := impactSummary(res)
	want := []string{"served-version-removed  unserved 0 []", "enum-values-removed spec.color rejected 1 [a/red]", "field-removed spec.legacy pruned 0 []"}
	if !slices.Equal(got, want) {
		t.Fatalf("impact %q, want %q", got, want)
	}
	for _, im := range res.Impact {
		switch {
		case im.Check == "enum-values-removed" && im.Error != "":
			t.Errorf("%s: error %q, want none", im.Check, im.Error)
		case im.Check == "field-removed" && !strings.HasPrefix(im.Error, "listed after the change: the apiserver prunes spec.legacy from every read"):
			t.Errorf("%s: error %q", im.Check, im.Error)
		case im.Check == "served-version-removed" && !strings.Contains(im.Error, "the objects clients use at v0 cannot be told"):
			t.Errorf("%s: error %q", im.Check, im.Error)
		}
	}
}
