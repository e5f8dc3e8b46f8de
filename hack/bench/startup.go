package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

const startupGroup = "startup.example.org"

var crdsGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

func startupCRD(i int) *unstructured.Unstructured {
	kind := fmt.Sprintf("Kind%03d", i)
	plural := strings.ToLower(kind) + "s"
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": plural + "." + startupGroup},
		"spec": map[string]any{
			"group": startupGroup, "scope": "Namespaced",
			"names": map[string]any{"plural": plural, "kind": kind, "listKind": kind + "List"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
		},
	}}
}

// startup measures the time from start to ready and the peak RSS with
// many CRDs and objects, with and without the watch-list client.
func (b *bench) startup(ctx context.Context) error {
	total := b.o.crds * b.o.objectsPerCRD
	_, _ = fmt.Fprintf(os.Stderr, "bench: creating %d CRDs and %d objects\n", b.o.crds, total)
	if err := createMany(ctx, b.dyn.Resource(crdsGVR), b.o.crds, startupCRD); err != nil {
		return err
	}
	for i := range b.o.crds {
		if err := waitServed(ctx, b.dyn, i); err != nil {
			return err
		}
	}
	for i := range b.o.crds {
		kind := fmt.Sprintf("Kind%03d", i)
		gvr := schema.GroupVersionResource{Group: startupGroup, Version: "v1", Resource: strings.ToLower(kind) + "s"}
		err := createMany(ctx, b.dyn.Resource(gvr).Namespace(cmNS), b.o.objectsPerCRD, func(j int) *unstructured.Unstructured {
			return &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": startupGroup + "/v1", "kind": kind,
				"metadata": map[string]any{"name": fmt.Sprintf("o-%05d", j), "namespace": cmNS},
				"spec":     map[string]any{"n": int64(j), "owner": "team-a", "note": strings.Repeat("z", 200)},
			}}
		})
		if err != nil {
			return err
		}
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	rulesFile := filepath.Join(root, "examples/crd-audit/rules.yaml")
	for _, variant := range []struct {
		name string
		env  []string
	}{
		{"watch-list streaming (default)", nil},
		{"paginated lists (WatchListClient off)", []string{"KUBE_FEATURE_WatchListClient=false"}},
	} {
		start := time.Now()
		p, err := startFieldwatch("fieldwatch-startup", b.binary, b.kubeconfig, rulesFile, variant.env)
		if err != nil {
			return err
		}
		if err := p.waitSynced(5 * time.Minute); err != nil {
			p.stop()
			return err
		}
		ready := time.Since(start)
		rss := p.peakRSS()
		cached := p.metric("fieldwatch_watcher_cached_objects")
		p.stop()
		b.t.add(fmt.Sprintf("start-up to ready, %d CRDs + %d objects, %s", b.o.crds+1, total, variant.name), "",
			fmt.Sprintf("%.1f s, peak RSS %.0f MiB", ready.Seconds(), float64(rss)/(1<<20)), "",
			fmt.Sprintf("crd-audit rules (whole objects), %.0f objects cached", cached))
	}
	return nil
}

// waitServed waits until the i-th startup CRD's resource is served.
func waitServed(ctx context.Context, dyn dynamic.Interface, i int) error {
	gvr := schema.GroupVersionResource{Group: startupGroup, Version: "v1", Resource: fmt.Sprintf("kind%03ds", i)}
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := dyn.Resource(gvr).Namespace(cmNS).List(ctx, metav1.ListOptions{Limit: 1})
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not served: %w", gvr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cborSection compares CPU per change when fieldwatch decodes custom
// resources from CBOR instead of JSON, on a control plane that serves CBOR.
func (b *bench) cborSection(ctx context.Context) error {
	_, _ = fmt.Fprintln(os.Stderr, "bench: CBOR: a second control plane with CBORServingAndStorage")
	env, err := testenv.New(testenv.Options{FeatureGates: []string{"CBORServingAndStorage=true"}})
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	if _, err := env.ApplyFiles(ctx, testenv.ApplyOptions{}, filepath.Join(root, "examples/crds/widgets.yaml")); err != nil {
		return err
	}
	kubeconfig := filepath.Join(b.dir, "kubeconfig-cbor")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		return err
	}
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": widgetNS}}}
	if _, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return err
	}
	n := min(b.o.updates, 3000)
	widgets := dyn.Resource(widgetsGVR).Namespace(widgetNS)
	if err := createMany(ctx, widgets, n, benchWidget); err != nil {
		return err
	}
	rulesFile := filepath.Join(b.dir, "cbor.yaml")
	if err := os.WriteFile(rulesFile, []byte(`rules:
  - name: resized
    match: {resources: [{group: example.com, kind: Widget}]}
    on: [update]
    fields: [spec.size]
    actions: [{log: {}}]
`), 0o644); err != nil {
		return err
	}
	bare, err := startBare(kubeconfig, widgetNS, "widgets")
	if err != nil {
		return err
	}
	defer bare.stop()
	jsonP, err := startFieldwatch("fieldwatch-json", b.binary, kubeconfig, rulesFile, nil)
	if err != nil {
		return err
	}
	defer jsonP.stop()
	cborP, err := startFieldwatch("fieldwatch-cbor", b.binary, kubeconfig, rulesFile,
		[]string{"KUBE_FEATURE_ClientsAllowCBOR=true", "KUBE_FEATURE_ClientsPreferCBOR=true"})
	if err != nil {
		return err
	}
	defer cborP.stop()
	for _, p := range []*process{bare, jsonP, cborP} {
		if err := p.waitSynced(3 * time.Minute); err != nil {
			return err
		}
	}
	time.Sleep(2 * time.Second)
	c0b, c0j, c0c := bare.cpu(), jsonP.cpu(), cborP.cpu()
	if err := createManyPatches(ctx, widgets, n); err != nil {
		return err
	}
	for _, p := range []*process{bare, jsonP, cborP} {
		if _, err := p.waitCount(int64(n), 5*time.Minute); err != nil {
			return err
		}
	}
	cb := (bare.cpu() - c0b) / time.Duration(n)
	cj, cc := (jsonP.cpu()-c0j)/time.Duration(n), (cborP.cpu()-c0c)/time.Duration(n)
	b.t.add("CPU per change of a 5 KiB custom resource, log action, JSON", msCol(cb), msCol(cj), ratio(float64(cj), float64(cb)), "")
	b.t.add("same with CBOR (fieldwatch only)", "", msCol(cc), fmt.Sprintf("CBOR/JSON %.2fx", float64(cc)/float64(cj)),
		"CBORServingAndStorage on the server, ClientsPreferCBOR in fieldwatch (both alpha)")
	return nil
}

// createManyPatches resizes each of the first n widgets once.
func createManyPatches(ctx context.Context, ri dynamic.ResourceInterface, n int) error {
	return forEach(n, func(i int) error {
		_, err := ri.Patch(ctx, fmt.Sprintf("w-%05d", i), types.MergePatchType, fmt.Appendf(nil, `{"spec":{"size":%d}}`, 1000+i), metav1.PatchOptions{})
		return err
	})
}
