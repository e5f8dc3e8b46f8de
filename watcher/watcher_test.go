package watcher

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// TestBuiltinAndCustomChanges: ConfigMaps and a CRD present at start are
// watched; objects that existed before start yield nothing; create, update
// and delete arrive once each with the right old and new objects.
func TestBuiltinAndCustomChanges(t *testing.T) {
	env := testenv.Shared(t)
	installWidgets(t, env)
	ns := namespace(t, env)
	ctx := context.Background()
	dyn := env.Dynamic(t)
	cms := dyn.Resource(configMaps).Namespace(ns)
	wds := dyn.Resource(widgets).Namespace(ns)

	_, err := cms.Create(ctx, configMap(ns, "before", map[string]any{"k": "v"}), metav1.CreateOptions{})
	mustf(t, err, "create configmap")
	_, err = wds.Create(ctx, widget(ns, "before", 1), metav1.CreateOptions{})
	mustf(t, err, "create widget")

	rec := &recorder{}
	w, _ := startWatcher(t, env.Config(), Config{
		Selectors: []change.Selector{{Resource: "configmaps"}, {Group: "example.com", Kind: "Widget"}},
		Handler:   rec,
	})
	res := w.resources()
	if len(res) != 2 {
		t.Fatalf("watching %v, want configmaps and widgets", res)
	}
	for _, r := range res {
		if r.Custom != (r.Group == "example.com") {
			t.Errorf("%s: Custom = %v", r, r.Custom)
		}
	}

	cm, err := cms.Create(ctx, configMap(ns, "cm", map[string]any{"k": "1"}), metav1.CreateOptions{})
	mustf(t, err, "create configmap")
	mustf(t, unstructured.SetNestedField(cm.Object, "2", "data", "k"), "set")
	_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	mustf(t, err, "update configmap")
	mustf(t, cms.Delete(ctx, "cm", metav1.DeleteOptions{}), "delete configmap")

	wd, err := wds.Create(ctx, widget(ns, "w1", 1), metav1.CreateOptions{})
	mustf(t, err, "create widget")
	mustf(t, unstructured.SetNestedField(wd.Object, int64(2), "spec", "size"), "set")
	_, err = wds.Update(ctx, wd, metav1.UpdateOptions{})
	mustf(t, err, "update widget")
	mustf(t, wds.Delete(ctx, "w1", metav1.DeleteOptions{}), "delete widget")

	check := func(gvr schema.GroupVersionResource, name string, path []string, v1, v2 any) {
		t.Helper()
		testenv.Eventually(t, 30*time.Second, gvr.Resource+" changes", func() bool { return len(rec.of(gvr, ns, name)) >= 3 })
		cs := rec.of(gvr, ns, name)
		if got := kinds(cs); got != "[created updated deleted]" {
			t.Fatalf("%s %s: changes %s, want [created updated deleted]", gvr.Resource, name, got)
		}
		created, updated, deleted := cs[0], cs[1], cs[2]
		if created.Old != nil || field(created.New, path...) != v1 || created.Initial {
			t.Errorf("created: old %v new %v initial %v", created.Old, field(created.New, path...), created.Initial)
		}
		if field(updated.Old, path...) != v1 || field(updated.New, path...) != v2 {
			t.Errorf("updated: %v -> %v, want %v -> %v", field(updated.Old, path...), field(updated.New, path...), v1, v2)
		}
		if deleted.New != nil || field(deleted.Old, path...) != v2 {
			t.Errorf("deleted: old %v new %v", field(deleted.Old, path...), deleted.New)
		}
		if created.New.GetUID() == "" || updated.New.GetUID() != created.New.GetUID() {
			t.Errorf("uids: %s %s", created.New.GetUID(), updated.New.GetUID())
		}
		if m := created.New.Map(); m["kind"] == "" || m["apiVersion"] == "" {
			t.Errorf("object map lacks apiVersion/kind: %v", m)
		}
	}
	check(configMaps, "cm", []string{"data", "k"}, "1", "2")
	check(widgets, "w1", []string{"spec", "size"}, int64(1), int64(2))

	if n := len(rec.of(configMaps, ns, "before")) + len(rec.of(widgets, ns, "before")); n != 0 {
		t.Errorf("%d changes for objects that existed before start, want none", n)
	}
}

