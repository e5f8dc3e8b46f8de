package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
	"github.com/fieldwatch/fieldwatch/payload"
	"github.com/fieldwatch/fieldwatch/rules"
)

var widgetsGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

const (
	cmNS     = "bench-configmaps"
	widgetNS = "bench-widgets"
)

// table collects the result rows.
type table struct {
	rows [][]string
}

func (t *table) add(cols ...string) {
	t.rows = append(t.rows, cols)
	_, _ = fmt.Fprintf(os.Stderr, "bench: %s\n", strings.Join(cols, " | "))
}

func (t *table) print() {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "MEASURE\tCLIENT-GO INFORMER\tFIELDWATCH\tFIELDWATCH/INFORMER\tNOTES")
	for _, r := range t.rows {
		_, _ = fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	_ = tw.Flush()
}

// bench holds what the sections share.
type bench struct {
	o          options
	env        *testenv.Env
	kubeconfig string
	binary     string
	dir        string
	dyn        dynamic.Interface
	kube       kubernetes.Interface
	t          table
	// profiles counts the drain profiles written, for their names.
	profiles int
}

func run(ctx context.Context, o options) error {
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	b := &bench{o: o, binary: filepath.Join(root, "bin", "fieldwatch")}
	if _, err := os.Stat(b.binary); err != nil {
		return fmt.Errorf("%s: run `make build` first: %w", b.binary, err)
	}
	if b.dir, err = os.MkdirTemp("", "fieldwatch-bench-"); err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(b.dir) }()
	_, _ = fmt.Fprintf(os.Stderr, "bench: starting the control plane (%d CPUs)\n", runtime.NumCPU())
	if b.env, err = testenv.New(testenv.Options{}); err != nil {
		return err
	}
	defer func() { _ = b.env.Stop() }()
	b.kubeconfig = filepath.Join(b.dir, "kubeconfig")
	if err := b.env.Kubeconfig(b.kubeconfig); err != nil {
		return err
	}
	cfg := b.env.Config()
	if b.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		return err
	}
	if b.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if _, err := b.env.ApplyFiles(ctx, testenv.ApplyOptions{}, filepath.Join(root, "examples/crds/widgets.yaml")); err != nil {
		return err
	}
	for _, ns := range []string{cmNS, widgetNS} {
		if _, err := b.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}

	all := []struct {
		name string
		run  func(context.Context) error
	}{{"memory", b.memory}, {"events", b.events}, {"history", b.historySection}, {"audit", b.auditSection}, {"startup", b.startup}, {"cbor", b.cborSection},
		{"crds", b.crdCount}, {"objects", b.objectCount}, {"ksm", b.ksmSection}}
	want := strings.Split(o.sections, ",")
	created := slices.Contains(want, "memory")
	for _, s := range all {
		if (s.name == "events" || s.name == "history") && slices.Contains(want, s.name) && !created {
			// events and history update the ConfigMaps memory creates.
			if err := createMany(ctx, b.dyn.Resource(configMapsGVR).Namespace(cmNS), b.o.configMaps, benchConfigMap); err != nil {
				return err
			}
			created = true
		}
		if slices.Contains(want, s.name) {
			if err := s.run(ctx); err != nil {
				b.printTable() // what the sections before measured
				return fmt.Errorf("%s: %w", s.name, err)
			}
		}
	}
	b.printTable()
	return nil
}

// printTable prints the measurements so far.
func (b *bench) printTable() {
	fmt.Printf("fieldwatch bench, %s, %d CPUs, %s\n\n", time.Now().UTC().Format(time.RFC3339), runtime.NumCPU(), runtime.Version())
	b.t.print()
}

