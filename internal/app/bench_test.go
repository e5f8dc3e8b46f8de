package app

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/crd/diff"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
	"github.com/fieldwatch/fieldwatch/rules"
	"github.com/fieldwatch/fieldwatch/watcher"
)

// benchCRs is how many custom resources the impact benchmarks scan.
const benchCRs = 10000

const (
	benchGroup = "bench.impact.example.com"
	benchNS    = "bench-impact"
)

var benchGadgets = schema.GroupVersionResource{Group: benchGroup, Version: "v1", Resource: "gadgets"}

// benchSchema is the v1 spec schema of the benchmarks' Gadget CRD; the
// new one narrows mode, lowers replicas' maximum and removes legacy.
func benchSchema(narrowed bool) string {
	mode, max, legacy := "[Always, Never, IfNotPresent]", 100, "legacy: {type: string}, "
	if narrowed {
		mode, max, legacy = "[Always, Never]", 50, ""
	}
	return fmt.Sprintf(`{type: object, properties: {
    name: {type: string, maxLength: 63, pattern: "^[a-z0-9-]+$"},
    replicas: {type: integer, minimum: 0, maximum: %d},
    mode: {type: string, enum: %s},
    %slabels: {type: object, additionalProperties: {type: string, maxLength: 63}},
    ports: {type: array, maxItems: 16, items: {type: object, required: [port], properties: {
      name: {type: string}, port: {type: integer, minimum: 1, maximum: 65535}, protocol: {type: string, enum: [TCP, UDP, SCTP]}}}}}}`, max, mode, legacy)
}

func benchCRDManifest(narrowed bool) string {
	return fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.%[1]s}