// TestCRDComesAndGoes: a CRD created after start is watched within a
// deadline and objects created right after it are reported; when the CRD
// is deleted its informer stops, its objects are reported deleted, and
// nothing loops against the vanished resource.
func TestCRDComesAndGoes(t *testing.T) {
	env := testenv.Shared(t)
	ns := namespace(t, env)
	ctx := context.Background()
	rec := &recorder{}
	w, _ := startWatcher(t, env.Config(), Config{Selectors: []change.Selector{{Group: "*", Custom: true}}, Handler: rec,
		RediscoveryInterval: time.Second})

	gadgets := schema.GroupVersionResource{Group: "gadgets.example.org", Version: "v1", Resource: "gadgets"}
	crd := simpleCRD(gadgets, "Gadget")
	mustf(t, env.InstallCRD(crd), "install gadget CRD")
	dyn := env.Dynamic(t)
	g := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gadgets.example.org/v1", "kind": "Gadget",
		"metadata": map[string]any{"name": "g1", "namespace": ns},
		"spec":     map[string]any{"size": int64(1)},
	}}
	_, err := dyn.Resource(gadgets).Namespace(ns).Create(ctx, g, metav1.CreateOptions{})
	mustf(t, err, "create gadget")

	testenv.Eventually(t, 15*time.Second, "gadgets to be watched", func() bool {
		for _, r := range w.resources() {
			if gvr(r) == gadgets && r.Custom {
				return true
			}
		}
		return false
	})
	testenv.Eventually(t, 15*time.Second, "the gadget created with its CRD to be reported", func() bool {
		cs := rec.of(gadgets, ns, "g1")
		return len(cs) == 1 && cs[0].Type == change.Created && !cs[0].Initial
	})

	mustf(t, env.Clientset(t).Discovery().RESTClient().Delete().
		AbsPath("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd.Name).Do(ctx).Error(), "delete CRD")
	testenv.Eventually(t, 30*time.Second, "gadgets to be dropped", func() bool {
		for _, r := range w.resources() {
			if gvr(r) == gadgets {
				return false
			}
		}
		return true
	})
	testenv.Eventually(t, 15*time.Second, "the gadget to be reported deleted", func() bool {
		cs := rec.of(gadgets, ns, "g1")
		return len(cs) == 2 && cs[1].Type == change.Deleted
	})
	// Nothing loops: a few more discovery passes add no errors for the
	// vanished resource beyond the ones that told the watcher it was gone.
	gadgetErrors := w.metrics.listWatchErrors.WithLabelValues("gadgets.v1.gadgets.example.org")
	before := testutil.ToFloat64(gadgetErrors)
	waitPasses(t, w, 3)
	after := testutil.ToFloat64(gadgetErrors)
	if after-before > 1 {
		t.Errorf("list/watch errors grew by %v after the CRD was gone", after-before)
	}
	if n := len(rec.of(gadgets, ns, "g1")); n != 2 {
		t.Errorf("gadget changes: %s, want [created deleted]", kinds(rec.of(gadgets, ns, "g1")))
	}
}

// TestReadersDoNotWaitForAStoppingInformer: while the informer of a
// removed CRD's resource stops, the readers of the watches (CachedObjects
// behind /metrics, the resources behind readiness) answer: no lock is held
// across the stop. The informer is held stopping until they have answered.
func TestReadersDoNotWaitForAStoppingInformer(t *testing.T) {
	env := testenv.Shared(t)
	ns := namespace(t, env)
	ctx := context.Background()
	gizmos := schema.GroupVersionResource{Group: "gizmos.example.org", Version: "v1", Resource: "gizmos"}
	crd := simpleCRD(gizmos, "Gizmo")
	mustf(t, env.InstallCRD(crd), "install gizmo CRD")
	dyn := env.Dynamic(t)
	const objects = 20
	for i := range objects {
		_, err := dyn.Resource(gizmos).Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "gizmos.example.org/v1", "kind": "Gizmo",
			"metadata": map[string]any{"name": fmt.Sprintf("g%d", i), "namespace": ns},
		}}, metav1.CreateOptions{})
		mustf(t, err, "create gizmo")
	}

	stopping, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	w, _ := startWatcher(t, env.Config(), Config{Selectors: []change.Selector{{Group: gizmos.Group, Kind: "Gizmo"}}, Handler: &recorder{}},
		func(w *Watcher) {
			w.stopping = func(res change.Resource) {
				if gvr(res) == gizmos {
					once.Do(func() { close(stopping) })
					<-release
				}
			}
		})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the watcher's own cleanup waits for Run
	testenv.Eventually(t, 30*time.Second, "the gizmos to be cached", func() bool { return w.CachedObjects() == objects })

	mustf(t, dyn.Resource(crdGVR).Delete(ctx, crd.Name, metav1.DeleteOptions{}), "delete CRD")
	select {
	case <-stopping:
	case <-time.After(time.Minute):
		t.Fatal("the gizmos' informer was not stopped within a minute of the CRD's deletion")
	}
	answered := make(chan int, 1)
	go func() {
		n := w.CachedObjects()
		_ = w.resources()
		_ = w.Synced()
		answered <- n
	}()
	select {
	case n := <-answered:
		if n > objects {
			t.Errorf("CachedObjects = %d while the informer stops, want at most %d", n, objects)
		}
	case <-time.After(10 * time.Second):
		t.Error("CachedObjects and resources did not answer while an informer was stopping")
	}
	unblock()
	testenv.Eventually(t, 30*time.Second, "the gizmos to be dropped", func() bool {
		return w.CachedObjects() == 0 && len(w.resources()) == 0
	})
}

