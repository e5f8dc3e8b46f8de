package crdguard

import (
	"slices"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestClassifier(t *testing.T) {
	c := &Classifier{
		// v1alpha1 until the switch at 200, unsettled until 230, v1 after.
		epochs: []epoch{{version: "v1alpha1", from: 100}, {from: 200}, {version: "v1", from: 230}},
		stored: []string{"v1alpha1", "v1"},
	}
	tests := []struct {
		name    string
		c       *Classifier
		rv      string
		version string
	}{
		{"before the ledger knew the CRD", c, "90", ""},
		{"at the CRD's revision", c, "100", ""},
		{"in the first epoch", c, "150", "v1alpha1"},
		{"the switch's own revision", c, "200", "v1alpha1"},
		{"while the switch settles", c, "215", ""},
		{"at the settling revision", c, "230", ""},
		{"after it", c, "231", "v1"},
		{"not a number", c, "x", ""},
		{"one stored version places everything", &Classifier{stored: []string{"v1"}}, "5", "v1"},
		{"past the horizon", &Classifier{epochs: []epoch{{version: "v1", from: 10}}, stored: []string{"v1alpha1", "v1"}, horizon: 50}, "60", ""},
		{"within the horizon", &Classifier{epochs: []epoch{{version: "v1", from: 10}}, stored: []string{"v1alpha1", "v1"}, horizon: 50}, "40", "v1"},
		{"a migration record covers the past", &Classifier{epochs: c.epochs, stored: c.stored, migrated: &Migration{Version: "v1"}, migratedRV: 300}, "50", "v1"},
		{"after the record, the epochs", &Classifier{epochs: []epoch{{version: "v2", from: 300}}, stored: c.stored, migrated: &Migration{Version: "v1"}, migratedRV: 300}, "301", "v2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.c.Version(tt.rv); got != tt.version {
				t.Errorf("Version(%s) = %q, want %q", tt.rv, got, tt.version)
			}
		})
	}
	if !c.CanPlace("v1alpha1") || c.CanPlace("v2") || !slices.Equal(c.MayBe(), []string{"v1alpha1", "v1"}) {
		t.Errorf("CanPlace or MayBe wrong")
	}
}

func TestNewClassifier(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	crd := func(written time.Duration, migrated string) *apiextensionsv1.CustomResourceDefinition {
		at := metav1.NewTime(now.Add(-written))
		c := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "100",
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "helm", Time: &at}}}}
		c.Spec.Versions = []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1alpha1"}, {Name: "v1", Storage: true}}
		c.Status.StoredVersions = []string{"v1alpha1", "v1"}
		if migrated != "" {
			c.Annotations = map[string]string{MigrationAnnotation: migrated}
		}
		return c
	}
	tests := []struct {
		name    string
		crd     *apiextensionsv1.CustomResourceDefinition
		rv      string
		version string
	}{
		{"written after a settled CRD", crd(time.Minute, ""), "101", "v1"},
		{"written before", crd(time.Minute, ""), "99", ""},
		{"written after a CRD changed a second ago", crd(time.Second, ""), "101", ""},
		{"migrated", crd(time.Minute, `{"version":"v1","resourceVersion":"99"}`), "99", "v1"},
		{"a record that does not read is ignored", crd(time.Minute, `{"version":"v1"}`), "99", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NewClassifier(tt.crd, now, DefaultSettle).Version(tt.rv); got != tt.version {
				t.Errorf("Version(%s) = %q, want %q", tt.rv, got, tt.version)
			}
		})
	}
}

func TestLines(t *testing.T) {
	long := make([]string, 30)
	for i := range long {
		long[i] = "a-namespace-with-a-long-name/an-object-with-an-even-longer-name"
	}
	tests := []struct {
		name  string
		head  string
		names []string
		total int
		want  string
	}{
		{"all fit", "fieldwatch: x", []string{"a/b", "a/c"}, 2, "fieldwatch: x: a/b, a/c"},
		{"more than named", "fieldwatch: x", []string{"a/b", "a/c"}, 1002, "fieldwatch: x: a/b, a/c +1,000"},
		{"cut to the line", "fieldwatch: x", long, 30, "fieldwatch: x: a-namespace-with-a-long-name/an-object-with-an-even-longer-name +29"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := withSamples(tt.head, tt.names, tt.total); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
	var tl tally
	for _, n := range []string{"e", "a", "g", "c", "b", "f", "d"} {
		tl.add("ns", n)
	}
	if got := tl.names("ns"); !slices.Equal(got, []string{"a", "b", "c", "d", "e"}) || tl.n != 7 {
		t.Errorf("tally %v of %d", got, tl.n)
	}
}
