package crdimpact

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/fieldwatch/fieldwatch/rules/crddiff"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// crdWith returns a Widget CRD (v1 served and stored, v0 served) whose v1
// spec has the given schema.
func crdWith(t testing.TB, spec string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	docs, err := crddiff.Parse("crd.yaml", []byte(`
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
func impactSummary(r *crddiff.Result) []string {
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
			name:    "type changed; an object already invalid",
			newSpec: `{type: object, properties: {color: {type: string, enum: [red, blue, green]}, size: {type: string}, legacy: {type: string}, ports: {type: array, items: {type: object, properties: {name: {type: string}, port: {type: integer}}}}, labels: {type: object, additionalProperties: {type: string}}}}`,
			objects: []map[string]any{widget("a", "w1", `{size: 3}`), widget("a", "w2", `{size: "3"}`), widget("a", "bad", `{color: purple}`)},
			want:    []string{"type-changed spec.size rejected 1 [a/w1]", "invalid  rejected 1 [a/bad]"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old, new := crdWith(t, oldSpec), crdWith(t, tt.newSpec)
			res := crddiff.Compare(old, new)
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
