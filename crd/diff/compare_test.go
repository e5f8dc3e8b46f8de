package diff

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// baseCRD is a one-version CRD whose v1 schema tests replace.
const baseCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object}
`

// mustCRD decodes a CRD from YAML.
func mustCRD(t testing.TB, src string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	docs, err := Parse("test.yaml", []byte(src))
	if err != nil {
		t.Fatalf("parse CRD: %v", err)
	}
	if len(docs) != 1 {
		t.Fatalf("want one CRD, got %d", len(docs))
	}
	return docs[0].CRD
}

// withSchema returns the base CRD with v1's openAPIV3Schema replaced by
// the YAML schema (the spec field's schema when it has no top-level type).
func withSchema(t testing.TB, schema string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd := mustCRD(t, baseCRD)
	var s apiextensionsv1.JSONSchemaProps
	if err := yaml.UnmarshalStrict([]byte(schema), &s); err != nil {
		t.Fatalf("schema: %v\n%s", err, schema)
	}
	crd.Spec.Versions[0].Schema.OpenAPIV3Schema = &apiextensionsv1.JSONSchemaProps{
		Type:       "object",
		Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": s},
	}
	return crd
}

// summary is one check as check/severity/field/path, what the tables
// compare.
func summary(r *Result) []string {
	out := make([]string, len(r.Checks))
	for i, c := range r.Checks {
		out[i] = fmt.Sprintf("%s %s %s %s", c.Check, c.Severity, c.Field, c.Path)
		if c.Against != "" {
			out[i] += " " + c.Version + "<-" + c.Against
		}
	}
	return out
}

func TestCompareSchema(t *testing.T) {
	const spec = "/properties/spec"
	tests := []struct {
		name     string
		old, new string
		want     []string
	}{
		{name: "identical", old: `{type: object, properties: {size: {type: integer}}}`, new: `{type: object, properties: {size: {type: integer}}}`},
		{name: "documentation only", old: `{type: object, description: a, properties: {size: {type: integer, description: x, title: t}}}`,
			new: `{type: object, description: b, properties: {size: {type: integer, description: y, example: 3}}}`},
		{name: "field removed", old: `{type: object, properties: {size: {type: integer}, color: {type: string}}}`, new: `{type: object, properties: {color: {type: string}}}`,
			want: []string{"field-removed breaking spec.size " + spec + "/properties/size"}},
		{name: "field added", old: `{type: object, properties: {color: {type: string}}}`, new: `{type: object, properties: {color: {type: string}, size: {type: integer, minimum: 3, default: 4}}}`,
			want: []string{"field-added safe spec.size " + spec + "/properties/size"}},
		{name: "field removed but unknown fields kept", old: `{type: object, x-kubernetes-preserve-unknown-fields: true, properties: {size: {type: integer}}}`,
			new:  `{type: object, x-kubernetes-preserve-unknown-fields: true}`,
			want: []string{"field-removed safe spec.size " + spec + "/properties/size"}},
		{name: "type changed", old: `{type: object, properties: {size: {type: integer, minimum: 1}}}`, new: `{type: object, properties: {size: {type: string, minLength: 1}}}`,
			want: []string{"type-changed breaking spec.size " + spec + "/properties/size/type"}},
		{name: "integer widened to number", old: `{type: object, properties: {size: {type: integer}}}`, new: `{type: object, properties: {size: {type: number}}}`,
			want: []string{"type-widened safe spec.size " + spec + "/properties/size/type"}},
		{name: "string widened to int-or-string", old: `{type: object, properties: {port: {type: string}}}`,
			new:  `{type: object, properties: {port: {x-kubernetes-int-or-string: true, anyOf: [{type: integer}, {type: string}]}}}`,
			want: []string{"type-widened safe spec.port " + spec + "/properties/port/type"}},
		{name: "int-or-string narrowed to string", old: `{type: object, properties: {port: {x-kubernetes-int-or-string: true, anyOf: [{type: integer}, {type: string}]}}}`,
			new:  `{type: object, properties: {port: {type: string}}}`,
			want: []string{"type-changed breaking spec.port " + spec + "/properties/port/type"}},
		{name: "int-or-string with a pattern added", old: `{type: object, properties: {port: {x-kubernetes-int-or-string: true, anyOf: [{type: integer}, {type: string}]}}}`,
			new:  `{type: object, properties: {port: {x-kubernetes-int-or-string: true, anyOf: [{type: string}, {type: integer}], pattern: "^[0-9]+%?$"}}}`,
			want: []string{"pattern-added breaking spec.port " + spec + "/properties/port/pattern"}},
		{name: "required added", old: `{type: object, required: [a], properties: {a: {type: string}, size: {type: integer}}}`,
			new:  `{type: object, required: [a, size], properties: {a: {type: string}, size: {type: integer}}}`,
			want: []string{"required-added breaking spec.size " + spec + "/required"}},
		{name: "required removed", old: `{type: object, required: [size], properties: {size: {type: integer}}}`, new: `{type: object, properties: {size: {type: integer}}}`,
			want: []string{"required-removed safe spec.size " + spec + "/required"}},
		{name: "default added", old: `{type: object, properties: {size: {type: integer}}}`, new: `{type: object, properties: {size: {type: integer, default: 1}}}`,
			want: []string{"default-added breaking spec.size " + spec + "/properties/size/default"}},
		{name: "default changed", old: `{type: object, properties: {m: {type: object, default: {a: 1, b: 2}}}}`, new: `{type: object, properties: {m: {type: object, default: {a: 1, b: 3}}}}`,
			want: []string{"default-changed breaking spec.m " + spec + "/properties/m/default"}},
		{name: "default reordered is the same", old: `{type: object, properties: {m: {type: object, default: {a: 1, b: 2}}}}`, new: `{type: object, properties: {m: {type: object, default: {b: 2, a: 1}}}}`},
		{name: "default removed", old: `{type: object, properties: {size: {type: integer, default: 1}}}`, new: `{type: object, properties: {size: {type: integer}}}`,
			want: []string{"default-removed breaking spec.size " + spec + "/properties/size/default"}},
		{name: "enum added", old: `{type: object, properties: {color: {type: string}}}`, new: `{type: object, properties: {color: {type: string, enum: [red, blue]}}}`,
			want: []string{"enum-added breaking spec.color " + spec + "/properties/color/enum"}},
		{name: "enum values removed and added", old: `{type: object, properties: {color: {type: string, enum: [red, blue]}}}`,
			new:  `{type: object, properties: {color: {type: string, enum: [blue, green]}}}`,
			want: []string{"enum-values-removed breaking spec.color " + spec + "/properties/color/enum", "enum-values-added safe spec.color " + spec + "/properties/color/enum"}},
		{name: "enum values added", old: `{type: object, properties: {color: {type: string, enum: [red]}}}`, new: `{type: object, properties: {color: {type: string, enum: [red, blue]}}}`,
			want: []string{"enum-values-added safe spec.color " + spec + "/properties/color/enum"}},
		{name: "enum reordered", old: `{type: object, properties: {num: {type: integer, enum: [1, 2]}}}`, new: `{type: object, properties: {num: {type: integer, enum: [2, 1]}}}`},
		{name: "enum removed", old: `{type: object, properties: {color: {type: string, enum: [red]}}}`, new: `{type: object, properties: {color: {type: string}}}`,
			want: []string{"enum-removed safe spec.color " + spec + "/properties/color/enum"}},
		{name: "minimum added, maximum tightened", old: `{type: object, properties: {num: {type: integer, maximum: 10}}}`, new: `{type: object, properties: {num: {type: integer, minimum: 1, maximum: 5}}}`,
			want: []string{"minimum-added breaking spec.num " + spec + "/properties/num/minimum", "maximum-tightened breaking spec.num " + spec + "/properties/num/maximum"}},
		{name: "minimum tightened by exclusiveMinimum", old: `{type: object, properties: {num: {type: number, minimum: 1}}}`, new: `{type: object, properties: {num: {type: number, minimum: 1, exclusiveMinimum: true}}}`,
			want: []string{"minimum-tightened breaking spec.num " + spec + "/properties/num/minimum"}},
		{name: "limits relaxed and removed", old: `{type: object, properties: {num: {type: integer, minimum: 3, maximum: 5}, s: {type: string, maxLength: 3, minLength: 2}}}`,
			new: `{type: object, properties: {num: {type: integer, minimum: 1, maximum: 50}, s: {type: string, minLength: 1}}}`,
			want: []string{"minimum-relaxed safe spec.num " + spec + "/properties/num/minimum", "maximum-relaxed safe spec.num " + spec + "/properties/num/maximum",
				"min-length-relaxed safe spec.s " + spec + "/properties/s/minLength", "max-length-removed safe spec.s " + spec + "/properties/s/maxLength"}},
		{name: "length, items and properties limits tightened", old: `{type: object, properties: {s: {type: string, maxLength: 10}, l: {type: array, items: {type: string}, minItems: 1}, m: {type: object, additionalProperties: {type: string}}}}`,
			new: `{type: object, minProperties: 1, properties: {s: {type: string, maxLength: 5, minLength: 1}, l: {type: array, items: {type: string}, minItems: 2, maxItems: 4}, m: {type: object, additionalProperties: {type: string}, maxProperties: 8}}}`,
			want: []string{"min-properties-added breaking spec " + spec + "/minProperties",
				"min-items-tightened breaking spec.l " + spec + "/properties/l/minItems", "max-items-added breaking spec.l " + spec + "/properties/l/maxItems",
				"max-properties-added breaking spec.m " + spec + "/properties/m/maxProperties",
				"min-length-added breaking spec.s " + spec + "/properties/s/minLength", "max-length-tightened breaking spec.s " + spec + "/properties/s/maxLength"}},
		{name: "multipleOf", old: `{type: object, properties: {a: {type: integer, multipleOf: 4}, b: {type: integer, multipleOf: 2}, c: {type: integer}}}`,
			new: `{type: object, properties: {a: {type: integer, multipleOf: 2}, b: {type: integer, multipleOf: 3}, c: {type: integer, multipleOf: 5}}}`,
			want: []string{"multiple-of-relaxed safe spec.a " + spec + "/properties/a/multipleOf", "multiple-of-changed breaking spec.b " + spec + "/properties/b/multipleOf",
				"multiple-of-added breaking spec.c " + spec + "/properties/c/multipleOf"}},
		{name: "pattern and format", old: `{type: object, properties: {a: {type: string}, b: {type: string, pattern: "^a"}, c: {type: string, format: uri}, d: {type: string, format: date}}}`,
			new: `{type: object, properties: {a: {type: string, pattern: "^a"}, b: {type: string, pattern: "^b"}, c: {type: string}, d: {type: string, format: date-time}}}`,
			want: []string{"pattern-added breaking spec.a " + spec + "/properties/a/pattern", "pattern-changed unknown spec.b " + spec + "/properties/b/pattern",
				"format-removed safe spec.c " + spec + "/properties/c/format", "format-changed unknown spec.d " + spec + "/properties/d/format"}},
		{name: "nullable, unknown fields and embedded resources", old: `{type: object, properties: {a: {type: string, nullable: true}, b: {type: object, x-kubernetes-preserve-unknown-fields: true}, c: {type: object}}}`,
			new: `{type: object, properties: {a: {type: string}, b: {type: object}, c: {type: object, x-kubernetes-embedded-resource: true, x-kubernetes-preserve-unknown-fields: true}}}`,
			want: []string{"nullable-removed breaking spec.a " + spec + "/properties/a/nullable", "preserve-unknown-fields-removed breaking spec.b " + spec + "/properties/b/x-kubernetes-preserve-unknown-fields",
				"preserve-unknown-fields-added safe spec.c " + spec + "/properties/c/x-kubernetes-preserve-unknown-fields", "embedded-resource-added breaking spec.c " + spec + "/properties/c/x-kubernetes-embedded-resource"}},
		{name: "validation rules", old: `{type: object, x-kubernetes-validations: [{rule: "self.a > 0"}, {rule: "self.b > 0", message: m}, {rule: "self.c > 0"}, {rule: "has(self.d)"}]}`,
			new: `{type: object, x-kubernetes-validations: [{rule: "self.a > 0"}, {rule: "self.b > 0", message: other}, {rule: "self.c > 1"}, {rule: "has(self.e)"}, {rule: "has(self.f)"}]}`,
			want: []string{"validation-rule-message-changed safe spec " + spec + "/x-kubernetes-validations/1",
				"validation-rule-changed unknown spec " + spec + "/x-kubernetes-validations/2", "validation-rule-changed unknown spec " + spec + "/x-kubernetes-validations/3",
				"validation-rule-added breaking spec " + spec + "/x-kubernetes-validations/4"}},
		{name: "validation rule removed", old: `{type: object, x-kubernetes-validations: [{rule: "self.a > 0"}, {rule: "self.b > 0"}]}`, new: `{type: object, x-kubernetes-validations: [{rule: "self.b > 0"}]}`,
			want: []string{"validation-rule-removed safe spec " + spec + "/x-kubernetes-validations/0"}},
		{name: "items of arrays", old: `{type: object, properties: {items: {type: array, items: {type: object, properties: {name: {type: string, enum: [a, b]}, port: {type: integer}}}}}}`,
			new: `{type: object, properties: {items: {type: array, items: {type: object, required: [port], properties: {name: {type: string, enum: [a]}, port: {type: integer}}}}}}`,
			want: []string{"required-added breaking spec.items[*].port " + spec + "/properties/items/items/required",
				"enum-values-removed breaking spec.items[*].name " + spec + "/properties/items/items/properties/name/enum"}},
		{name: "additionalProperties", old: `{type: object, properties: {labels: {type: object, additionalProperties: {type: string, maxLength: 63}}, extra: {type: object, additionalProperties: {type: string}}}}`,
			new: `{type: object, properties: {labels: {type: object, additionalProperties: {type: string, maxLength: 20}}, extra: {type: object, properties: {a: {type: string}}}}}`,
			want: []string{"field-added safe spec.extra.a " + spec + "/properties/extra/properties/a", "additional-properties-removed breaking spec.extra[*] " + spec + "/properties/extra/additionalProperties",
				"max-length-tightened breaking spec.labels[*] " + spec + "/properties/labels/additionalProperties/maxLength"}},
		{name: "nested arrays of maps", old: `{type: object, properties: {m: {type: array, items: {type: object, additionalProperties: {type: array, items: {type: integer, maximum: 9}}}}}}`,
			new:  `{type: object, properties: {m: {type: array, items: {type: object, additionalProperties: {type: array, items: {type: integer, maximum: 8}}}}}}`,
			want: []string{"maximum-tightened breaking spec.m[*][*][*] " + spec + "/properties/m/items/additionalProperties/items/maximum"}},
		{name: "allOf element tightened", old: `{type: object, properties: {num: {type: integer, allOf: [{minimum: 1}, {maximum: 9}]}}}`,
			new:  `{type: object, properties: {num: {type: integer, allOf: [{minimum: 2}, {maximum: 9}]}}}`,
			want: []string{"minimum-tightened breaking spec.num " + spec + "/properties/num/allOf/0/minimum"}},
		{name: "allOf element with a property constraint", old: `{type: object, properties: {a: {type: string}}, allOf: [{properties: {a: {minLength: 1}}}]}`,
			new:  `{type: object, properties: {a: {type: string}}, allOf: [{properties: {a: {minLength: 1}, b: {maxLength: 3}}}]}`,
			want: []string{"max-length-added breaking spec.b " + spec + "/allOf/0/properties/b/maxLength"}},
		{name: "allOf element added and removed", old: `{type: object, properties: {num: {type: integer, allOf: [{minimum: 1}]}}}`,
			new:  `{type: object, properties: {num: {type: integer, allOf: [{minimum: 1}, {maximum: 9}]}}}`,
			want: []string{"allof-added breaking spec.num " + spec + "/properties/num/allOf/1"}},
		{name: "allOf shortened", old: `{type: object, properties: {num: {type: integer, allOf: [{minimum: 1}, {maximum: 9}]}}}`,
			new:  `{type: object, properties: {num: {type: integer, allOf: [{maximum: 9}]}}}`,
			want: []string{"allof-removed safe spec.num " + spec + "/properties/num/allOf/0"}},
		{name: "anyOf added", old: `{type: object, properties: {a: {type: string}, b: {type: string}}}`,
			new:  `{type: object, properties: {a: {type: string}, b: {type: string}}, anyOf: [{required: [a]}, {required: [b]}]}`,
			want: []string{"anyof-added breaking spec " + spec + "/anyOf"}},
		{name: "anyOf alternatives added", old: `{type: object, anyOf: [{required: [a]}]}`, new: `{type: object, anyOf: [{required: [a]}, {required: [b]}]}`,
			want: []string{"anyof-alternatives-added safe spec " + spec + "/anyOf"}},
		{name: "anyOf alternative changed", old: `{type: object, anyOf: [{required: [a]}, {required: [b]}]}`, new: `{type: object, anyOf: [{required: [a]}, {required: [c]}]}`,
			want: []string{"anyof-changed unknown spec " + spec + "/anyOf"}},
		{name: "anyOf removed", old: `{type: object, anyOf: [{required: [a]}]}`, new: `{type: object}`,
			want: []string{"anyof-removed safe spec " + spec + "/anyOf"}},
		{name: "oneOf and not", old: `{type: object, oneOf: [{required: [a]}, {required: [b]}], not: {required: [c]}}`,
			new:  `{type: object, oneOf: [{required: [a]}, {required: [d]}], not: {required: [e]}}`,
			want: []string{"oneof-changed unknown spec " + spec + "/oneOf", "not-changed unknown spec " + spec + "/not"}},
		{name: "not added", old: `{type: object}`, new: `{type: object, not: {required: [c]}}`,
			want: []string{"not-added breaking spec " + spec + "/not"}},
		{name: "list types", old: `{type: object, properties: {a: {type: array, items: {type: string}}, b: {type: array, items: {type: string}, x-kubernetes-list-type: set}, c: {type: array, items: {type: object, properties: {k: {type: string}}, required: [k]}, x-kubernetes-list-type: map, x-kubernetes-list-map-keys: [k]}}}`,
			new: `{type: object, properties: {a: {type: array, items: {type: string}, x-kubernetes-list-type: set}, b: {type: array, items: {type: string}}, c: {type: array, items: {type: object, properties: {k: {type: string}, j: {type: string}}, required: [k, j]}, x-kubernetes-list-type: map, x-kubernetes-list-map-keys: [k, j]}}}`,
			want: []string{"list-type-changed breaking spec.a " + spec + "/properties/a/x-kubernetes-list-type", "list-type-changed safe spec.b " + spec + "/properties/b/x-kubernetes-list-type",
				"list-map-keys-changed unknown spec.c " + spec + "/properties/c/x-kubernetes-list-map-keys",
				"required-added breaking spec.c[*].j " + spec + "/properties/c/items/required", "field-added safe spec.c[*].j " + spec + "/properties/c/items/properties/j"}},
		{name: "map type", old: `{type: object, x-kubernetes-map-type: granular}`, new: `{type: object, x-kubernetes-map-type: atomic}`,
			want: []string{"map-type-changed unknown spec " + spec + "/x-kubernetes-map-type"}},
		{name: "unique items", old: `{type: object, properties: {a: {type: array, items: {type: string}}}}`, new: `{type: object, properties: {a: {type: array, items: {type: string}, uniqueItems: true}}}`,
			want: []string{"unique-items-added breaking spec.a " + spec + "/properties/a/uniqueItems"}},
		{name: "names that need quoting and escaping", old: `{type: object, properties: {"a.b": {type: string}, "c/d": {type: string}, "~": {type: string}}}`,
			new:  `{type: object, properties: {}}`,
			want: []string{`field-removed breaking spec["a.b"] ` + spec + "/properties/a.b", `field-removed breaking spec.c/d ` + spec + "/properties/c~1d", `field-removed breaking spec.~ ` + spec + "/properties/~0"}},
		{name: "keys structural schemas forbid", old: `{type: object, patternProperties: {"^a": {type: string}}}`, new: `{type: object, patternProperties: {"^b": {type: string}}}`,
			want: []string{"schema-changed unknown spec " + spec + "/patternProperties"}},
		{name: "subtree below a changed type is not compared", old: `{type: object, properties: {a: {type: object, properties: {x: {type: string}}}}}`, new: `{type: object, properties: {a: {type: string, enum: [x]}}}`,
			want: []string{"type-changed breaking spec.a " + spec + "/properties/a/type"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Compare(withSchema(t, tt.old), withSchema(t, tt.new))
			got := summary(r)
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("checks:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
			breaking := 0
			for _, c := range r.Checks {
				if c.Severity != Safe {
					breaking++
				}
				if c.Message == "" || c.Version != "v1" {
					t.Errorf("check %+v: want a message and version v1", c)
				}
			}
			if r.Breaking != breaking || r.Safe != len(r.Checks)-breaking {
				t.Errorf("breaking %d safe %d, want %d and %d", r.Breaking, r.Safe, breaking, len(r.Checks)-breaking)
			}
			// The reverse comparison must not panic either, and a schema
			// compared with itself reports nothing.
			Compare(withSchema(t, tt.new), withSchema(t, tt.old))
			if self := Compare(withSchema(t, tt.new), withSchema(t, tt.new)); len(self.Checks) != 0 {
				t.Errorf("self comparison: %v", summary(self))
			}
		})
	}
}

func TestCompareValues(t *testing.T) {
	r := Compare(withSchema(t, `{type: object, properties: {color: {type: string, enum: [red, blue]}, num: {type: integer, minimum: 3, default: 4}}}`),
		withSchema(t, `{type: object, properties: {color: {type: string, enum: [blue]}, num: {type: integer, minimum: 5, default: {a: [1]}}}}`))
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"crd":"widgets.example.com","checks":[` +
		`{"version":"v1","path":"/properties/spec/properties/color/enum","field":"spec.color","check":"enum-values-removed","old":["red"],"severity":"breaking","message":"spec.color no longer accepts \"red\""},` +
		`{"version":"v1","path":"/properties/spec/properties/num/default","field":"spec.num","check":"default-changed","old":4,"new":{"a":[1]},"severity":"breaking","message":"spec.num now defaults to {\"a\":[1]} instead of 4"},` +
		`{"version":"v1","path":"/properties/spec/properties/num/minimum","field":"spec.num","check":"minimum-tightened","old":3,"new":5,"severity":"breaking","message":"spec.num tightened minimum from 3 to 5"}],` +
		`"breaking":3,"unknown":0,"safe":0,"scanned":0,"impact":[]}`
	if string(b) != want {
		t.Errorf("JSON:\n%s\nwant:\n%s", b, want)
	}
	v, err := r.Value()
	if err != nil {
		t.Fatal(err)
	}
	checks := v["checks"].([]any)
	if got := checks[1].(map[string]any)["old"]; got != int64(4) {
		t.Errorf("old default %#v, want int64(4)", got)
	}
	if got := v["breaking"]; got != int64(3) {
		t.Errorf("breaking %#v, want int64(3)", got)
	}
	if _, ok := v["impact"].([]any); !ok {
		t.Errorf("impact %#v, want a list", v["impact"])
	}
}

