package crdguard

import (
	"context"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestRefusalCauses: kubectl prints an Invalid status by its causes only
// ("The CustomResourceDefinition "x" is invalid: FIELD: MESSAGE, ..."),
// so a refusal's causes say what it refuses and how to go ahead: a check
// per field for an update, the deletion's count for a deletion, and last
// the annotation.
func TestRefusalCauses(t *testing.T) {
	crd := mustCRD(t, testCRD)
	narrowed := crd.DeepCopy()
	narrowColor(narrowed)
	src := &memSource{objects: []map[string]any{widgetObj("shop", "w1", "red", "7"), widgetObj("shop", "w2", "blue", "8")}}
	g, err := New(Options{Mode: Deny, Source: src, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	hint := metav1.StatusCause{Type: metav1.CauseTypeFieldValueRequired, Field: "metadata.annotations[" + AllowAnnotation + "]",
		Message: `set it to "<reason>" on the CRD to go ahead anyway (fieldwatch's CRD guard)`}
	tests := []struct {
		name  string
		req   *admissionv1.AdmissionRequest
		field string // of the first cause
		first string // in the first cause's message
	}{
		{"an update", request(t, admissionv1.Update, "", crd, narrowed), "spec.versions[0].schema.openAPIV3Schema.properties.spec.properties.color.enum",
			"enum-values-removed spec.color (v1): 1 object rejected: shop/w1"},
		{"a deletion", request(t, admissionv1.Delete, "", crd, nil), "metadata.name", "deleting CRD widgets.example.com deletes 2 Widgets in 1 namespace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := g.Review(context.Background(), tt.req).Response
			if r.Allowed || r.Result == nil || r.Result.Details == nil {
				t.Fatalf("answer %+v: want a refusal with details", r)
			}
			causes := r.Result.Details.Causes
			if len(causes) < 2 || causes[len(causes)-1] != hint {
				t.Fatalf("causes %+v: want at least one, then the annotation's", causes)
			}
			if c := causes[0]; !strings.Contains(c.Message, tt.first) || (tt.field != "" && c.Field != tt.field) {
				t.Errorf("first cause %+v, want field %s and %q", c, tt.field, tt.first)
			}
		})
	}
}