func simpleCRD(gvr schema.GroupVersionResource, kind string) *apiextensionsv1.CustomResourceDefinition {
	preserve := true
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: gvr.Resource + "." + gvr.Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: gvr.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: gvr.Resource, Kind: kind, ListKind: kind + "List",
			},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: gvr.Version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: &preserve,
				}},
			}},
		},
	}
}

// TestDeleteRecreate: an object deleted and created again under the same
// name is a delete and a create, never an update, also when the worker is
// slow and the two wait in the queue together.
func TestDeleteRecreate(t *testing.T) {
	env := testenv.Shared(t)
	ns := namespace(t, env)
	ctx := context.Background()
	gate := make(chan struct{})
	rec := &recorder{fail: func(c *Change) error {
		if c.Object().GetNamespace() == ns {
			<-gate // hold the worker so that changes queue up
		}
		return nil
	}}
	startWatcher(t, env.Config(), Config{Selectors: []change.Selector{{Resource: "configmaps"}}, Handler: rec, Workers: 1})
	cms := env.Dynamic(t).Resource(configMaps).Namespace(ns)

	first, err := cms.Create(ctx, configMap(ns, "again", map[string]any{"gen": "1"}), metav1.CreateOptions{})
	mustf(t, err, "create")
	mustf(t, cms.Delete(ctx, "again", metav1.DeleteOptions{}), "delete")
	second, err := cms.Create(ctx, configMap(ns, "again", map[string]any{"gen": "2"}), metav1.CreateOptions{})
	mustf(t, err, "create again")
	close(gate)

	testenv.Eventually(t, 30*time.Second, "three changes", func() bool { return len(rec.of(configMaps, ns, "again")) >= 3 })
	cs := rec.of(configMaps, ns, "again")
	if got := kinds(cs); got != "[created deleted created]" {
		t.Fatalf("changes %s, want [created deleted created]", got)
	}
	if cs[1].Old.GetUID() != first.GetUID() || cs[2].New.GetUID() != second.GetUID() {
		t.Errorf("delete of %s then create of %s, want %s then %s", cs[1].Old.GetUID(), cs[2].New.GetUID(), first.GetUID(), second.GetUID())
	}
}

