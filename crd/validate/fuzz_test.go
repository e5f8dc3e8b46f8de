package validate

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/fieldwatch/fieldwatch/crd/diff"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// FuzzValidate feeds arbitrary manifests, and arbitrary schemas in an
// otherwise valid CRD, to the validation: an error or nothing, never a
// panic; and a CRD the validation accepts, compared with itself, reports
// nothing.
func FuzzValidate(f *testing.F) {
	f.Add([]byte(valid), []byte(`{"type":"object","properties":{"spec":{"type":"object"}}}`))
	f.Add([]byte(valid+"---\n"+valid), []byte(`{"properties":{"a":{"type":"string","default":1}}}`))
	f.Add([]byte("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nspec: {versions: [{name: v1, served: true}]}\n"),
		[]byte(`{"type":"object","x-kubernetes-validations":[{"rule":"self.a >"}],"properties":{"a":{"type":"array","x-kubernetes-list-type":"map"}}}`))
	f.Add([]byte("kind: List\nitems: [{kind: CustomResourceDefinition, apiVersion: apiextensions.k8s.io/v1, metadata: {name: x}}]\n"),
		[]byte(`{"type":"object","additionalProperties":{"type":"string"},"properties":{"a":{"type":"string"}}}`))
	f.Fuzz(func(t *testing.T, manifest, schema []byte) {
		ctx := context.Background()
		docs, err := diff.Parse("fuzz.yaml", manifest)
		if err == nil {
			if err := Documents(ctx, docs); err != nil && err.Error() == "" {
				t.Fatal("empty error")
			}
		}
		base, err := diff.Parse("base.yaml", []byte(valid))
		if err != nil || len(base) != 1 {
			t.Fatalf("base CRD: %v", err)
		}
		crd := base[0].CRD
		s := &apiextensionsv1.JSONSchemaProps{}
		if json.Unmarshal(schema, s) != nil {
			return
		}
		crd.Spec.Versions[0].Schema.OpenAPIV3Schema = s
		if errs := CRD(ctx, crd); len(errs) > 0 {
			return
		}
		if self := diff.Compare(crd, crd.DeepCopy()); len(self.Checks) != 0 {
			t.Fatalf("a valid CRD compared with itself reports %+v", self.Checks)
		}
	})
}