func TestCompareCRD(t *testing.T) {
	const twoVersions = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  conversion: {strategy: None}
  versions:
    - name: v1
      served: true
      storage: true
      subresources: {status: {}}
      additionalPrinterColumns: [{name: Size, type: integer, jsonPath: .spec.size}]
      selectableFields: [{jsonPath: .spec.color}]
      schema:
        openAPIV3Schema: {type: object, properties: {spec: {type: object, properties: {size: {type: integer}, color: {type: string}}}}}
    - name: v2
      served: true
      storage: false
      schema:
        openAPIV3Schema: {type: object, properties: {spec: {type: object, properties: {size: {type: integer}, color: {type: string}}}}}
status:
  storedVersions: [v1]
`
	tests := []struct {
		name string
		edit func(old, new *apiextensionsv1.CustomResourceDefinition)
		want []string
	}{
		{name: "nothing", edit: func(_, _ *apiextensionsv1.CustomResourceDefinition) {}},
		{name: "scope", edit: func(_, n *apiextensionsv1.CustomResourceDefinition) { n.Spec.Scope = apiextensionsv1.ClusterScoped },
			want: []string{"scope-changed breaking  /spec/scope"}},
		{name: "kind and short names", edit: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			n.Spec.Names.Kind = "Gadget"
			n.Spec.Names.ShortNames = []string{"wd"}
		}, want: []string{"kind-changed breaking  /spec/names/kind", "names-changed safe  /spec/names"}},
		{name: "served version removed", edit: func(_, n *apiextensionsv1.CustomResourceDefinition) { n.Spec.Versions = n.Spec.Versions[:1] },
			want: []string{"served-version-removed breaking  /spec/versions/1"}},
		{name: "version no longer served", edit: func(_, n *apiextensionsv1.CustomResourceDefinition) { n.Spec.Versions[1].Served = false },
			want: []string{"served-version-removed breaking  /spec/versions/1/served"}},
		{name: "unserved version removed", edit: func(o, n *apiextensionsv1.CustomResourceDefinition) {
			o.Spec.Versions[1].Served = false
			n.Spec.Versions = n.Spec.Versions[:1]
		}, want: []string{"version-removed safe  /spec/versions/1"}},
		{name: "stored version removed", edit: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			n.Spec.Versions = n.Spec.Versions[1:]
			n.Spec.Versions[0].Storage = true
		}, want: []string{"stored-version-removed breaking  /status/storedVersions/0", "storage-version-changed safe  /spec/versions", "served-version-removed breaking  /spec/versions/0"}},
		{name: "stored version removed after a storage migration", edit: func(o, n *apiextensionsv1.CustomResourceDefinition) {
			o.Spec.Versions[0].Served, o.Spec.Versions[0].Storage, o.Spec.Versions[1].Storage = false, false, true
			o.Status.StoredVersions = []string{"v2"}
			n.Status.StoredVersions = []string{"v2"}
			n.Spec.Versions = n.Spec.Versions[1:]
			n.Spec.Versions[0].Storage = true
		}, want: []string{"version-removed safe  /spec/versions/0"}},
		{name: "stored version cleared from the status", edit: func(o, n *apiextensionsv1.CustomResourceDefinition) {
			o.Status.StoredVersions = []string{"v1", "v2"}
			n.Status.StoredVersions = []string{"v2"}
		}, want: []string{"stored-version-cleared breaking  /status/storedVersions/0"}},
		{name: "stored versions of a manifest without status", edit: func(o, n *apiextensionsv1.CustomResourceDefinition) {
			o.Status.StoredVersions = []string{"v1", "v2"}
			n.Status.StoredVersions = nil
		}},
		{name: "version added", edit: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			v := *n.Spec.Versions[1].DeepCopy()
			v.Name = "v3"
			n.Spec.Versions = append(n.Spec.Versions, v)
		}, want: []string{"version-added safe  /spec/versions/2"}},
		{name: "storage switched between equal schemas", edit: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			n.Spec.Versions[0].Storage, n.Spec.Versions[1].Storage = false, true
		}, want: []string{"storage-version-changed safe  /spec/versions"}},
		{name: "storage switched to a different schema without conversion", edit: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			n.Spec.Versions[0].Storage, n.Spec.Versions[1].Storage = false, true
			delete(n.Spec.Versions[1].Schema.OpenAPIV3Schema.Properties["spec"].Properties, "color")
		}, want: []string{"storage-version-changed breaking  /spec/versions", "field-removed breaking spec.color /properties/spec/properties/color",
			"field-removed breaking spec.color /properties/spec/properties/color v2<-v1"}},
		{name: "conversion strategy", edit: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			url := "https://conv.example.com"
			n.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{ClientConfig: &apiextensionsv1.WebhookClientConfig{URL: &url}, ConversionReviewVersions: []string{"v1"}}}
		}, want: []string{"conversion-changed unknown  /spec/conversion/strategy"}},
		{name: "conversion webhook moved and CA rotated", edit: func(o, n *apiextensionsv1.CustomResourceDefinition) {
			url, url2 := "https://conv.example.com", "https://conv2.example.com"
			o.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{ClientConfig: &apiextensionsv1.WebhookClientConfig{URL: &url, CABundle: []byte("a")}, ConversionReviewVersions: []string{"v1"}}}
			n.Spec.Conversion = o.Spec.Conversion.DeepCopy()
			n.Spec.Conversion.Webhook.ClientConfig.URL = &url2
			n.Spec.Conversion.Webhook.ClientConfig.CABundle = []byte("b")
		}, want: []string{"conversion-changed unknown  /spec/conversion/webhook/clientConfig", "conversion-ca-bundle-changed safe  /spec/conversion/webhook/clientConfig/caBundle"}},
		{name: "subresources, selectable fields, printer columns, deprecation", edit: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			v := &n.Spec.Versions[0]
			v.Subresources = nil
			v.SelectableFields = []apiextensionsv1.SelectableField{{JSONPath: ".spec.size"}}
			v.AdditionalPrinterColumns = nil
			v.Deprecated = true
		}, want: []string{"version-deprecated safe  /spec/versions/0/deprecated", "status-subresource-removed breaking  /spec/versions/0/subresources/status",
			"selectable-field-removed breaking  /spec/versions/0/selectableFields/0", "selectable-field-added safe  /spec/versions/0/selectableFields/0",
			"printer-columns-changed safe  /spec/versions/0/additionalPrinterColumns"}},
		{name: "versions compared one by one", edit: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			delete(n.Spec.Versions[1].Schema.OpenAPIV3Schema.Properties["spec"].Properties, "size")
		}, want: []string{"field-removed breaking spec.size /properties/spec/properties/size", "field-removed breaking spec.size /properties/spec/properties/size v2<-v1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old, new := mustCRD(t, twoVersions), mustCRD(t, twoVersions)
			tt.edit(old, new)
			got := summary(Compare(old, new))
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("checks:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
		})
	}
}