// forEach calls do for 0..n-1 from 32 goroutines and returns the first
// error.
func forEach(n int, do func(i int) error) error {
	var next atomic.Int64
	// An atomic.Pointer, not an atomic.Value: errors of two concrete
	// types made Value's CompareAndSwap panic, and the bench with it,
	// leaving its control planes running.
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || failed.Load() != nil {
					return
				}
				if err := do(i); err != nil {
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

// createMany creates n objects.
func createMany(ctx context.Context, ri dynamic.ResourceInterface, n int, make func(i int) *unstructured.Unstructured) error {
	return forEach(n, func(i int) error {
		_, err := ri.Create(ctx, make(i), metav1.CreateOptions{FieldManager: "bench-writer"})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
}

func benchConfigMap(i int) *unstructured.Unstructured {
	data := map[string]any{}
	for k := range 5 {
		data[fmt.Sprintf("key%d", k)] = strings.Repeat(string(rune('a'+(i+k)%26)), 170)
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": fmt.Sprintf("cm-%05d", i), "namespace": cmNS,
			"labels": map[string]any{"app": "bench", "tier": fmt.Sprintf("t%d", i%10)}},
		"data": data,
	}}
}

// benchWidget is a custom resource of about 5 KiB.
func benchWidget(i int) *unstructured.Unstructured {
	parts := make([]any, 40)
	for p := range parts {
		parts[p] = map[string]any{"name": fmt.Sprintf("part-%03d-%s", p, strings.Repeat("x", 60)), "count": int64(p + i%7)}
	}
	tags := make([]any, 20)
	for k := range tags {
		tags[k] = fmt.Sprintf("tag-%02d-%s", k, strings.Repeat("y", 20))
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": fmt.Sprintf("w-%05d", i), "namespace": widgetNS, "labels": map[string]any{"app": "bench"}},
		"spec":     map[string]any{"size": int64(i % 100), "color": "blue", "owner": "team-" + strconv.Itoa(i%13), "tags": tags, "parts": parts},
	}}
}

// memory measures heap bytes per cached object.
func (b *bench) memory(ctx context.Context) error {
	_, _ = fmt.Fprintf(os.Stderr, "bench: creating %d ConfigMaps and %d Widgets\n", b.o.configMaps, b.o.widgets)
	if err := createMany(ctx, b.dyn.Resource(configMapsGVR).Namespace(cmNS), b.o.configMaps, benchConfigMap); err != nil {
		return err
	}
	if err := createMany(ctx, b.dyn.Resource(widgetsGVR).Namespace(widgetNS), b.o.widgets, benchWidget); err != nil {
		return err
	}
	oneCM, err := rules.Parse("one-field.yaml", []byte(`rules:
  - name: key1-changed
    match: {resources: [{group: "", kind: ConfigMap}], namespaces: [`+cmNS+`]}
    fields: [data.key1]
    actions: [{log: {}}]
`))
	if err != nil {
		return err
	}
	oneWidget, err := rules.Parse("one-field.yaml", []byte(`rules:
  - name: resized
    match: {resources: [{group: example.com, kind: Widget}]}
    fields: [spec.size]
    actions: [{log: {}}]
`))
	if err != nil {
		return err
	}
	audit, err := rules.Parse("crd-audit.yaml", []byte(`rules:
  - name: audit
    match: {resources: [{group: "*", kind: "*"}]}
    ignoreFields: [status]
    actions: [{log: {}}]
`))
	if err != nil {
		return err
	}
	cfg := b.env.Config()
	for _, kind := range []struct {
		name string
		gvr  schema.GroupVersionResource
		ns   string
		n    int
		sel  change.Selector
		one  *rules.Set
		path string // the field one reads
	}{
		{"1 KiB ConfigMap", configMapsGVR, cmNS, b.o.configMaps, change.Selector{Resource: "configmaps"}, oneCM, "data.key1"},
		{"5 KiB custom resource", widgetsGVR, widgetNS, b.o.widgets, change.Selector{Group: "example.com", Resource: "widgets"}, oneWidget, "spec.size"},
	} {
		measure := func(c cacher) (float64, error) { return bytesPerObject(kind.n, c) }
		bare, err := measure(bareCacher(b.dyn, kind.gvr, kind.ns, false))
		if err != nil {
			return err
		}
		stripped, err := measure(bareCacher(b.dyn, kind.gvr, kind.ns, true))
		if err != nil {
			return err
		}
		peer, err := measure(peerCacher(b.dyn, kind.gvr, kind.ns, kind.path))
		if err != nil {
			return err
		}
		one, err := measure(fieldwatchCacher(cfg, kind.sel, kind.one))
		if err != nil {
			return err
		}
		whole, err := measure(fieldwatchCacher(cfg, kind.sel, audit))
		if err != nil {
			return err
		}
		label := fmt.Sprintf("heap B per cached %s (%d)", kind.name, kind.n)
		b.t.add(label+", rule reads one field", bytesCol(bare), bytesCol(one), ratio(one, bare),
			fmt.Sprintf("bare with managedFields stripped: %s", bytesCol(stripped)))
		b.t.add(label+", rule reads one field, fair peer: informer with a projecting transform", bytesCol(peer), bytesCol(one), ratio(one, peer),
			"the transform keeps what fieldwatch's cache keeps")
		b.t.add(label+", whole object (no fields/includeObject)", bytesCol(bare), bytesCol(whole), ratio(whole, bare), "")
	}
	return nil
}

func bytesCol(v float64) string { return fmt.Sprintf("%.0f", v) }
func ratio(a, b float64) string { return fmt.Sprintf("%.2fx", a/b) }
func msCol(d time.Duration) string {
	return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond))
}

