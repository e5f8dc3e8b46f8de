package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fieldwatch/fieldwatch/internal/crdguard"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// TestCRDGuardWiring runs fieldwatch with the CRD guard in deny mode and a
// rule on Gadgets: the guard the admission endpoint calls answers a
// review of a narrowing of their CRD from the watcher's cache, and
// /metrics counts the Gadgets per stored version.
func TestCRDGuardWiring(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	const group = "wiring.guard.example.com"
	ns := "crd-guard-wiring"
	env.EnsureNamespace(t, ns)
	if _, err := env.Apply(ctx, testenv.ApplyOptions{}, []byte(gadgetsCRD(group, "[red, blue]", false, false))); err != nil {
		t.Fatal(err)
	}
	gadgets := env.Dynamic(t).Resource(schema.GroupVersionResource{Group: group, Version: "v1", Resource: "gadgets"}).Namespace(ns)
	for i, color := range []string{"red", "blue", "red"} {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": group + "/v1", "kind": "Gadget",
			"metadata": map[string]any{"name": fmt.Sprintf("g%d", i)}, "spec": map[string]any{"color": color}}}
		if _, err := gadgets.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	// A rule with the impact of CRD changes makes the watcher keep the
	// custom resources whole.
	rules := fmt.Sprintf("rules:\n  - name: crds\n    match: {resources: [{group: apiextensions.k8s.io, kind: CustomResourceDefinition}], names: [gadgets.%s]}\n"+
		"    crd: {impact: true}\n    actions: [{log: {}}]\n", group)
	if err := writeTestFile(rulesFile, rules); err != nil {
		t.Fatal(err)
	}
	cfg := Config{RulesFiles: []string{rulesFile}, Rest: env.Config(), HTTPAddr: "127.0.0.1:0", Stdout: io.Discard,
		Logger: slog.New(slog.DiscardHandler), CRDGuard: CRDGuardConfig{Mode: crdguard.Deny}}
	addr := make(chan string, 1)
	cfg.Ready = func(a string) { addr <- a }
	a, err := newApp(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	testenv.RunUntilCleanup(t, 30*time.Second, a.run)
	base := "http://" + <-addr
	testenv.Eventually(t, time.Minute, "the ledger to count 3 gadgets at v1", func() bool {
		return metricOf(t, base, fmt.Sprintf(`fieldwatch_crd_stored_objects{crd="gadgets.%s",version="v1"}`, group)) == 3
	})

	crds := env.Dynamic(t).Resource(crdguard.CRDResource)
	u, err := crds.Get(ctx, "gadgets."+group, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old, err := json.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	narrowed := strings.Replace(string(old), `"enum":["red","blue"]`, `"enum":["blue"]`, 1)
	if narrowed == string(old) {
		t.Fatalf("no enum in %s", old)
	}
	req := &admissionv1.AdmissionRequest{UID: "r1", Operation: admissionv1.Update, Name: u.GetName(),
		Resource:  metav1.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"},
		OldObject: runtime.RawExtension{Raw: old}, Object: runtime.RawExtension{Raw: []byte(narrowed)}}
	g := a.crdGuard()
	if g == nil || !crdguard.Handles(req) {
		t.Fatal("no guard, or it does not take CRD updates")
	}
	d := g.Review(ctx, req)
	if d.Response.Allowed || !strings.Contains(d.Response.Result.Message, "enum-values-removed spec.color (v1): 2 objects rejected: crd-guard-wiring/g0, crd-guard-wiring/g2") {
		t.Errorf("answer %+v", d.Response)
	}
	if n := metricOf(t, base, `fieldwatch_crd_guard_objects_read_total{origin="cache"}`); n != 3 {
		t.Errorf("%v objects read from the cache, want 3", n)
	}
}
