package diff

import (
	"encoding/json"
	"slices"
	"strconv"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// FuzzCompare compares random schema pairs: the comparison must not panic
// either way, and a schema compared with itself reports nothing. Each
// input is a JSON schema when it parses as one, and otherwise drives a
// generator of schemas (types, properties, items, additionalProperties,
// compositions, enums, limits, defaults, CEL rules, list types...).
func FuzzCompare(f *testing.F) {
	seeds := [][2]string{
		{`{"type":"object","properties":{"a":{"type":"string","enum":["x","y"]}}}`, `{"type":"object","properties":{"a":{"type":"string","enum":["x"]}}}`},
		{`{"type":"object","required":["a"],"properties":{"a":{"type":"integer","minimum":1}}}`, `{"type":"object","properties":{"a":{"type":"number","maximum":1,"exclusiveMaximum":true}}}`},
		{`{"x-kubernetes-int-or-string":true,"anyOf":[{"type":"integer"},{"type":"string"}]}`, `{"type":"string","pattern":"^a"}`},
		{`{"type":"array","items":{"type":"object","additionalProperties":{"type":"string"}},"x-kubernetes-list-type":"set"}`, `{"type":"array","items":{"type":"object"}}`},
		{`{"type":"object","allOf":[{"properties":{"a":{"minLength":1}}}],"anyOf":[{"required":["a"]}],"not":{"required":["b"]}}`, `{"type":"object","oneOf":[{"required":["a"]}]}`},
		{`{"type":"object","x-kubernetes-validations":[{"rule":"self.a > 0"}],"default":{"a":1}}`, `{"type":"object","x-kubernetes-preserve-unknown-fields":true}`},
		{"\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c", "\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8\xf7\xf6"},
	}
	for _, s := range seeds {
		f.Add([]byte(s[0]), []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		old, new := fuzzCRD(a), fuzzCRD(b)
		r := Compare(old, new)
		Compare(new, old)
		breaking := 0
		for _, c := range r.Checks {
			if c.Severity != Safe {
				breaking++
			}
		}
		if breaking != r.Breaking {
			t.Fatalf("breaking %d, counted %d", r.Breaking, breaking)
		}
		if _, err := r.Value(); err != nil {
			t.Fatalf("value: %v", err)
		}
		for _, c := range r.Checks {
			if !slices.Contains(CheckNames, c.Check) {
				t.Fatalf("check %q is not in CheckNames", c.Check)
			}
		}
		// Two served versions without conversion, a's schema and b's:
		// compared with itself, their differences were already so.
		two := old.DeepCopy()
		v2 := *new.Spec.Versions[0].DeepCopy()
		v2.Name, v2.Storage = "v2", false
		two.Spec.Versions = append(two.Spec.Versions, v2)
		crdify := &Policy{Severity: map[string]Severity{"enum-values-added": Breaking}, Descriptions: true, WebhookServedVersions: true}
		for _, crd := range []*apiextensionsv1.CustomResourceDefinition{old, new, two} {
			for _, p := range []*Policy{nil, crdify} {
				if self := CompareWith(crd, crd.DeepCopy(), p); len(self.Checks) != 0 {
					t.Fatalf("self comparison reports %+v", self.Checks)
				}
			}
		}
		Compare(old, two)
		Compare(two, new)
	})
}

// fuzzCRD builds a one-version CRD whose schema comes from data.
func fuzzCRD(data []byte) *apiextensionsv1.CustomResourceDefinition {
	s := &apiextensionsv1.JSONSchemaProps{}
	if err := json.Unmarshal(data, s); err != nil || len(data) == 0 || data[0] != '{' {
		g := &gen{data: data}
		s = g.schema(0)
	}
	return &apiextensionsv1.CustomResourceDefinition{
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Kind: "Widget"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: s}}},
		},
	}
}

// gen makes schemas from a byte stream; it ends with empty schemas when
// the stream runs out.
type gen struct {
	data []byte
	i    int
}

func (g *gen) next() byte {
	if g.i >= len(g.data) {
		return 0
	}
	b := g.data[g.i]
	g.i++
	return b
}

func (g *gen) schema(depth int) *apiextensionsv1.JSONSchemaProps {
	s := &apiextensionsv1.JSONSchemaProps{}
	types := []string{"", "object", "array", "string", "integer", "number", "boolean"}
	s.Type = types[int(g.next())%len(types)]
	for n := int(g.next() % 6); n > 0; n-- {
		g.feature(s, depth)
	}
	return s
}

