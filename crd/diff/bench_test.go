package diff

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// BigSchema returns a spec schema of about lines lines of YAML: groups of
// objects with strings (enums, patterns, lengths), integers (limits,
// defaults), lists of objects and maps, as generated CRDs have them. With
// changed, about one field in twenty differs: enum values removed, limits
// tightened, fields removed, required fields added.
func BigSchema(lines int, changed bool) *apiextensionsv1.JSONSchemaProps {
	str := func(v string) apiextensionsv1.JSON { return apiextensionsv1.JSON{Raw: []byte(`"` + v + `"`)} }
	i64 := func(v int64) *int64 { return &v }
	f64 := func(v float64) *float64 { return &v }
	spec := apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{}}
	// One group renders to about 60 lines of YAML.
	for g := 0; g < max(lines/60, 1); g++ {
		mode := apiextensionsv1.JSONSchemaProps{Type: "string", Enum: []apiextensionsv1.JSON{str("Always"), str("Never"), str("IfNotPresent")}}
		max := f64(100)
		required := []string{"name"}
		props := map[string]apiextensionsv1.JSONSchemaProps{
			"name":     {Type: "string", MinLength: i64(1), MaxLength: i64(63), Pattern: "^[a-z0-9-]+$"},
			"replicas": {Type: "integer", Minimum: f64(0), Maximum: max, Default: &apiextensionsv1.JSON{Raw: []byte("1")}},
			"mode":     mode,
			"legacy":   {Type: "string", Description: "deprecated"},
			"ports": {Type: "array", MaxItems: i64(16), Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{
				Type: "object", Required: []string{"port"}, Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"name":     {Type: "string"},
					"port":     {Type: "integer", Minimum: f64(1), Maximum: f64(65535)},
					"protocol": {Type: "string", Enum: []apiextensionsv1.JSON{str("TCP"), str("UDP"), str("SCTP")}},
				}}}},
			"labels": {Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true, Schema: &apiextensionsv1.JSONSchemaProps{Type: "string", MaxLength: i64(63)}}},
			"target": {XIntOrString: true, AnyOf: []apiextensionsv1.JSONSchemaProps{{Type: "integer"}, {Type: "string"}}},
		}
		if changed && g%20 == 0 {
			mode.Enum = mode.Enum[:2]
			props["mode"] = mode
			p := props["replicas"]
			p.Maximum = f64(50)
			props["replicas"] = p
			delete(props, "legacy")
			required = append(required, "mode")
		}
		spec.Properties[fmt.Sprintf("group%04d", g)] = apiextensionsv1.JSONSchemaProps{
			Type: "object", Required: required, Properties: props,
			XValidations: []apiextensionsv1.ValidationRule{{Rule: "!has(self.ports) || self.ports.size() <= self.replicas * 4", Message: "too many ports"}},
		}
	}
	return &apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": spec}}
}

// bigCRD is the base CRD with a BigSchema.
func bigCRD(b *testing.B, lines int, changed bool) (*apiextensionsv1.CustomResourceDefinition, int) {
	b.Helper()
	crd := mustCRD(b, baseCRD)
	crd.Spec.Versions[0].Schema.OpenAPIV3Schema = BigSchema(lines, changed)
	out, err := yaml.Marshal(crd)
	if err != nil {
		b.Fatal(err)
	}
	return crd, bytes.Count(out, []byte("\n"))
}

// BenchmarkCompare compares two CRDs whose schemas are about 500, 2,000
// and 8,000 lines of YAML, one field in twenty changed, side by side with
// reflect.DeepEqual of the old CRD and an identical copy (a full read of
// two such CRDs, the least any comparison must do; DeepEqual of two
// different CRDs stops at the first difference). ns/op growing with the line count at a constant ns/line shows
// the cost is linear.
func BenchmarkCompare(b *testing.B) {
	for _, lines := range []int{500, 2000, 8000} {
		old, n := bigCRD(b, lines, false)
		new, _ := bigCRD(b, lines, true)
		same := old.DeepCopy()
		b.Run(fmt.Sprintf("lines=%d/compare", lines), func(b *testing.B) {
			b.ReportAllocs()
			var r *Result
			for b.Loop() {
				r = Compare(old, new)
			}
			if r.Breaking == 0 {
				b.Fatal("no breaking change found")
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/line")
			b.ReportMetric(float64(n), "lines")
		})
		b.Run(fmt.Sprintf("lines=%d/deep-equal", lines), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !reflect.DeepEqual(old, same) {
					b.Fatal("not equal")
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/line")
			b.ReportMetric(float64(n), "lines")
		})
	}
}