// TestUpdatesKeptApart: updates that pile up behind a slow worker are
// handed on each as its own, in order, each with the state it replaced
// and the resourceVersion its write applied to.
func TestUpdatesKeptApart(t *testing.T) {
	env := testenv.Shared(t)
	ns := namespace(t, env)
	ctx := context.Background()
	gate := make(chan struct{})
	var once bool
	rec := &recorder{fail: func(c *Change) error {
		if c.Object().GetNamespace() == ns && c.Type == change.Updated && !once {
			once = true
			<-gate
		}
		return nil
	}}
	wat, _ := startWatcher(t, env.Config(), Config{Selectors: []change.Selector{{Resource: "configmaps"}}, Handler: rec, Workers: 1})
	cms := env.Dynamic(t).Resource(configMaps).Namespace(ns)
	cm, err := cms.Create(ctx, configMap(ns, "hot", map[string]any{"n": "0"}), metav1.CreateOptions{})
	mustf(t, err, "create")
	for i := 1; i <= 5; i++ {
		mustf(t, unstructured.SetNestedField(cm.Object, fmt.Sprint(i), "data", "n"), "set")
		cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		mustf(t, err, "update %d", i)
	}
	// The first update holds the worker; wait until the other four are
	// queued behind it, each its own, then let it go.
	k := key{gr: configMaps.GroupResource(), namespace: ns, name: "hot"}
	testenv.Eventually(t, 10*time.Second, "updates to queue", func() bool { return wat.pending.waiting(k) == 4 })
	close(gate)
	testenv.Eventually(t, 30*time.Second, "updates", func() bool { return len(rec.of(configMaps, ns, "hot")) == 6 })
	cs := rec.of(configMaps, ns, "hot")
	if got := kinds(cs); got != "[created updated updated updated updated updated]" {
		t.Fatalf("changes %s, want a creation and five updates", got)
	}
	for i, c := range cs {
		if c.Listed || c.Observed != change.ObservedWatch {
			t.Errorf("change %d (%s) from a watch event: listed %v, observed %q", i, c.Type, c.Listed, c.Observed)
		}
		if i == 0 {
			if got := c.PreviousResourceVersion(); got != "" {
				t.Errorf("create: previous resourceVersion %q, want none", got)
			}
			continue
		}
		if a, b := field(c.Old, "data", "n"), field(c.New, "data", "n"); a != fmt.Sprint(i-1) || b != fmt.Sprint(i) {
			t.Errorf("update %d: %v -> %v, want %d -> %d", i, a, b, i-1, i)
		}
		if c.Old != cs[i-1].New {
			t.Errorf("update %d: old object is not the previous change's new one", i)
		}
		if got, want := c.PreviousResourceVersion(), cs[i-1].New.GetResourceVersion(); got != want {
			t.Errorf("update %d: previous resourceVersion %q, want %q", i, got, want)
		}
	}
}

// TestHotObjectBackPressure: a hot object whose changes wait for a
// worker stalls its informer's watch at the object's bound (none merged,
// none dropped, the writer never slowed), and every update is handed on
// in order once the worker moves again; the watch goes on.
func TestHotObjectBackPressure(t *testing.T) {
	env := testenv.Shared(t)
	ns := namespace(t, env)
	ctx := context.Background()
	gate := make(chan struct{})
	var release sync.Once
	var once bool
	rec := &recorder{fail: func(c *Change) error {
		if c.Type == change.Updated && !once {
			once = true
			<-gate
		}
		return nil
	}}
	const bound, updates = 10, 60
	wat, _ := startWatcher(t, env.Config(), Config{
		Selectors:  []change.Selector{{Resource: "configmaps"}},
		Namespaces: func(change.Resource) []string { return []string{ns} },
		Handler:    rec, Workers: 1,
		Queue: QueueLimits{ObjectChanges: bound},
	})
	t.Cleanup(func() { release.Do(func() { close(gate) }) }) // before the watcher stops (cleanups run last first)
	cms := env.Dynamic(t).Resource(configMaps).Namespace(ns)
	_, err := cms.Create(ctx, configMap(ns, "hot", map[string]any{"n": "0"}), metav1.CreateOptions{})
	mustf(t, err, "create")
	for i := 1; i <= updates; i++ {
		_, err := cms.Patch(ctx, "hot", types.MergePatchType, fmt.Appendf(nil, `{"data":{"n":"%d"}}`, i), metav1.PatchOptions{})
		mustf(t, err, "update %d", i)
	}
	k := key{gr: configMaps.GroupResource(), namespace: ns, name: "hot"}
	testenv.Eventually(t, 10*time.Second, "the object's changes to reach its bound", func() bool { return wat.pending.waiting(k) == bound })
	release.Do(func() { close(gate) })
	testenv.Eventually(t, time.Minute, "every update", func() bool { return len(rec.of(configMaps, ns, "hot")) == updates+1 })
	if v := testutil.ToFloat64(wat.metrics.backpressure.WithLabelValues("configmaps.v1")); v <= 0 {
		t.Errorf("fieldwatch_watcher_backpressure_seconds_total %v after the watch waited", v)
	}
	cs := rec.of(configMaps, ns, "hot")
	for i, c := range cs[1:] {
		if a, b := field(c.Old, "data", "n"), field(c.New, "data", "n"); a != fmt.Sprint(i) || b != fmt.Sprint(i+1) {
			t.Errorf("update %d: %v -> %v, want %d -> %d", i+1, a, b, i, i+1)
		}
	}
	wat.pending.mu.Lock()
	peak := wat.pending.peak
	wat.pending.mu.Unlock()
	if peak > bound {
		t.Errorf("%d changes of one object waited at once, bound %d", peak, bound)
	}
	_, err = cms.Create(ctx, configMap(ns, "after", nil), metav1.CreateOptions{})
	mustf(t, err, "create after")
	testenv.Eventually(t, 10*time.Second, "a later change", func() bool { return len(rec.of(configMaps, ns, "after")) == 1 })
}

