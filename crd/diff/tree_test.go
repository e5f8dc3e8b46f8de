package diff

import (
	"fmt"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// treeCRD is the base CRD with v1's spec properties props and, when
// beta, a served v1beta1 that keeps unknown fields.
func treeCRD(t *testing.T, props string, beta bool) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd := withSchema(t, "{type: object, properties: "+props+"}")
	if beta {
		keep := true
		crd.Spec.Versions = append(crd.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{Name: "v1beta1", Served: true,
			Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: &keep}}})
	}
	return crd
}

// flat lists a tree's fields, one per line: depth dots, name, type, mark
// and check names.
func flat(fields []TreeField, depth int, b *strings.Builder) {
	for _, f := range fields {
		var checks []string
		for _, c := range f.Checks {
			checks = append(checks, c.Check)
		}
		fmt.Fprintf(b, "%s%s %s %s %s changed=%v\n", strings.Repeat(".", depth), f.Name, f.Type, f.Mark, strings.Join(checks, ","), f.Changed)
		flat(f.Fields, depth+1, b)
	}
}

// TestTree: the tree of two Widget CRDs marks a field added, one removed,
// one narrowed (its enum lost a value), one loosened (a maximum raised),
// and their parents changed; a list's items and a map's values are [*];
// a version only the old CRD has is removed, and the checks about it
// are the version's.
func TestTree(t *testing.T) {
	old := treeCRD(t, `{
                color: {type: string, enum: [red, green]},
                size: {type: integer, maximum: 10},
                owner: {type: string},
                tags: {type: array, items: {type: string}},
                labels: {type: object, additionalProperties: {type: string}}}`, true)
	new := treeCRD(t, `{
                color: {type: string, enum: [red]},
                size: {type: integer, maximum: 20},
                shape: {type: string},
                tags: {type: array, items: {type: string}},
                labels: {type: object, additionalProperties: {type: string}}}`, false)
	tree := Tree(old, new, Compare(old, new))
	if len(tree.Versions) != 2 || tree.Versions[0].Name != "v1" || tree.Versions[1].Name != "v1beta1" {
		t.Fatalf("versions %+v, want v1 then v1beta1", tree.Versions)
	}
	var b strings.Builder
	flat(tree.Versions[0].Fields, 0, &b)
	want := `spec object   changed=true
.color string narrowed enum-values-removed changed=true
.labels object   changed=false
..[*] string   changed=false
.owner string removed field-removed changed=true
.shape string added field-added changed=true
.size integer loosened maximum-relaxed changed=true
.tags array   changed=false
..[*] string   changed=false
`
	if b.String() != want {
		t.Errorf("v1's tree:\n%s\nwant:\n%s", b.String(), want)
	}
	if v := tree.Versions[0]; v.Mark != Unchanged || len(v.Checks) != 0 {
		t.Errorf("v1: mark %q, checks %+v; want unchanged, none", v.Mark, v.Checks)
	}
	beta := tree.Versions[1]
	if beta.Mark != MarkRemoved || len(beta.Fields) != 0 {
		t.Errorf("v1beta1: mark %q, %d fields; want removed, none", beta.Mark, len(beta.Fields))
	}
	found := false
	for _, c := range beta.Checks {
		found = found || c.Check == "served-version-removed"
	}
	if !found {
		t.Errorf("v1beta1's checks %+v: want served-version-removed", beta.Checks)
	}
	if spec := tree.Versions[0].Fields[0]; spec.Field != "spec" || spec.Fields[1].Fields[0].Field != "spec.labels[*]" {
		t.Errorf("fields %q, %q: want spec, spec.labels[*]", spec.Field, spec.Fields[1].Fields[0].Field)
	}
}

// TestTreeNestedCheck: a check inside an anyOf, where the tree has no
// node, belongs to the field that holds the anyOf.
func TestTreeNestedCheck(t *testing.T) {
	old := treeCRD(t, `{size: {anyOf: [{type: integer}, {type: string}]}}`, false)
	new := treeCRD(t, `{size: {anyOf: [{type: integer, maximum: 5}, {type: string}]}}`, false)
	tree := Tree(old, new, Compare(old, new))
	size := tree.Versions[0].Fields[0].Fields[0]
	if size.Name != "size" || size.Mark != MarkNarrowed || len(size.Checks) == 0 || !strings.HasPrefix(size.Checks[0].Path, "/properties/spec/properties/size/anyOf") {
		t.Errorf("size: %+v; want narrowed by the check inside its anyOf", size)
	}
}
