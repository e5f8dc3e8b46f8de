package watcher

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// benchUpdates is how many updates each contender of BenchmarkInformer
// receives.
const benchUpdates = 4000

// BenchmarkInformer puts the watcher's own informer (listwatch.go,
// informer.go, internal/watchstream) beside its fair peer, client-go's
// dynamic informer with a SetTransform that keeps what the watcher keeps (the
// same projection: identity, kept metadata, reduced managedFields and the
// fields the rule reads), on the 20,000 ConfigMaps of about 1 KiB of
// benchConfigMaps. Each iteration runs both, one after the other, in an
// order that alternates, and measures of each:
//
//   - sync-cpu-µs/object: this process's CPU from the start until all
//     objects are cached (a watch-list, for both), per object;
//   - heap-B/object: the live heap it holds per cached object;
//   - cpu-µs/change: this process's CPU per update received, while a
//     writer process (this test binary again, see benchWriterMain)
//     patches the field the rule reads benchUpdates times;
//     idle-cpu-µs/change is the same with neither running (the floor:
//     what the process spends meanwhile on its own).
//
// The watcher is measured whole (its informer, queue, workers and a
// handler that counts), the peer as an informer with a handler that
// counts: what the watcher does beyond an informer counts against it.
// The ratios (peer/fieldwatch) are of one iteration's pair, so that the
// machine's load moves both alike.
func BenchmarkInformer(b *testing.B) {
	env := testenv.Shared(b)
	benchConfigMaps(b, env)
	kubeconfig := env.WriteKubeconfig(b)
	for _, pc := range []struct {
		name string
		proj change.Projection
	}{
		{"one-field", change.Projection{Paths: [][]string{{"data", "key1"}}}},
		{"whole", change.Projection{Full: true}},
	} {
		b.Run(pc.name, func(b *testing.B) {
			contenders := []informerContender{
				{"client-go-transform", projectedInformer(pc.proj)},
				{"fieldwatch", watcherInformer(pc.proj)},
			}
			sums := make([]informerRun, len(contenders))
			var ratios informerRun
			var idle float64
			for i := range b.N {
				idle += idleCPU(b, kubeconfig)
				var runs [2]informerRun
				for j := range contenders {
					k := j
					if i%2 == 1 {
						k = len(contenders) - 1 - j
					}
					runs[k] = runInformer(b, env, kubeconfig, contenders[k].start)
					sums[k].add(runs[k])
				}
				ratios.add(runs[0].over(runs[1]))
			}
			n := float64(b.N)
			for k, c := range contenders {
				b.ReportMetric(sums[k].syncCPU/n, c.name+"-sync-cpu-µs/object")
				b.ReportMetric(sums[k].heap/n, c.name+"-heap-B/object")
				b.ReportMetric(sums[k].changeCPU/n, c.name+"-cpu-µs/change")
			}
			b.ReportMetric(ratios.syncCPU/n, "sync-cpu-peer/fieldwatch")
			b.ReportMetric(ratios.heap/n, "heap-peer/fieldwatch")
			b.ReportMetric(ratios.changeCPU/n, "cpu-change-peer/fieldwatch")
			b.ReportMetric(idle/n, "idle-cpu-µs/change")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// informerContender is one side of BenchmarkInformer.
type informerContender struct {
	name  string
	start informerStart
}

// informerStart starts something that caches benchNS's ConfigMaps and
// counts the updates of them it receives; ctx stops it, and stopped
// closes once it has.
type informerStart func(ctx context.Context, b *testing.B, env *testenv.Env) (cached func() int, synced func() bool, updates *atomic.Int64, stopped <-chan struct{})

// informerRun is what one run of a contender measured.
type informerRun struct{ syncCPU, heap, changeCPU float64 }

func (r *informerRun) add(o informerRun) {
	r.syncCPU += o.syncCPU
	r.heap += o.heap
	r.changeCPU += o.changeCPU
}

func (r informerRun) over(o informerRun) informerRun {
	return informerRun{r.syncCPU / o.syncCPU, r.heap / o.heap, r.changeCPU / o.changeCPU}
}

// runInformer starts a contender, waits until it caches every object,
// then has a writer process update them and waits until it received
// every update.
func runInformer(b *testing.B, env *testenv.Env, kubeconfig string, start informerStart) informerRun {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	before := heapAfterGC()
	cpu0 := processCPU(b)
	cached, synced, updates, stopped := start(ctx, b, env)
	defer func() {
		cancel()
		<-stopped
	}()
	deadline := time.Now().Add(5 * time.Minute)
	for !synced() || cached() < benchObjects {
		if time.Now().After(deadline) {
			b.Fatalf("not synced after 5m: %d objects", cached())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cpu1 := processCPU(b)
	after := heapAfterGC()
	var r informerRun
	r.syncCPU = float64((cpu1 - cpu0).Microseconds()) / benchObjects
	r.heap = float64(int64(after)-int64(before)) / float64(cached())

	cpu2 := processCPU(b)
	writer := startBenchWriter(b, kubeconfig, benchUpdates)
	deadline = time.Now().Add(5 * time.Minute)
	for updates.Load() < benchUpdates {
		if time.Now().After(deadline) {
			b.Fatalf("received %d of %d updates after 5m", updates.Load(), benchUpdates)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cpu3 := processCPU(b)
	if err := writer.Wait(); err != nil {
		b.Fatalf("writer: %v", err)
	}
	r.changeCPU = float64((cpu3 - cpu2).Microseconds()) / benchUpdates
	return r
}

// idleCPU is this process's CPU per update while a writer process makes
// benchUpdates updates and nothing watches them.
func idleCPU(b *testing.B, kubeconfig string) float64 {
	b.Helper()
	cpu0 := processCPU(b)
	if err := startBenchWriter(b, kubeconfig, benchUpdates).Wait(); err != nil {
		b.Fatalf("writer: %v", err)
	}
	return float64((processCPU(b) - cpu0).Microseconds()) / benchUpdates
}

// projectedInformer is the fair peer: client-go's dynamic informer on
// benchNS whose transform keeps what the watcher's cache keeps of each
// object under p (project, with the identity fields the informer keys
// by).
func projectedInformer(p change.Projection) informerStart {
	return func(ctx context.Context, b *testing.B, env *testenv.Env) (func() int, func() bool, *atomic.Int64, <-chan struct{}) {
		inf := dynamicinformer.NewFilteredDynamicInformer(env.Dynamic(b), configMaps, benchNS, 0, cache.Indexers{}, nil).Informer()
		if err := inf.SetTransform(projectTransform(p)); err != nil {
			b.Fatal(err)
		}
		var updates atomic.Int64
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(any, any) { updates.Add(1) }}); err != nil {
			b.Fatal(err)
		}
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			inf.RunWithContext(ctx)
		}()
		return func() int { return len(inf.GetStore().ListKeys()) }, inf.HasSynced, &updates, stopped
	}
}

// projectTransform is a client-go TransformFunc keeping of an object what
// project keeps under p, with its apiVersion, kind and identity.
func projectTransform(p change.Projection) cache.TransformFunc {
	return func(obj any) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return obj, nil
		}
		m := project(p, u.Object)
		meta, _ := m["metadata"].(map[string]any)
		if meta == nil {
			meta = make(map[string]any, 4)
			m["metadata"] = meta
		}
		from, _ := u.Object["metadata"].(map[string]any)
		for k := range identityMeta {
			if v, ok := from[k]; ok {
				meta[k] = v
			}
		}
		m["apiVersion"], m["kind"] = u.Object["apiVersion"], u.Object["kind"]
		return &unstructured.Unstructured{Object: m}, nil
	}
}

// watcherInformer is the watcher on benchNS's ConfigMaps under p, with a
// handler that counts updates.
func watcherInformer(p change.Projection) informerStart {
	return func(ctx context.Context, b *testing.B, env *testenv.Env) (func() int, func() bool, *atomic.Int64, <-chan struct{}) {
		var updates atomic.Int64
		w, err := New(env.Config(), Config{
			Selectors:  []change.Selector{{Resource: "configmaps"}},
			Namespaces: func(change.Resource) []string { return []string{benchNS} },
			Projection: func(change.Resource) change.Projection { return p },
			Handler: HandlerFunc(func(_ context.Context, c *Change) error {
				if c.Type == change.Updated {
					updates.Add(1)
				}
				return nil
			}),
			Logger: testLoggerB(),
		})
		if err != nil {
			b.Fatal(err)
		}
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			_ = w.Run(ctx)
		}()
		return w.CachedObjects, w.Synced, &updates, stopped
	}
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchWriterEnv, in the environment of this test binary, makes it a
// writer process (benchWriterMain) rather than the tests.
const benchWriterEnv = "FIELDWATCH_BENCH_WRITER"

// benchWriterJob is what a writer process does: n merge patches of
// data.key1, spread over benchNS's ConfigMaps by 32 goroutines.
type benchWriterJob struct {
	Kubeconfig string `json:"kubeconfig"`
	N          int    `json:"n"`
	Run        int64  `json:"run"`
}

// startBenchWriter starts this test binary as a writer process of n
// updates, so that what the writes cost is not this process's CPU.
func startBenchWriter(b *testing.B, kubeconfig string, n int) *exec.Cmd {
	b.Helper()
	job, err := json.Marshal(benchWriterJob{Kubeconfig: kubeconfig, N: n, Run: time.Now().UnixNano()})
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), benchWriterEnv+"="+string(job))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	return cmd
}

// benchWriterMain runs the writer process's job when benchWriterEnv is
// set (ok), returning its exit code.
func benchWriterMain() (code int, ok bool) {
	spec := os.Getenv(benchWriterEnv)
	if spec == "" {
		return 0, false
	}
	if err := runBenchWriter(spec); err != nil {
		fmt.Fprintf(os.Stderr, "bench writer: %v\n", err)
		return 1, true
	}
	return 0, true
}

func runBenchWriter(spec string) error {
	var job benchWriterJob
	if err := json.Unmarshal([]byte(spec), &job); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", job.Kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = -1, 0
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	cms := dyn.Resource(configMaps).Namespace(benchNS)
	ctx := context.Background()
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for failed.Load() == nil {
				i := next.Add(1) - 1
				if i >= int64(job.N) {
					return
				}
				// The same length as the value it replaces: the
				// objects keep their size.
				v := fmt.Sprintf("%d-%d-", job.Run, i)
				v += strings.Repeat("u", max(170-len(v), 0))
				patch := fmt.Appendf(nil, `{"data":{"key1":%q}}`, v)
				name := fmt.Sprintf("cm-%05d", i%benchObjects)
				if _, err := cms.Patch(ctx, name, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
					err = fmt.Errorf("patch %s: %w", name, err)
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		return *err
	}
	return nil
}