// TestInitialObjects: starting against 1,000 existing objects yields no
// created changes, unless the caller asks for the initial sync.
func TestInitialObjects(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	ns := namespace(t, env)
	ctx := context.Background()
	cms := env.Dynamic(t).Resource(configMaps).Namespace(ns)
	const n = 1000
	for i := range n {
		_, err := cms.Create(ctx, configMap(ns, fmt.Sprintf("cm-%04d", i), map[string]any{"i": fmt.Sprint(i)}), metav1.CreateOptions{})
		mustf(t, err, "create %d", i)
	}
	inNS := func(c *Change) bool { return c.Object().GetNamespace() == ns }

	quiet := &recorder{}
	startWatcher(t, env.Config(), Config{Selectors: []change.Selector{{Resource: "configmaps"}}, Handler: quiet})
	initial := &recorder{}
	startWatcher(t, env.Config(), Config{Selectors: []change.Selector{{Resource: "configmaps"}}, Handler: initial, InitialSync: true})

	testenv.Eventually(t, 30*time.Second, "initial-sync changes", func() bool { return initial.count(inNS) >= n })
	// A change made now is the first thing the quiet watcher reports.
	_, err := cms.Create(ctx, configMap(ns, "marker", nil), metav1.CreateOptions{})
	mustf(t, err, "create marker")
	testenv.Eventually(t, 30*time.Second, "marker", func() bool { return len(quiet.of(configMaps, ns, "marker")) == 1 })
	if got := quiet.count(inNS); got != 1 {
		t.Errorf("quiet watcher reported %d changes in the namespace, want only the marker", got)
	}
	testenv.Eventually(t, 30*time.Second, "marker in initial-sync watcher", func() bool { return len(initial.of(configMaps, ns, "marker")) == 1 })
	if got := initial.count(func(c *Change) bool { return inNS(c) && c.Initial && c.Type == change.Created }); got != n {
		t.Errorf("initial-sync watcher reported %d initial creates, want %d", got, n)
	}
	if got := initial.count(func(c *Change) bool { return inNS(c) && c.Initial && c.Object().GetName() == "marker" }); got != 0 {
		t.Errorf("the marker was marked initial")
	}
	if got := initial.count(func(c *Change) bool { return inNS(c) && c.Initial && !c.Listed }); got != 0 {
		t.Errorf("%d initial-sync changes not marked listed", got)
	}
	if got := initial.count(func(c *Change) bool { return inNS(c) && c.Listed && c.Object().GetName() == "marker" }); got != 0 {
		t.Errorf("the marker, from a watch event, was marked listed")
	}
}

