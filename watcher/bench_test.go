package watcher

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// benchObjects is the number of ConfigMaps of about 1 KiB the cache
// benchmarks load (the figure the issue asks about).
const benchObjects = 20000

const benchNS = "bench-configmaps"

var benchOnce sync.Once

// benchConfigMaps makes sure benchNS holds benchObjects ConfigMaps of
// about 1 KiB each (five data keys, labels, managedFields as the apiserver
// writes them).
func benchConfigMaps(b *testing.B, env *testenv.Env) {
	b.Helper()
	benchOnce.Do(func() {
		ctx := context.Background()
		_, err := env.Clientset(b).CoreV1().Namespaces().Create(ctx,
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNS}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			b.Fatal(err)
		}
		cms := env.Dynamic(b).Resource(configMaps).Namespace(benchNS)
		var wg sync.WaitGroup
		var failed atomic.Value
		next := atomic.Int64{}
		for range 32 {
			wg.Go(func() {
				for {
					i := next.Add(1) - 1
					if i >= benchObjects {
						return
					}
					cm := benchConfigMap(int(i))
					if _, err := cms.Create(ctx, cm, metav1.CreateOptions{FieldManager: "bench-writer"}); err != nil && !apierrors.IsAlreadyExists(err) {
						failed.Store(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if err, _ := failed.Load().(error); err != nil {
			b.Fatalf("create configmaps: %v", err)
		}
	})
}

func benchConfigMap(i int) *unstructured.Unstructured {
	data := map[string]any{}
	for k := range 5 {
		data[fmt.Sprintf("key%d", k)] = strings.Repeat(fmt.Sprintf("%c", 'a'+(i+k)%26), 170)
	}
	cm := configMap(benchNS, fmt.Sprintf("cm-%05d", i), data)
	cm.SetLabels(map[string]string{"app": "bench", "tier": fmt.Sprintf("t%d", i%10)})
	return cm
}

// heapAfterGC returns the live heap after a full collection.
func heapAfterGC() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// cacheCase starts something that caches the ConfigMaps and returns how
// many objects it holds, whether it has synced, and how to wait until it
// has stopped once ctx ends.
type cacheCase struct {
	name  string
	start startFunc
}

type startFunc func(ctx context.Context, b *testing.B, env *testenv.Env) (count func() int, synced func() bool, stopped <-chan struct{})

func bareInformer(strip bool) startFunc {
	return func(ctx context.Context, b *testing.B, env *testenv.Env) (func() int, func() bool, <-chan struct{}) {
		inf := dynamicinformer.NewFilteredDynamicInformer(env.Dynamic(b), configMaps, benchNS, 0, cache.Indexers{}, nil).Informer()
		if strip {
			_ = inf.SetTransform(func(obj any) (any, error) {
				if u, ok := obj.(*unstructured.Unstructured); ok {
					u.SetManagedFields(nil)
				}
				return obj, nil
			})
		}
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			inf.RunWithContext(ctx)
		}()
		return func() int { return len(inf.GetStore().ListKeys()) }, inf.HasSynced, stopped
	}
}

func fieldwatchCache(proj change.Projection) startFunc {
	return func(ctx context.Context, b *testing.B, env *testenv.Env) (func() int, func() bool, <-chan struct{}) {
		w, err := New(env.Config(), Config{
			Selectors:  []change.Selector{{Resource: "configmaps"}},
			Projection: func(change.Resource) change.Projection { return proj },
			Handler:    HandlerFunc(func(context.Context, *Change) error { return nil }),
			Logger:     testLoggerB(),
		})
		if err != nil {
			b.Fatal(err)
		}
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			_ = w.Run(ctx)
		}()
		count := func() int {
			w.mu.Lock()
			defer w.mu.Unlock()
			if rw := w.watches[watchKey{gvr: configMaps}]; rw != nil {
				return rw.store.len()
			}
			return 0
		}
		return count, w.Synced, stopped
	}
}

// BenchmarkCacheBytesPerObject reports the live heap per cached ConfigMap
// of about 1 KiB, side by side in one run: a bare client-go dynamic
// informer, the same with managedFields stripped, and the watcher keeping
// whole objects or only the fields a rule reads.
func BenchmarkCacheBytesPerObject(b *testing.B) {
	env := testenv.Shared(b)
	benchConfigMaps(b, env)
	cases := []cacheCase{
		{"bare-dynamic-informer", bareInformer(false)},
		{"bare-informer-managedFields-stripped", bareInformer(true)},
		{"fieldwatch-whole-objects", fieldwatchCache(change.Projection{Full: true})},
		{"fieldwatch-projected-one-field", fieldwatchCache(change.Projection{Paths: [][]string{{"data", "key1"}}})},
		{"fieldwatch-projected-data", fieldwatchCache(change.Projection{Paths: [][]string{{"data"}}})},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var perObject float64
			for range b.N {
				before := heapAfterGC()
				ctx, cancel := context.WithCancel(context.Background())
				count, synced, stopped := c.start(ctx, b, env)
				testenv.EventuallyWhy(b, 3*time.Minute, "the cache to sync", func() (bool, string) {
					return synced() && count() >= benchObjects, fmt.Sprintf("%d objects", count())
				})
				after := heapAfterGC()
				n := count()
				perObject += float64(after-before) / float64(n)
				runtime.KeepAlive(count)
				cancel()
				<-stopped
			}
			b.ReportMetric(perObject/float64(b.N), "heap-B/object")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkDrainInitialList reports how fast the objects of an initial list
// (a backlog of 20,000 ConfigMaps) reach a handler: a bare dynamic
// informer's add handler against the watcher with InitialSync, whose
// handler gets each as a Change, side by side in one run.
func BenchmarkDrainInitialList(b *testing.B) {
	env := testenv.Shared(b)
	benchConfigMaps(b, env)
	b.Run("bare-dynamic-informer", func(b *testing.B) {
		var rate float64
		for range b.N {
			var seen atomic.Int64
			ctx, cancel := context.WithCancel(context.Background())
			inf := dynamicinformer.NewFilteredDynamicInformer(env.Dynamic(b), configMaps, benchNS, 0, cache.Indexers{}, nil).Informer()
			_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) { seen.Add(1) }})
			start := time.Now()
			go inf.RunWithContext(ctx)
			waitCount(b, &seen, benchObjects)
			rate += benchObjects / time.Since(start).Seconds()
			cancel()
		}
		b.ReportMetric(rate/float64(b.N), "objects/s")
		b.ReportMetric(0, "ns/op")
	})
	b.Run("fieldwatch", func(b *testing.B) {
		var rate float64
		for range b.N {
			var seen atomic.Int64
			ctx, cancel := context.WithCancel(context.Background())
			w, err := New(env.Config(), Config{
				Selectors:   []change.Selector{{Resource: "configmaps"}},
				InitialSync: true,
				Handler: HandlerFunc(func(_ context.Context, c *Change) error {
					if c.Object().GetNamespace() == benchNS {
						seen.Add(1)
					}
					return nil
				}),
				Logger: testLoggerB(),
			})
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			go func() { _ = w.Run(ctx) }()
			waitCount(b, &seen, benchObjects)
			rate += benchObjects / time.Since(start).Seconds()
			cancel()
		}
		b.ReportMetric(rate/float64(b.N), "objects/s")
		b.ReportMetric(0, "ns/op")
	})
}

// BenchmarkLiveUpdates reports changes per second delivered while 32
// writers update the ConfigMaps as fast as the apiserver takes them: a bare
// dynamic informer that only counts update events and the watcher, both
// running at once on the same stream. b.N is the number of updates.
func BenchmarkLiveUpdates(b *testing.B) {
	if b.N > benchObjects {
		b.Fatalf("b.N %d > %d: one update per ConfigMap at most; run with -benchtime=%dx or less", b.N, benchObjects, benchObjects)
	}
	env := testenv.Shared(b)
	benchConfigMaps(b, env)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var bare, fw atomic.Int64
	inf := dynamicinformer.NewFilteredDynamicInformer(env.Dynamic(b), configMaps, benchNS, 0, cache.Indexers{}, nil).Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(any, any) { bare.Add(1) }})
	go inf.RunWithContext(ctx)
	w, err := New(env.Config(), Config{
		Selectors: []change.Selector{{Resource: "configmaps"}},
		Handler: HandlerFunc(func(_ context.Context, c *Change) error {
			if c.Type == change.Updated && c.New.GetNamespace() == benchNS {
				fw.Add(1)
			}
			return nil
		}),
		Logger: testLoggerB(),
	})
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = w.Run(ctx) }()
	testenv.Eventually(b, 3*time.Minute, "both to sync", func() bool { return inf.HasSynced() && w.Synced() })

	cms := env.Dynamic(b).Resource(configMaps).Namespace(benchNS)
	b.ResetTimer()
	start := time.Now()
	var bareDone, fwDone time.Duration
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Polled every millisecond: the times it takes are the figures.
		_ = testenv.Wait(ctx, time.Millisecond, 5*time.Minute, "delivery", func() bool {
			if bareDone == 0 && bare.Load() >= int64(b.N) {
				bareDone = time.Since(start)
			}
			if fwDone == 0 && fw.Load() >= int64(b.N) {
				fwDone = time.Since(start)
			}
			return bareDone != 0 && fwDone != 0
		})
	}()
	writeUpdates(b, ctx, cms, b.N)
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("not delivered: bare %d, fieldwatch %d of %d", bare.Load(), fw.Load(), b.N)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/bareDone.Seconds(), "bare-updates/s")
	b.ReportMetric(float64(b.N)/fwDone.Seconds(), "fieldwatch-updates/s")
	b.ReportMetric(bareDone.Seconds()/fwDone.Seconds(), "fieldwatch/bare")
}

// writeUpdates performs n updates spread over the ConfigMaps by 32 writers.
func writeUpdates(b *testing.B, ctx context.Context, cms dynamic.ResourceInterface, n int) {
	var next atomic.Int64
	var wg sync.WaitGroup
	run := time.Now().UnixNano() // every update changes the object, also across runs
	for range 32 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				patch := fmt.Appendf(nil, `{"data":{"counter":"%d-%d"}}`, run, i)
				name := fmt.Sprintf("cm-%05d", i%benchObjects)
				if _, err := cms.Patch(ctx, name, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
					b.Errorf("patch %s: %v", name, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func waitCount(b *testing.B, n *atomic.Int64, want int64) {
	b.Helper()
	// Polled every millisecond: the benchmark's timer runs meanwhile.
	if err := testenv.Wait(context.Background(), time.Millisecond, 5*time.Minute, fmt.Sprintf("%d changes", want), func() bool { return n.Load() >= want }); err != nil {
		b.Fatalf("%v: only %d", err, n.Load())
	}
}
