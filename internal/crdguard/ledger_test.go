package crdguard

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// storedObjects returns fieldwatch_crd_stored_objects{crd, version} as
// reg serves it, -1 when it has no such series.
func storedObjects(t *testing.T, reg *prometheus.Registry, crd, version string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "fieldwatch_crd_stored_objects" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["crd"] == crd && labels["version"] == version {
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

// lastEpoch returns the version of the ledger's latest epoch of name.
func (l *Ledger) lastEpoch(name string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.crds[name]
	if st == nil {
		return "", false
	}
	return st.epochs[len(st.epochs)-1].version, true
}

// TestLedgerStorageSwitchAndMigration switches a CRD's storage version
// with objects stored at the old one, and follows the ledger's counts:
// through writes after the switch, the guard refusing to take the old
// version out of status.storedVersions, a migration (which the guard lets
// through), and the old version leaving the CRD.
func TestLedgerStorageSwitchAndMigration(t *testing.T) {
	env := testenv.Shared(t) // skips the unit tier
	ctx := context.Background()
	fc := clocktesting.NewFakeClock(time.Now())
	ledger := NewLedger(LedgerOptions{Dynamic: env.Dynamic(t), Clock: fc, Logger: discard})
	testenv.RunUntilCleanup(t, time.Minute, ledger.Run)
	testenv.Eventually(t, 30*time.Second, "the ledger to list the CRDs", ledger.HasSynced)

	const group = "ledger.guard.example.com"
	crd := widgetCRD(t, group)
	v1alpha1 := *crd.Spec.Versions[0].DeepCopy()
	v1alpha1.Name = "v1alpha1"
	crd.Spec.Versions[0].Storage = false
	crd.Spec.Versions = append(crd.Spec.Versions, v1alpha1) // v1alpha1 stored
	if err := env.InstallCRD(crd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Dynamic(t).Resource(CRDResource).Delete(context.Background(), crd.Name, metav1.DeleteOptions{})
	})
	testenv.Eventually(t, 30*time.Second, "the ledger to see the CRD", func() bool { v, ok := ledger.lastEpoch(crd.Name); return ok && v == "v1alpha1" })
	createWidgets(t, env, group, "v1alpha1", 20)
	w := watchWidgets(t, env, group, 20)
	reg := prometheus.NewRegistry()
	reg.MustRegister(ledger.Collector(func() Cache { return w }))
	if n := storedObjects(t, reg, crd.Name, "v1alpha1"); n != 20 {
		t.Fatalf("%v objects at v1alpha1 before the switch, want 20", n)
	}

	// The switch: the objects written before it stay at v1alpha1; the
	// ledger places the writes after it once it has settled.
	dyn := env.Dynamic(t)
	if err := editCRD(ctx, dyn, crd.Name, false, func(c *apiextensionsv1.CustomResourceDefinition) {
		c.Spec.Versions[0].Storage, c.Spec.Versions[1].Storage = true, false
	}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the ledger to see the switch", func() bool { v, _ := ledger.lastEpoch(crd.Name); return v == "" && fc.HasWaiters() })
	fc.Step(DefaultSettle)
	testenv.Eventually(t, 30*time.Second, "the switch to settle", func() bool { v, _ := ledger.lastEpoch(crd.Name); return v == "v1" })
	widgets := dyn.Resource(schema.GroupVersionResource{Group: group, Version: "v1", Resource: "widgets"})
	for i := 1; i <= 5; i++ { // w00001..w00005: blue, in ns1, ns2, ns3, ns0, ns1
		u, err := widgets.Namespace(fmt.Sprintf("ns%d", i%4)).Get(ctx, fmt.Sprintf("w%05d", i), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := unstructured.SetNestedField(u.Object, "rewritten", "spec", "name"); err != nil {
			t.Fatal(err)
		}
		if _, err := widgets.Namespace(u.GetNamespace()).Update(ctx, u, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 30*time.Second, "5 objects at v1, 15 at v1alpha1", func() bool {
		return storedObjects(t, reg, crd.Name, "v1") == 5 && storedObjects(t, reg, crd.Name, "v1alpha1") == 15
	})

	// The guard refuses to take v1alpha1 out of status.storedVersions.
	srv := serveGuard(t, newGuard(t, Options{Mode: Deny, Source: sources(t, env, w), Ledger: ledger}))
	srv.register(t, env, crd.Name)
	crds := dyn.Resource(CRDResource)
	u, err := crds.Get(ctx, crd.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := unstructured.NestedStringSlice(u.Object, "status", "storedVersions"); strings.Join(got, ",") != "v1alpha1,v1" {
		t.Fatalf("status.storedVersions %v", got)
	}
	if err := unstructured.SetNestedStringSlice(u.Object, []string{"v1"}, "status", "storedVersions"); err != nil {
		t.Fatal(err)
	}
	_, err = crds.UpdateStatus(ctx, u, metav1.UpdateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "stored-version-cleared /status/storedVersions/0 (v1alpha1): 15 objects stored at v1alpha1: ns0/w00000") {
		t.Fatalf("clearing v1alpha1 from status.storedVersions: %v", err)
	}

	// The migration rewrites the 15, finds the 5 written since at v1,
	// and clears v1alpha1, through the guard.
	var pages int
	res, err := Migrate(ctx, crd.Name, MigrateOptions{Dynamic: dyn, PageSize: 7, Settle: time.Nanosecond,
		Progress: func(MigrateResult) { pages++ }})
	if err != nil {
		t.Fatalf("migrate: %v (%+v)", err, res)
	}
	if !res.Done || res.Objects != 20 || res.Rewritten != 15 || res.Failed != 0 || pages != 3 || strings.Join(res.StoredVersions, ",") != "v1" {
		t.Fatalf("migration %+v in %d pages", res, pages)
	}
	testenv.Eventually(t, 30*time.Second, "every object at v1", func() bool {
		return storedObjects(t, reg, crd.Name, "v1") == 20 && storedObjects(t, reg, crd.Name, "v1alpha1") == -1 && storedObjects(t, reg, crd.Name, Unknown) == -1
	})
	again, err := Migrate(ctx, crd.Name, MigrateOptions{Dynamic: dyn, Settle: time.Nanosecond, Force: true})
	if err != nil || again.Rewritten != 0 || again.Objects != 20 {
		t.Errorf("a second migration: %+v, %v", again, err)
	}

	// No object is stored at v1alpha1 any more, but every one has fields
	// its creator wrote at v1alpha1 (their managedFields say so, the 5
	// rewritten too): the guard refuses to stop serving it until told to
	// go ahead.
	dropV1alpha1 := func(c *apiextensionsv1.CustomResourceDefinition) { c.Spec.Versions = c.Spec.Versions[:1] }
	err = editCRD(ctx, dyn, crd.Name, false, dropV1alpha1)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "served-version-removed (v1alpha1): 20 objects with fields last written at v1alpha1: ns0/w00000") ||
		strings.Contains(err.Error(), "stored-version") {
		t.Fatalf("removing v1alpha1: %v", err)
	}
	if err := editCRD(ctx, dyn, crd.Name, false, func(c *apiextensionsv1.CustomResourceDefinition) {
		dropV1alpha1(c)
		c.Annotations[AllowAnnotation] = "v1alpha1 manifests are gone, PLAT-9"
	}); err != nil {
		t.Fatalf("removing v1alpha1 with the annotation: %v", err)
	}
}