func (g *gen) feature(s *apiextensionsv1.JSONSchemaProps, depth int) {
	f := func() *float64 { v := float64(int(g.next()) - 100); return &v }
	i := func() *int64 { v := int64(g.next() % 8); return &v }
	raw := func() apiextensionsv1.JSON {
		return apiextensionsv1.JSON{Raw: []byte([]string{`"a"`, `"b"`, `1`, `2.5`, `true`, `null`, `{"k":1}`, `[1,"a"]`}[g.next()%8])}
	}
	name := func() string { return []string{"a", "b", "c", "a.b", "x/y", "~", "*", ""}[g.next()%8] }
	b := true
	switch g.next() % 24 {
	case 0, 1, 2:
		if depth < 5 {
			if s.Properties == nil {
				s.Properties = map[string]apiextensionsv1.JSONSchemaProps{}
			}
			s.Properties[name()] = *g.schema(depth + 1)
		}
	case 3:
		if depth < 5 {
			s.Items = &apiextensionsv1.JSONSchemaPropsOrArray{Schema: g.schema(depth + 1)}
		}
	case 4:
		if depth < 5 {
			s.AdditionalProperties = &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true, Schema: g.schema(depth + 1)}
		}
	case 5:
		if depth < 5 {
			s.AllOf = append(s.AllOf, *g.schema(depth + 1))
		}
	case 6:
		if depth < 5 {
			s.AnyOf = append(s.AnyOf, *g.schema(depth + 1))
		}
	case 7:
		if depth < 5 {
			s.OneOf = append(s.OneOf, *g.schema(depth + 1))
		}
	case 8:
		if depth < 5 {
			s.Not = g.schema(depth + 1)
		}
	case 9:
		s.Enum = append(s.Enum, raw())
	case 10:
		d := raw()
		s.Default = &d
	case 11:
		s.Minimum, s.ExclusiveMinimum = f(), g.next()%2 == 0
	case 12:
		s.Maximum, s.ExclusiveMaximum = f(), g.next()%2 == 0
	case 13:
		switch g.next() % 6 {
		case 0:
			s.MinLength = i()
		case 1:
			s.MaxLength = i()
		case 2:
			s.MinItems = i()
		case 3:
			s.MaxItems = i()
		case 4:
			s.MinProperties = i()
		default:
			s.MaxProperties = i()
		}
	case 14:
		s.MultipleOf = f()
	case 15:
		s.Pattern = []string{"^a", "^b$", ""}[g.next()%3]
		s.Format = []string{"", "date", "uri"}[g.next()%3]
	case 16:
		s.Required = append(s.Required, name())
	case 17:
		s.Nullable = g.next()%2 == 0
		s.UniqueItems = g.next()%2 == 0
	case 18:
		s.XPreserveUnknownFields = &b
	case 19:
		s.XIntOrString = true
		if g.next()%2 == 0 {
			s.AnyOf = []apiextensionsv1.JSONSchemaProps{{Type: "integer"}, {Type: "string"}}
		}
	case 20:
		s.XEmbeddedResource = g.next()%2 == 0
		lt := []string{"atomic", "set", "map"}[g.next()%3]
		s.XListType = &lt
		s.XListMapKeys = []string{name()}
	case 21:
		mt := []string{"granular", "atomic"}[g.next()%2]
		s.XMapType = &mt
	case 22:
		s.XValidations = append(s.XValidations, apiextensionsv1.ValidationRule{Rule: "self.x > " + strconv.Itoa(int(g.next()%3)), Message: name()})
	case 23:
		s.Description = name()
		s.PatternProperties = map[string]apiextensionsv1.JSONSchemaProps{name(): {}}
	}
}

// FuzzParse feeds arbitrary bytes to the manifest and CRD readers: an
// error or a result, never a panic.
func FuzzParse(f *testing.F) {
	f.Add([]byte(baseCRD))
	f.Add([]byte("apiVersion: v1\nkind: List\nitems:\n- {apiVersion: apiextensions.k8s.io/v1, kind: CustomResourceDefinition, spec: {versions: [{served: x}]}}\n"))
	f.Add([]byte("---\n--- x\n{\"a\": [1, 2.5, null]}\n---\n- a\n"))
	f.Add([]byte("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nspec: {names: {kind: 3}, foo: 1}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := ParseManifests("fuzz.yaml", data); err != nil && err.Error() == "" {
			t.Fatal("empty error")
		}
		docs, err := Parse("fuzz.yaml", data)
		if err != nil && err.Error() == "" {
			t.Fatal("empty error")
		}
		for _, d := range docs {
			Compare(d.CRD, d.CRD)
		}
	})
}