spec:
  group: %[1]s
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget, listKind: GadgetList}
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, properties: {spec: %[2]s}}}
`, benchGroup, benchSchema(narrowed))
}

var benchOnce sync.Once

// benchSetup installs the Gadget CRD and benchCRs Gadgets of about 1 KiB
// (one in twenty hit by the narrowed schema), once per process.
func benchSetup(b *testing.B, env *testenv.Env) {
	b.Helper()
	benchOnce.Do(func() {
		ctx := context.Background()
		if _, err := env.Apply(ctx, testenv.ApplyOptions{}, []byte(benchCRDManifest(false))); err != nil {
			b.Fatal(err)
		}
		_, err := env.Clientset(b).CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNS}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			b.Fatal(err)
		}
		client := env.Dynamic(b).Resource(benchGadgets).Namespace(benchNS)
		var wg sync.WaitGroup
		var failed atomic.Value
		var next atomic.Int64
		for range 32 {
			wg.Go(func() {
				for {
					i := int(next.Add(1) - 1)
					if i >= benchCRs {
						return
					}
					if _, err := client.Create(ctx, benchGadget(i), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
						failed.Store(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if err, _ := failed.Load().(error); err != nil {
			b.Fatalf("create gadgets: %v", err)
		}
	})
}

func benchGadget(i int) *unstructured.Unstructured {
	mode, replicas := "Always", int64(i%50)
	spec := map[string]any{
		"name": fmt.Sprintf("gadget-%d", i), "mode": mode, "replicas": replicas,
		"labels": map[string]any{"app": "shop", "tier": "web", "team": "payments", "release": fmt.Sprintf("r%d", i%7)},
		"ports": []any{
			map[string]any{"name": "http", "port": int64(8080), "protocol": "TCP"},
			map[string]any{"name": "https", "port": int64(8443), "protocol": "TCP"},
			map[string]any{"name": "metrics", "port": int64(9090), "protocol": "TCP"},
		},
	}
	if i%20 == 0 {
		spec["mode"], spec["replicas"], spec["legacy"] = "IfNotPresent", int64(80), "yes"
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": benchGroup + "/v1", "kind": "Gadget",
		"metadata": map[string]any{"name": fmt.Sprintf("g%05d", i), "namespace": benchNS,
			"labels": map[string]any{"app": "shop"}, "annotations": map[string]any{"owner": "team-payments@example.com"}},
		"spec": spec,
	}}
}

// benchCRDs returns the old and the new Gadget CRD as the watcher hands
// them to rules.
func benchCRDs(b *testing.B) (old, new map[string]any) {
	b.Helper()
	for i, narrowed := range []bool{false, true} {
		docs, err := diff.Parse("crd.yaml", []byte(benchCRDManifest(narrowed)))
		if err != nil {
			b.Fatal(err)
		}
		m, err := k8sruntime.DefaultUnstructuredConverter.ToUnstructured(docs[0].CRD)
		if err != nil {
			b.Fatal(err)
		}
		if i == 0 {
			old = m
		} else {
			// A change after every list of the benchmark.
			m["metadata"].(map[string]any)["resourceVersion"] = "9223372036854775807"
			new = m
		}
	}
	return old, new
}

// startBenchWatcher runs a watcher of the Gadgets caching proj until ctx
// ends and returns it once it holds all of them.
func startBenchWatcher(ctx context.Context, b *testing.B, env *testenv.Env, proj change.Projection) (*watcher.Watcher, <-chan struct{}) {
	b.Helper()
	w, err := watcher.New(env.Config(), watcher.Config{
		Selectors:  []change.Selector{{Group: benchGroup, Resource: "gadgets"}},
		Projection: func(change.Resource) change.Projection { return proj },
		Handler:    watcher.HandlerFunc(func(context.Context, *watcher.Change) error { return nil }),
		Logger:     slog.New(slog.DiscardHandler),
	})
	if err != nil {
		b.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = w.Run(ctx)
	}()
	testenv.EventuallyWhy(b, 3*time.Minute, "the watcher to sync", func() (bool, string) {
		return w.Synced() && w.CachedObjects() >= benchCRs, fmt.Sprintf("%d objects", w.CachedObjects())
	})
	return w, stopped
}

// BenchmarkCRDImpact measures, for a breaking change of a CRD with 10,000
// custom resources of about 1 KiB, side by side in one run: a bare paged
// list of them through the dynamic client (what any tool pays to look at
// them), the impact scan of the pipeline over that list, and the scan
// over the watcher's cache (the objects as they were before the change,
// what fieldwatch uses).
func BenchmarkCRDImpact(b *testing.B) {
	env := testenv.Shared(b)
	benchSetup(b, env)
	old, new := benchCRDs(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, stopped := startBenchWatcher(ctx, b, env, change.Projection{Full: true})
	defer func() { cancel(); <-stopped }()
	crdRes := change.Resource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions", Kind: "CustomResourceDefinition", Preferred: true}

	perObject := func(b *testing.B) {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchCRs, "ns/object")
	}
	b.Run("list", func(b *testing.B) {
		client := env.Dynamic(b).Resource(benchGadgets)
		for b.Loop() {
			n := 0
			opts := metav1.ListOptions{Limit: listPageSize}
			for {
				list, err := client.List(ctx, opts)
				if err != nil {
					b.Fatal(err)
				}
				n += len(list.Items)
				if opts.Continue = list.GetContinue(); opts.Continue == "" {
					break
				}
			}
			if n != benchCRs {
				b.Fatalf("listed %d", n)
			}
		}
		perObject(b)
	})
	for _, source := range []string{"list", "cache"} {
		b.Run("scan-"+source, func(b *testing.B) {
			a := &app{cfg: Config{CRDImpactMaxObjects: 2 * benchCRs, CRDImpactTimeout: 10 * time.Minute}, log: slog.New(slog.DiscardHandler),
				metrics: newMetrics(prometheus.NewRegistry()), dyn: env.Dynamic(b)}
			if source == "cache" {
				a.watcher.Store(w)
			}
			for b.Loop() {
				now := time.Now()
				rc := &rules.Change{Type: change.Updated, Resource: crdRes, Old: old, New: new, Time: now}
				a.crdImpact(ctx, &watcher.Change{Type: change.Updated, Resource: crdRes, Time: now}, rc)
				if res := rc.CRD; res.Scanned != benchCRs || res.ImpactError != "" || len(res.Impact) == 0 || res.Impact[0].Count != benchCRs/20 {
					b.Fatalf("scanned %d, impact %+v, error %q", res.Scanned, res.Impact, res.ImpactError)
				}

			}
			if n := testutil.ToFloat64(a.metrics.impactScans.WithLabelValues(source)); n != float64(b.N) {
				b.Fatalf("%v scans from the %s, want %d", n, source, b.N)
			}
			perObject(b)
		})
	}
}

// BenchmarkCRDImpactCacheBytes reports the live heap per cached Gadget
// (about 1 KiB of JSON) side by side: the watcher keeping whole objects,
// as it does for the custom resources of CRDs a rule with crd: {impact:
// true} matches, and keeping only the field a rule reads (the cost of the
// resource without such a rule; without any rule on it, nothing).
func BenchmarkCRDImpactCacheBytes(b *testing.B) {
	env := testenv.Shared(b)
	benchSetup(b, env)
	for _, c := range []struct {
		name string
		proj change.Projection
	}{
		{"whole-objects-for-the-impact", change.Projection{Full: true}},
		{"one-field", change.Projection{Paths: [][]string{{"spec", "replicas"}}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var perObject float64
			for range b.N {
				before := heapAfterGC()
				ctx, cancel := context.WithCancel(context.Background())
				w, stopped := startBenchWatcher(ctx, b, env, c.proj)
				after := heapAfterGC()
				perObject += float64(after-before) / float64(w.CachedObjects())
				runtime.KeepAlive(w)
				cancel()
				<-stopped
			}
			b.ReportMetric(perObject/float64(b.N), "heap-B/object")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// heapAfterGC returns the live heap after a full collection.
func heapAfterGC() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