// TestMissingAPIService: an APIService whose Service does not exist makes
// discovery fail for its group; everything else keeps working and the
// failure is counted.
func TestMissingAPIService(t *testing.T) {
	env := testenv.Shared(t)
	ns := namespace(t, env)
	ctx := context.Background()
	apiservices := schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	dyn := env.Dynamic(t)
	svc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": "v1.missing.example.net"},
		"spec": map[string]any{
			"group": "missing.example.net", "version": "v1",
			"service":              map[string]any{"name": "nowhere", "namespace": ns},
			"groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
			"insecureSkipTLSVerify": true,
		},
	}}
	_, err := dyn.Resource(apiservices).Create(ctx, svc, metav1.CreateOptions{})
	mustf(t, err, "create APIService")
	t.Cleanup(func() { _ = dyn.Resource(apiservices).Delete(ctx, "v1.missing.example.net", metav1.DeleteOptions{}) })

	rec := &recorder{}
	w, _ := startWatcher(t, env.Config(), Config{Selectors: []change.Selector{{Group: "*"}}, Handler: rec})
	testenv.Eventually(t, 30*time.Second, "discovery failure to be counted", func() bool {
		return testutil.ToFloat64(w.metrics.discoveryFails.WithLabelValues("missing.example.net/v1")) > 0
	})
	_, err = dyn.Resource(configMaps).Namespace(ns).Create(ctx, configMap(ns, "still", nil), metav1.CreateOptions{})
	mustf(t, err, "create configmap")
	testenv.Eventually(t, 30*time.Second, "configmap change despite the broken APIService", func() bool {
		return len(rec.of(configMaps, ns, "still")) == 1
	})
}

// TestAPIServiceTriggersDiscovery: an APIService registered while the
// watcher runs is discovered within seconds, not at the next periodic
// discovery (here ten minutes away), also when the selectors do not pick
// APIServices themselves.
func TestAPIServiceTriggersDiscovery(t *testing.T) {
	env := testenv.Shared(t)
	ns := namespace(t, env)
	ctx := context.Background()
	w, _ := startWatcher(t, env.Config(), Config{Selectors: []change.Selector{{Resource: "configmaps"}},
		Handler: &recorder{}, RediscoveryInterval: 10 * time.Minute})
	apiservices := schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	dyn := env.Dynamic(t)
	svc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": "v1.late.example.net"},
		"spec": map[string]any{
			"group": "late.example.net", "version": "v1",
			"service":              map[string]any{"name": "nowhere", "namespace": ns},
			"groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
			"insecureSkipTLSVerify": true,
		},
	}}
	_, err := dyn.Resource(apiservices).Create(ctx, svc, metav1.CreateOptions{})
	mustf(t, err, "create APIService")
	t.Cleanup(func() { _ = dyn.Resource(apiservices).Delete(ctx, "v1.late.example.net", metav1.DeleteOptions{}) })
	testenv.Eventually(t, 20*time.Second, "the new APIService to be discovered", func() bool {
		return testutil.ToFloat64(w.metrics.discoveryFails.WithLabelValues("late.example.net/v1")) > 0
	})
}

