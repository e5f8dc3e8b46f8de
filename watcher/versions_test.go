package watcher

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// TestManyVersionsSwitchAndDeleteUnderLoad: a CRD serving five versions is
// watched at its preferred one; when that version stops being served the
// watcher moves to the next without reporting anything spurious; when the
// CRD is deleted while objects are being created, every object seen is
// reported deleted once and nothing loops.
func TestManyVersionsSwitchAndDeleteUnderLoad(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	ns := namespace(t, env)
	ctx := context.Background()
	group := "multis.example.org"
	crd := simpleCRD(schema.GroupVersionResource{Group: group, Version: "v1", Resource: "multis"}, "Multi")
	base := crd.Spec.Versions[0]
	crd.Spec.Versions = nil
	for v := 1; v <= 5; v++ {
		ver := base
		ver.Name = fmt.Sprintf("v%d", v)
		ver.Storage = v == 1
		crd.Spec.Versions = append(crd.Spec.Versions, ver)
	}
	mustf(t, env.InstallCRD(crd), "install")
	dyn := env.Dynamic(t)
	at := func(v string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: group, Version: v, Resource: "multis"}
	}
	obj := func(name string, size int64) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": group + "/v1", "kind": "Multi",
			"metadata": map[string]any{"name": name, "namespace": ns}, "spec": map[string]any{"size": size},
		}}
	}
	for i := range 5 {
		_, err := dyn.Resource(at("v1")).Namespace(ns).Create(ctx, obj(fmt.Sprintf("m%d", i), 1), metav1.CreateOptions{})
		mustf(t, err, "create")
	}

	rec := &recorder{}
	w, _ := startWatcher(t, env.Config(), Config{Selectors: []change.Selector{{Group: group, Resource: "multis"}}, Handler: rec,
		RediscoveryInterval: time.Second})
	version := func() string {
		for _, r := range w.resources() {
			if r.Group == group {
				return r.Version
			}
		}
		return ""
	}
	if v := version(); v != "v5" {
		t.Fatalf("watching %q, want the preferred version v5", v)
	}
	inNS := func(c *Change) bool { return c.Object().GetNamespace() == ns }

	// Stop serving v5: the watcher moves to v4 and reports nothing.
	cur, err := dyn.Resource(crdGVR).Get(ctx, crd.Name, metav1.GetOptions{})
	mustf(t, err, "get CRD")
	var c apiextensionsv1.CustomResourceDefinition
	mustf(t, runtime.DefaultUnstructuredConverter.FromUnstructured(cur.Object, &c), "convert")
	c.Spec.Versions[4].Served = false
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&c)
	mustf(t, err, "convert")
	_, err = dyn.Resource(crdGVR).Update(ctx, &unstructured.Unstructured{Object: u}, metav1.UpdateOptions{})
	mustf(t, err, "stop serving v5")
	testenv.Eventually(t, 30*time.Second, "the switch to v4", func() bool { return version() == "v4" && w.Synced() })
	_, err = dyn.Resource(at("v4")).Namespace(ns).Patch(ctx, "m0", types.MergePatchType, []byte(`{"spec":{"size":2}}`), metav1.PatchOptions{})
	mustf(t, err, "patch m0")
	testenv.Eventually(t, 30*time.Second, "m0's update", func() bool { return len(rec.of(at("v4"), ns, "m0")) == 1 })
	if n := rec.count(inNS); n != 1 {
		t.Errorf("%d changes after the version switch, want only m0's update", n)
	}
	if c := rec.of(at("v4"), ns, "m0")[0]; c.Type != change.Updated || field(c.Old, "spec", "size") != int64(1) || field(c.New, "spec", "size") != int64(2) {
		t.Errorf("m0: %s %v -> %v, want updated 1 -> 2", c.Type, field(c.Old, "spec", "size"), field(c.New, "spec", "size"))
	}

	// Delete the CRD while writers create objects.
	var stop atomic.Bool
	var writers sync.WaitGroup
	for wr := range 4 {
		writers.Go(func() {
			for i := 0; !stop.Load(); i++ {
				name := fmt.Sprintf("load-%d-%d", wr, i)
				if _, err := dyn.Resource(at("v1")).Namespace(ns).Create(ctx, obj(name, 1), metav1.CreateOptions{}); err != nil {
					return // the CRD is going or gone
				}
			}
		})
	}
	testenv.Eventually(t, 30*time.Second, "load", func() bool {
		return rec.count(func(c *Change) bool { return inNS(c) && c.Type == change.Created }) >= 20
	})
	mustf(t, dyn.Resource(crdGVR).Delete(ctx, crd.Name, metav1.DeleteOptions{}), "delete CRD")
	stop.Store(true)
	writers.Wait()
	testenv.Eventually(t, 60*time.Second, "the resource to be dropped", func() bool { return version() == "" })
	// Every object the watcher reported created is reported deleted, once.
	rec.mu.Lock()
	state := map[string][]change.Type{}
	for _, c := range rec.changes {
		if inNS(c) {
			n := c.Object().GetName()
			state[n] = append(state[n], c.Type)
		}
	}
	rec.mu.Unlock()
	for name, types := range state {
		last, deletes := types[len(types)-1], 0
		for _, tp := range types {
			if tp == change.Deleted {
				deletes++
			}
		}
		if last != change.Deleted || deletes != 1 {
			t.Errorf("%s: changes %v, want exactly one final deletion", name, types)
		}
	}
	listWatchErrors := func() (n float64) {
		for v := 1; v <= 5; v++ {
			n += testutil.ToFloat64(w.metrics.listWatchErrors.WithLabelValues(fmt.Sprintf("multis.v%d.%s", v, group)))
		}
		return n
	}
	errs := listWatchErrors()
	waitPasses(t, w, 3)
	if more := listWatchErrors() - errs; more > 1 {
		t.Errorf("list/watch errors kept growing after the CRD was gone: +%v", more)
	}
}