// patchUpdates performs n updates, one per ConfigMap cm-00000..;
// value gives each update's data.counter.
func patchUpdates(ctx context.Context, ri dynamic.ResourceInterface, n int, value func(i int) string) error {
	return forEach(n, func(i int) error {
		body := fmt.Appendf(nil, `{"data":{"counter":%q}}`, value(i))
		_, err := ri.Patch(ctx, fmt.Sprintf("cm-%05d", i), types.MergePatchType, body, metav1.PatchOptions{})
		return err
	})
}

// counterRules fires on every change of data.counter in the bench
// ConfigMaps, with the given action.
func (b *bench) counterRules(name, action string) (string, error) {
	path := filepath.Join(b.dir, name+".yaml")
	return path, os.WriteFile(path, []byte(`rules:
  - name: counter
    match: {resources: [{group: "", kind: ConfigMap}], namespaces: [`+cmNS+`]}
    on: [update]
    fields: [data.counter]
    actions:
      - `+action+`
`), 0o644)
}

// events measures changes per second and CPU per change, fieldwatch (log
// and webhook) against the bare informer on the same stream; then the
// webhook latency at half the maximum rate and the webhook drain rate.
func (b *bench) events(ctx context.Context) error {
	n := b.o.updates
	if n > b.o.configMaps {
		return fmt.Errorf("-updates %d > -configmaps %d: updates of one object would coalesce", n, b.o.configMaps)
	}
	rec, err := newReceiver()
	if err != nil {
		return err
	}
	logRules, err := b.counterRules("log", "log: {}")
	if err != nil {
		return err
	}
	hookRules, err := b.counterRules("webhook", "webhook: {url: 'http://"+rec.addr+"/hook', timeout: 60s}")
	if err != nil {
		return err
	}
	bare, err := startBare(b.kubeconfig, cmNS, "configmaps")
	if err != nil {
		return err
	}
	defer bare.stop()
	peer, err := startPeer(b.kubeconfig, cmNS, "configmaps", "data.counter")
	if err != nil {
		return err
	}
	defer peer.stop()
	fwLog, err := startFieldwatch("fieldwatch-log", b.binary, b.kubeconfig, logRules, nil)
	if err != nil {
		return err
	}
	defer fwLog.stop()
	fwHook, err := b.startDrainer("fieldwatch-webhook", b.binary, hookRules)
	if err != nil {
		return err
	}
	defer fwHook.stop()
	procs := []*process{bare, peer, fwLog, fwHook}
	// With -compare, the other build posts to a receiver of its own beside
	// fwHook, on the same stream.
	var cmpRec *receiver
	var cmpHook *process
	if b.o.compare != "" {
		if cmpRec, err = newReceiver(); err != nil {
			return err
		}
		cmpRules, err := b.counterRules("webhook-compare", "webhook: {url: 'http://"+cmpRec.addr+"/hook', timeout: 60s}")
		if err != nil {
			return err
		}
		if cmpHook, err = startFieldwatch("fieldwatch-webhook-compare", b.o.compare, b.kubeconfig, cmpRules, nil); err != nil {
			return err
		}
		defer cmpHook.stop()
		procs = append(procs, cmpHook)
	}
	for _, p := range procs {
		if err := p.waitSynced(3 * time.Minute); err != nil {
			return err
		}
	}
	time.Sleep(2 * time.Second) // let start-up work settle before reading CPU
	cpu0 := map[*process]time.Duration{}
	for _, p := range procs {
		cpu0[p] = p.cpu()
	}
	cms := b.dyn.Resource(configMapsGVR).Namespace(cmNS)
	run := time.Now().UnixNano()
	_, _ = fmt.Fprintf(os.Stderr, "bench: %d updates to four consumers\n", n)
	start := time.Now()
	if err := patchUpdates(ctx, cms, n, func(i int) string { return fmt.Sprintf("%d-%d", run, i) }); err != nil {
		return err
	}
	wrote := time.Since(start)
	var took = map[*process]time.Duration{}
	for _, p := range []*process{bare, peer, fwLog} {
		at, err := p.waitCount(int64(n), 5*time.Minute)
		if err != nil {
			return err
		}
		took[p] = at.Sub(start)
	}
	at, err := rec.waitReceived(n, 5*time.Minute)
	if err != nil {
		return err
	}
	took[fwHook] = at.Sub(start)
	if cmpHook != nil {
		if _, err := cmpRec.waitReceived(n, 5*time.Minute); err != nil {
			return err
		}
	}
	cpu := map[*process]time.Duration{}
	for p, c0 := range cpu0 {
		cpu[p] = (p.cpu() - c0) / time.Duration(n)
	}
	rate := func(p *process) float64 { return float64(n) / took[p].Seconds() }
	note := fmt.Sprintf("%d updates by 32 writers in %.1fs (%.0f/s): the apiserver sets the pace", n, wrote.Seconds(), float64(n)/wrote.Seconds())
	b.t.add("changes/s delivered, to a log action", fmt.Sprintf("%.0f", rate(bare)), fmt.Sprintf("%.0f", rate(fwLog)), ratio(rate(fwLog), rate(bare)), note)
	b.t.add("changes/s delivered, to a webhook on 127.0.0.1", fmt.Sprintf("%.0f", rate(bare)), fmt.Sprintf("%.0f", rate(fwHook)), ratio(rate(fwHook), rate(bare)), "")
	b.t.add("CPU per change, log action (rules + delivery)", msCol(cpu[bare]), msCol(cpu[fwLog]), ratio(float64(cpu[fwLog]), float64(cpu[bare])), "process CPU from /proc, start-up excluded")
	b.t.add("CPU per change, webhook action (rules + POST)", msCol(cpu[bare]), msCol(cpu[fwHook]), ratio(float64(cpu[fwHook]), float64(cpu[bare])), "")
	b.t.add("CPU per change, log action, fair peer: informer with a projecting transform", msCol(cpu[peer]), msCol(cpu[fwLog]), ratio(float64(cpu[fwLog]), float64(cpu[peer])),
		"the peer keeps what fieldwatch's cache keeps and only counts")
	if cmpHook != nil {
		b.t.add("  same, "+b.o.compare, msCol(cpu[bare]), msCol(cpu[cmpHook]), ratio(float64(cpu[cmpHook]), float64(cpu[bare])), "")
	}

	// The log consumer and the peer are done: stop them so that the
	// latency measurement does not share the two cores with more watchers.
	fwLog.stop()
	peer.stop()
	if cmpHook != nil {
		// Only one webhook consumer at a time reads the latency's and the
		// drain's updates.
		cmpHook.stop()
	}
	if err := b.latency(ctx, rec, cms, bare, rate(fwHook)/2); err != nil {
		return err
	}
	// The drains run with fieldwatch and the receiver alone on the
	// machine's cores, the other build's as this one's.
	bare.stop()
	if err := b.drains(ctx, rec, cms, fwHook, ""); err != nil {
		return err
	}
	if b.o.compare == "" {
		return nil
	}
	// The other build drains a backlog of its own, bin/fieldwatch stopped,
	// from short values again (a change's payload holds the old value too).
	fwHook.stop()
	run = time.Now().UnixNano()
	if err := patchUpdates(ctx, cms, min(b.o.drain, b.o.configMaps), func(i int) string { return fmt.Sprintf("%d-reset-%d", run, i) }); err != nil {
		return err
	}
	cmpRules, err := b.counterRules("webhook-compare-drain", "webhook: {url: 'http://"+rec.addr+"/hook', timeout: 60s}")
	if err != nil {
		return err
	}
	cmp, err := b.startDrainer("fieldwatch-webhook-compare", b.o.compare, cmpRules)
	if err != nil {
		return err
	}
	defer cmp.stop()
	if err := cmp.waitSynced(3 * time.Minute); err != nil {
		return err
	}
	return b.drains(ctx, rec, cms, cmp, ", "+b.o.compare)
}

