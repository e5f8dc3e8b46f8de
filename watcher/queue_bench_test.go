package watcher

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// BenchmarkQueueing reports what changes cost the watcher while its
// worker is held (a slow receiver, say) and after: 10,000 updates spread
// over 10,000 objects, and 10,000 updates of one object, each a ConfigMap
// of about 1 KiB whose data the rule reads. Events go through a real
// informer (its FIFO, the watcher's transform and handlers, and the gate
// of queue_bench_helpers_test.go on its watch stream) from a fake watch
// that the benchmark feeds as fast as the informer reads; the handler
// holds its first change until every update is in or the watch stream is
// held, then lets all through. It reports the CPU time per update (the
// whole process's, from the first update to the last change handled), the
// live heap while the changes wait (held-heap-B, over the heap before),
// how many changes reached the handler, and the longest sequence of one
// object that waited.
//
// queue_bench_helpers_test.go holds what depends on the watcher's
// version (the gate, the longest sequence), so that this file runs
// unchanged on an earlier commit beside a helpers file of that commit's:
// side by side in one run with `go test -c` of both and the binaries
// alternated (the report of this change has the figures).
func BenchmarkQueueing(b *testing.B) {
	for _, tc := range []struct {
		name             string
		objects, updates int
	}{
		{"spread-10000-objects", 10000, 10000},
		{"one-object-10000-updates", 1, 10000},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var cpu time.Duration
			var held uint64
			var handled, longest int
			for range b.N {
				r := runQueueing(b, tc.objects, tc.updates)
				cpu += r.cpu
				held += r.held
				handled += r.handled
				longest = max(longest, r.longest)
			}
			n := float64(b.N)
			b.ReportMetric(float64(cpu.Microseconds())/n/float64(tc.updates), "cpu-µs/update")
			b.ReportMetric(float64(held)/n, "held-heap-B")
			b.ReportMetric(float64(handled)/n, "handled")
			b.ReportMetric(float64(longest), "longest-waiting")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// queueingRun is what one run of runQueueing measured.
type queueingRun struct {
	cpu              time.Duration
	held             uint64
	handled, longest int
}

// runQueueing makes updates changes to objects ConfigMaps through an
// informer into a watcher whose handler holds its first change until the
// informer has read every update or is held.
func runQueueing(b *testing.B, objects, updates int) queueingRun {
	b.Helper()
	release := make(chan struct{})
	var handled atomic.Int64
	var once sync.Once
	w, err := newForClients(dynamicfake.NewSimpleDynamicClient(kruntime.NewScheme()), nil, Config{
		Handler: HandlerFunc(func(context.Context, *Change) error {
			once.Do(func() { <-release })
			handled.Add(1)
			return nil
		}),
		Workers: 1,
		Logger:  testLoggerB(),
	})
	if err != nil {
		b.Fatal(err)
	}
	res := change.Resource{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespaced: true, Preferred: true}
	rw := newResourceWatch(w, res, "", change.Projection{Paths: [][]string{{"data"}}})
	rw.deliver.Store(true)
	fw := watch.NewFake()
	var listed atomic.Bool
	lw := &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (kruntime.Object, error) {
			list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMapList"}}
			list.SetResourceVersion("1")
			for i := range objects {
				list.Items = append(list.Items, *queueingConfigMap(i, 0, 1))
			}
			listed.Store(true)
			return list, nil
		},
		WatchFuncWithContext: func(_ context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
				return nil, errors.New("no watch-list here: list, then watch")
			}
			return fw, nil
		},
	}
	rw.source = cache.NewReflectorWithOptions(lw, &unstructured.Unstructured{}, rw.store, cache.ReflectorOptions{}).RunWithContext
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rw.run(ctx)
	defer func() { cancel(); fw.Stop(); <-rw.done }()
	testenv.Eventually(b, time.Minute, "the reflector to sync", rw.hasSynced)
	var workers sync.WaitGroup
	defer workers.Wait()
	defer w.queue.ShutDown()
	workers.Go(func() {
		for w.processNext(ctx) {
		}
	})

	before := heapAfterGC()
	start := cpuNow(b)
	var sent atomic.Int64
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for i := range updates {
			fw.Modify(queueingConfigMap(i%objects, i/objects+1, 2+i))
			sent.Add(1)
		}
	}()
	// Every update is in, or the informer's watch is held: no update
	// sent for 20 polls in a row.
	seen, still := int64(-1), 0
	testenv.Eventually(b, time.Minute, "the updates to be in or held", func() bool {
		select {
		case <-produced:
			return true
		default:
		}
		if n := sent.Load(); n != seen {
			seen, still = n, 0
		} else {
			still++
		}
		return still >= 20
	})
	run := queueingRun{held: heapAfterGC() - before, longest: benchLongest(w)}
	close(release)
	<-produced
	last := fmt.Sprint(1 + updates)
	idle := func() bool {
		return rw.storeRV() == last && w.pending.len() == 0 && w.queue.Len() == 0
	}
	settled := 0
	testenv.Eventually(b, time.Minute, "the watcher to be idle twice in a row", func() bool {
		if idle() {
			settled++
		} else {
			settled = 0
		}
		return settled >= 2
	})
	run.cpu = cpuNow(b) - start
	run.handled = int(handled.Load())
	return run
}

// queueingConfigMap is ConfigMap i of about 1 KiB with data.v = v at
// resourceVersion rv.
func queueingConfigMap(i, v, rv int) *unstructured.Unstructured {
	data := map[string]any{"v": fmt.Sprint(v)}
	for k := range 5 {
		data[fmt.Sprintf("key%d", k)] = strings.Repeat(string(rune('a'+(i+k)%26)), 170)
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": fmt.Sprintf("cm-%05d", i), "namespace": "bench", "uid": fmt.Sprintf("uid-%05d", i),
			"resourceVersion": fmt.Sprint(rv), "labels": map[string]any{"app": "bench"}},
		"data": data,
	}}
}

// cpuNow returns the CPU time the process has used.
func cpuNow(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