// TestNamespaceScopedInformers: with Config.Namespaces the watcher lists
// and watches a resource only in those namespaces, one informer each, and a
// new set takes effect without a restart.
func TestNamespaceScopedInformers(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	base := namespace(t, env)
	nss := []string{base}
	for _, suffix := range []string{"-b", "-c"} {
		nss = append(nss, base+suffix)
		_, err := env.Clientset(t).CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: base + suffix}}, metav1.CreateOptions{})
		mustf(t, err, "namespace")
	}
	a, b, c := nss[0], nss[1], nss[2]
	sel := []change.Selector{{Resource: "configmaps"}}
	only := func(ns ...string) func(change.Resource) []string { return func(change.Resource) []string { return ns } }
	rec := &recorder{}
	w, _ := startWatcher(t, env.Config(), Config{Selectors: sel, Handler: rec, Namespaces: only(a, b)})
	if got := w.watchedNamespaces()[configMaps]; !reflect.DeepEqual(got, []string{a, b}) {
		t.Fatalf("configmaps watched in %v, want %v", got, []string{a, b})
	}
	create := func(ns, name string) {
		t.Helper()
		_, err := env.Dynamic(t).Resource(configMaps).Namespace(ns).Create(ctx, configMap(ns, name, nil), metav1.CreateOptions{})
		mustf(t, err, "create %s/%s", ns, name)
	}
	for _, ns := range nss {
		create(ns, "first")
	}
	testenv.Eventually(t, 30*time.Second, "creates in a and b", func() bool {
		return len(rec.of(configMaps, a, "first")) == 1 && len(rec.of(configMaps, b, "first")) == 1
	})
	if n := w.CachedObjects(); n != 2 {
		t.Errorf("%d objects cached, want the 2 of namespaces a and b", n)
	}

	w.SetSelectors(sel, nil, only(a)) // narrow to a
	testenv.Eventually(t, 30*time.Second, "the narrowing", func() bool {
		return reflect.DeepEqual(w.watchedNamespaces()[configMaps], []string{a}) && w.Synced()
	})
	for _, ns := range nss {
		create(ns, "second")
	}
	testenv.Eventually(t, 30*time.Second, "the create in a", func() bool { return len(rec.of(configMaps, a, "second")) == 1 })
	w.SetSelectors(sel, nil, only(a, b, c)) // widen; the marker below passes through every namespace
	testenv.Eventually(t, 30*time.Second, "the widening", func() bool { return len(w.watchedNamespaces()[configMaps]) == 3 && w.Synced() })
	create(c, "marker")
	testenv.Eventually(t, 30*time.Second, "the marker", func() bool { return len(rec.of(configMaps, c, "marker")) == 1 })
	for _, k := range []struct{ ns, name string }{{b, "second"}, {c, "first"}, {c, "second"}} {
		if cs := rec.of(configMaps, k.ns, k.name); len(cs) != 0 {
			t.Errorf("%s/%s was reported although its namespace was not watched then: %s", k.ns, k.name, kinds(cs))
		}
	}
}

// TestConfinedToNamespaces: a watcher confined to namespaces watches a
// selected resource in those only, or in those of the rules' namespaces
// that are among them, never everywhere; and no cluster-scoped resource.
func TestConfinedToNamespaces(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	base := namespace(t, env)
	a, b, c := base, base+"-b", base+"-c"
	for _, ns := range []string{b, c} {
		_, err := env.Clientset(t).CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		mustf(t, err, "namespace")
	}
	sel := []change.Selector{{Resource: "configmaps"}, {Resource: "namespaces"}}
	only := func(ns ...string) func(change.Resource) []string { return func(change.Resource) []string { return ns } }
	rec := &recorder{}
	w, _ := startWatcher(t, env.Config(), Config{Selectors: sel, Handler: rec, Confine: []string{a, b}})
	namespaces := schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	watched := w.watchedNamespaces()
	if got := watched[configMaps]; !reflect.DeepEqual(got, []string{a, b}) {
		t.Errorf("configmaps watched in %v, want %v", got, []string{a, b})
	}
	if got, ok := watched[namespaces]; ok {
		t.Errorf("namespaces, cluster-scoped, are watched (%v)", got)
	}
	for _, ns := range []string{a, b, c} {
		_, err := env.Dynamic(t).Resource(configMaps).Namespace(ns).Create(ctx, configMap(ns, "first", nil), metav1.CreateOptions{})
		mustf(t, err, "create in %s", ns)
	}
	testenv.Eventually(t, 30*time.Second, "creates in a and b", func() bool {
		return len(rec.of(configMaps, a, "first")) == 1 && len(rec.of(configMaps, b, "first")) == 1
	})

	w.SetSelectors(sel, nil, only(b, c)) // the rules name b and c: b only
	testenv.Eventually(t, 30*time.Second, "b only", func() bool {
		return reflect.DeepEqual(w.watchedNamespaces()[configMaps], []string{b}) && w.Synced()
	})
	w.SetSelectors(sel, nil, only(c)) // outside: not watched, not everywhere
	testenv.Eventually(t, 30*time.Second, "nothing", func() bool {
		_, ok := w.watchedNamespaces()[configMaps]
		return !ok && w.Synced()
	})
	if cs := rec.of(configMaps, c, "first"); len(cs) != 0 {
		t.Errorf("%s/first was reported: %s", c, kinds(cs))
	}
}