// sentAt reads when the update a payload is about was sent: the latency
// runs write "<unix nanoseconds>-..." into the value they change.
func sentAt(body []byte) (time.Time, bool) {
	var p payload.Payload
	var v string
	if json.Unmarshal(body, &p) != nil || len(p.Changes) == 0 || json.Unmarshal(p.Changes[0].Value, &v) != nil {
		return time.Time{}, false
	}
	ns, err := strconv.ParseInt(strings.SplitN(v, "-", 2)[0], 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}

// latency measures update -> webhook receipt at a fixed rate.
func (b *bench) latency(ctx context.Context, rec *receiver, cms dynamic.ResourceInterface, bare *process, rate float64) error {
	var mu sync.Mutex
	var lat []time.Duration
	rec.reset(nil, func(body []byte) {
		sent, ok := sentAt(body)
		if !ok {
			return
		}
		mu.Lock()
		lat = append(lat, time.Since(sent))
		mu.Unlock()
	})
	n := int(rate * float64(b.o.latencySeconds))
	if n > b.o.configMaps {
		n = b.o.configMaps
	}
	_, _ = fmt.Fprintf(os.Stderr, "bench: latency at %.0f updates/s for %ds\n", rate, b.o.latencySeconds)
	interval := time.Duration(float64(time.Second) / rate)
	var wg sync.WaitGroup
	next := time.Now()
	for i := range n {
		time.Sleep(time.Until(next))
		next = next.Add(interval)
		wg.Go(func() {
			body := fmt.Appendf(nil, `{"data":{"counter":"%d-lat"}}`, time.Now().UnixNano())
			_, _ = cms.Patch(ctx, fmt.Sprintf("cm-%05d", i), types.MergePatchType, body, metav1.PatchOptions{})
		})
	}
	wg.Wait()
	if _, err := rec.waitReceived(n, 2*time.Minute); err != nil {
		return err
	}
	var bareLat []time.Duration
	for len(bareLat) < n {
		select {
		case d := <-bare.lat:
			bareLat = append(bareLat, d)
		case <-time.After(time.Minute):
			return fmt.Errorf("the bare informer reported %d of %d latencies", len(bareLat), n)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	p50, p99 := percentiles(lat)
	b50, b99 := percentiles(bareLat)
	b.t.add(fmt.Sprintf("latency update sent -> received at %.0f/s (half the max), p50 / p99", rate),
		fmt.Sprintf("%s / %s", msCol(b50), msCol(b99)), fmt.Sprintf("%s / %s", msCol(p50), msCol(p99)),
		fmt.Sprintf("%.2fx / %.2fx", float64(p50)/float64(b50), float64(p99)/float64(b99)),
		fmt.Sprintf("%d updates; bare: informer event, fieldwatch: webhook POST received", len(lat)))
	return nil
}

// percentiles returns the p50 and p99 of ds (sorting it).
func percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	slices.Sort(ds)
	pct := func(q float64) time.Duration { return ds[int(q*float64(len(ds)-1))] }
	return pct(0.5), pct(0.99)
}

// drainPadding pads the drain's values so that each POST's body is about
// 4 KB (the value, and the payload around it).
var drainPadding = strings.Repeat("x", 3500)

// drains measures fw's drain -drain-runs times, the values set short
// again in between (a change's payload holds the old value too).
func (b *bench) drains(ctx context.Context, rec *receiver, cms dynamic.ResourceInterface, fw *process, label string) error {
	d := min(b.o.drain, b.o.configMaps)
	for i := range max(b.o.drainRuns, 1) {
		if i > 0 {
			rec.reset(nil, nil)
			run := time.Now().UnixNano()
			if err := patchUpdates(ctx, cms, d, func(i int) string { return fmt.Sprintf("%d-reset-%d", run, i) }); err != nil {
				return err
			}
			if _, err := rec.waitReceived(d, 2*time.Minute); err != nil {
				return err
			}
		}
		if err := b.drain(ctx, rec, cms, fw, label); err != nil {
			return err
		}
	}
	return nil
}

// startDrainer starts a fieldwatch that the events section drains, with
// its profiles served when -drain-profile asks for them.
func (b *bench) startDrainer(name, binary, rules string) (*process, error) {
	if b.o.drainProfile == "" {
		return startFieldwatch(name, binary, b.kubeconfig, rules, nil)
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	p, err := startFieldwatch(name, binary, b.kubeconfig, rules, nil, "--pprof", "--pprof-addr", addr)
	if p != nil {
		p.pprofAddr = addr
	}
	return p, err
}

// profileDrain writes fw's heap profile (when -drain-profile asks: what
// the backlog holds, after a collection) and starts a CPU profile of it
// for the drain about to start; the function it returns waits for that
// and writes it to the directory.
func (b *bench) profileDrain(fw *process, server string) func() error {
	if b.o.drainProfile == "" || fw.pprofAddr == "" {
		return func() error { return nil }
	}
	b.profiles++
	path := func(kind string) string {
		return filepath.Join(b.o.drainProfile, fmt.Sprintf("drain-%s-%s-%d-%s.pb.gz", fw.name, strings.ReplaceAll(server, "/", ""), b.profiles, kind))
	}
	if err := fetchProfile("http://"+fw.pprofAddr+"/debug/pprof/heap?gc=1", path("heap")); err != nil {
		return func() error { return err }
	}
	done := make(chan error, 1)
	go func() { done <- fetchProfile("http://"+fw.pprofAddr+"/debug/pprof/profile?seconds=2", path("cpu")) }()
	// The profile starts when the request arrives: give it that long.
	time.Sleep(100 * time.Millisecond)
	return func() error { return <-done }
}

// fetchProfile writes the profile url serves to path.
func fetchProfile(url, path string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("profile %s: %s: %s", url, resp.Status, body)
	}
	if err == nil {
		err = os.WriteFile(path, body, 0o644)
	}
	return err
}

// drain holds the receiver while a backlog builds up, then measures how
// fast fieldwatch empties it, with POST bodies of about 4 KB, to the
// receiver.
func (b *bench) drain(ctx context.Context, rec *receiver, cms dynamic.ResourceInterface, fw *process, label string) error {
	d := min(b.o.drain, b.o.configMaps)
	gate := make(chan struct{})
	rec.reset(gate, nil)
	before := fw.metric(`fieldwatch_watcher_events_total{group="",resource="configmaps",type="updated",version="v1"}`)
	run := time.Now().UnixNano()
	if err := patchUpdates(ctx, cms, d, func(i int) string { return fmt.Sprintf("%d-drain-%d-%s", run, i, drainPadding) }); err != nil {
		return err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for fw.metric(`fieldwatch_watcher_events_total{group="",resource="configmaps",type="updated",version="v1"}`)-before < float64(d) {
		if time.Now().After(deadline) {
			return fmt.Errorf("fieldwatch did not receive the %d updates", d)
		}
		time.Sleep(10 * time.Millisecond)
	}
	const server = "net/http"
	waited, quiet := waitQuiet(20*time.Second, fw)
	profiled := b.profileDrain(fw, server)
	// The metrics first: serving them is not the drain's work.
	memory := []string{"go_memstats_alloc_bytes_total ", "go_gc_duration_seconds_count "}
	m0 := fw.metrics(memory...)
	fwCPU, faults := fw.usage()
	recCPU, allCPU, cpCPU := selfCPU(), machineCPU(), childrenCPU(fw)
	start := time.Now()
	close(gate)
	at, err := rec.waitReceived(d, 2*time.Minute)
	if err != nil {
		return err
	}
	perPOST := func(cpu time.Duration) string { return fmt.Sprintf("%.0f µs", float64(cpu.Microseconds())/float64(d)) }
	fwCPU1, faults1 := fw.usage()
	fwCPU, faults, recCPU, allCPU, cpCPU = fwCPU1-fwCPU, faults1-faults, selfCPU()-recCPU, machineCPU()-allCPU, childrenCPU(fw)-cpCPU
	// CPUs busy over the drain, from the one reading after it (at most
	// the time its metrics took more): the machine's, and the share of
	// fieldwatch and the receiver.
	took := time.Since(start).Seconds()
	busy, ours, cp := allCPU.Seconds()/took, (fwCPU+recCPU).Seconds()/took, cpCPU.Seconds()/took
	settled := fmt.Sprintf("the control plane quiet after %.1f s", waited.Seconds())
	if !quiet {
		settled = fmt.Sprintf("the control plane still busy after %.0f s", waited.Seconds())
	}
	m1 := fw.metrics(memory...)
	allocated, gcs := m1[0]-m0[0], m1[1]-m0[1]
	r := float64(d) / at.Sub(start).Seconds()
	if err := profiled(); err != nil {
		return err
	}
	b.t.add("webhook POSTs/s draining a backlog, receiver "+server+label, "", fmt.Sprintf("%.0f", r), "", fmt.Sprintf("%d firings queued behind a held receiver, out of process, bodies of %d B; CPU per POST: fieldwatch %s (%.1f KB allocated, %.0f collections in all, %.1f page faults), the receiver (bench, %s) %s; CPUs busy %.2f of %d: fieldwatch and the receiver %.2f, the control plane %.2f (%s)", d, rec.meanBody(), perPOST(fwCPU), allocated/float64(d)/1000, gcs, float64(faults)/float64(d), server, perPOST(recCPU), busy, runtime.NumCPU(), ours, cp, settled))
	return nil
}
