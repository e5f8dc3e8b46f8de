package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// The CRD-count scenario: CRDs with 20 KiB schemas spread over up to 300
// groups, one object each, on a control plane of their own.
const (
	scaleGroups = 300
	scaleNS     = "scale"
)

// scaleGVR is the resource of the i-th scale CRD.
func scaleGVR(i int) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: scaleGroup(i), Version: "v1", Resource: fmt.Sprintf("scale%04ds", i)}
}

func scaleGroup(i int) string { return fmt.Sprintf("g%03d.scale.example.org", i%scaleGroups) }

// scaleSchema is an object schema of about 20 KiB: 150 described string
// properties under spec.
var scaleSchema = func() map[string]any {
	props := map[string]any{}
	for i := range 150 {
		props[fmt.Sprintf("field%03d", i)] = map[string]any{
			"type":        "string",
			"description": fmt.Sprintf("Field %03d of the scale benchmark's CRDs, %s.", i, strings.Repeat("described at length", 5)),
		}
	}
	return map[string]any{"type": "object", "properties": map[string]any{
		"spec": map[string]any{"type": "object", "properties": props},
	}}
}()

func scaleCRD(i int) *unstructured.Unstructured {
	gvr := scaleGVR(i)
	kind := fmt.Sprintf("Scale%04d", i)
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": gvr.Resource + "." + gvr.Group},
		"spec": map[string]any{
			"group": gvr.Group, "scope": "Namespaced",
			"names": map[string]any{"plural": gvr.Resource, "kind": kind, "listKind": kind + "List"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": scaleSchema}}},
		},
	}}
}

func scaleObject(i int) *unstructured.Unstructured {
	gvr := scaleGVR(i)
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gvr.Group + "/v1", "kind": fmt.Sprintf("Scale%04d", i),
		"metadata": map[string]any{"name": "one", "namespace": scaleNS},
		"spec":     map[string]any{"field000": "a value"},
	}}
}

// scaleEnv is a control plane of its own for the scale scenarios, so that
// the other sections' resources do not change what they count.
func (b *bench) scaleEnv(ctx context.Context, name string) (*testenv.Env, string, dynamic.Interface, error) {
	env, err := testenv.New(testenv.Options{})
	if err != nil {
		return nil, "", nil, err
	}
	kubeconfig := filepath.Join(b.dir, "kubeconfig-"+name)
	if err := env.Kubeconfig(kubeconfig); err != nil {
		_ = env.Stop()
		return nil, "", nil, err
	}
	cfg := env.Config()
	cfg.QPS, cfg.Burst = 2000, 2000
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		_ = env.Stop()
		return nil, "", nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		_ = env.Stop()
		return nil, "", nil, err
	}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: scaleNS}}, metav1.CreateOptions{}); err != nil {
		_ = env.Stop()
		return nil, "", nil, err
	}
	return env, kubeconfig, dyn, nil
}

// crdCount is the CRD-count scenario: at each count, fieldwatch with
// deploy/'s rules, with deploy/'s and examples/crd-definitions' rules, and
// a bare dynamic informer per resource, one after the other on the same
// CRDs: ready time, settled RSS, goroutines and discovery requests; then
// how long a new CRD's first object takes to fire.
func (b *bench) crdCount(ctx context.Context) error {
	env, kubeconfig, dyn, err := b.scaleEnv(ctx, "crds")
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	deployRules := filepath.Join(root, "deploy/base/rules.yaml")
	crdRules := filepath.Join(root, "examples/crd-definitions/rules.yaml")
	created := 0
	for _, n := range b.o.crdCounts {
		_, _ = fmt.Fprintf(os.Stderr, "bench: CRD count: creating CRDs %d to %d\n", created, n-1)
		if err := b.createScaleCRDs(ctx, dyn, created, n); err != nil {
			return err
		}
		created = n
		if b.o.hold {
			if n < b.o.crdCounts[len(b.o.crdCounts)-1] {
				continue
			}
			_, _ = fmt.Fprintf(os.Stderr, "bench: holding %d CRDs; kubeconfig %s; interrupt to stop\n", n, kubeconfig)
			<-ctx.Done()
			return nil
		}
		bare, err := b.runBareCRDs(kubeconfig)
		if err != nil {
			return err
		}
		type variant struct {
			name, binary string
			rules        []string
		}
		variants := []variant{{"deploy/ rules", b.binary, []string{deployRules}}, {"deploy/ + crd-definitions rules", b.binary, []string{deployRules, crdRules}}}
		if b.o.compare != "" {
			variants = append(variants, variant{"deploy/ rules, " + b.o.compare, b.o.compare, []string{deployRules}})
		}
		for _, v := range variants {
			fw, err := b.runFieldwatchCRDs(ctx, kubeconfig, v.binary, v.rules, dyn, created)
			if err != nil {
				return err
			}
			if fw.extra == 0 {
				// The new CRD is kept for the next count.
				created++
			}
			b.t.add(fmt.Sprintf("%d CRDs (%d groups, 20 KiB schemas, 1 object each), %s: ready, settled RSS", created, min(created, scaleGroups), v.name),
				fmt.Sprintf("%.1f s, %.0f MiB", bare.ready.Seconds(), mib(bare.rss)),
				fmt.Sprintf("%.1f s, %.0f MiB", fw.ready.Seconds(), mib(fw.rss)),
				fmt.Sprintf("%.2fx, %.2fx", fw.ready.Seconds()/bare.ready.Seconds(), float64(fw.rss)/float64(bare.rss)),
				fmt.Sprintf("peak RSS %.0f MiB (bare %.0f), %.1f KiB a resource; heap after a collection %.0f MiB (bare %.0f), goroutine stacks %.0f MiB",
					mib(fw.peak), mib(bare.peak), float64(fw.rss)/1024/float64(fw.resources), mib(fw.heap), mib(bare.heap), mib(fw.stacks)))
			b.t.add("  goroutines, discovery requests at start", fmt.Sprintf("%d, %d", bare.goroutines, bare.discovery),
				fmt.Sprintf("%d, %d", fw.goroutines, fw.discovery), fmt.Sprintf("%.2fx", float64(fw.goroutines)/float64(bare.goroutines)),
				fmt.Sprintf("%.2f goroutines a resource (%d resources); discovery pass %.2f s; list+watch requests %d; fired at start %d; a new CRD's first object fired in %.2f s",
					float64(fw.goroutines)/float64(fw.resources), fw.resources, fw.pass.Seconds(), fw.requests, fw.firedAtStart, fw.newCRD.Seconds()))
		}
	}
	return nil
}

// createScaleCRDs creates the scale CRDs from..to-1 and their objects.
func (b *bench) createScaleCRDs(ctx context.Context, dyn dynamic.Interface, from, to int) error {
	crds := dyn.Resource(crdsGVR)
	if err := forEach(to-from, func(i int) error {
		_, err := crds.Create(ctx, scaleCRD(from+i), metav1.CreateOptions{})
		return ignoreExists(err)
	}); err != nil {
		return fmt.Errorf("create CRDs: %w", err)
	}
	return forEach(to-from, func(i int) error {
		gvr := scaleGVR(from + i)
		deadline := time.Now().Add(5 * time.Minute)
		for {
			_, err := dyn.Resource(gvr).Namespace(scaleNS).Create(ctx, scaleObject(from+i), metav1.CreateOptions{})
			if ignoreExists(err) == nil {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("create an object of %s: %w", gvr, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
}

// scaleResult is one consumer's measurements in a scale scenario.
type scaleResult struct {
	ready               time.Duration
	rss, peak, heap     int64
	stacks              int64
	goroutines          int
	discovery, requests int
	resources           int
	pass                time.Duration
	newCRD              time.Duration
	firedAtStart, extra int
	heapPerObject       float64
	objects             int
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// settle waits until p's RSS has stopped growing (two readings 2 s apart
// within 1%, at most 30 s) and returns it.
func settle(p *process) int64 {
	prev := p.rss()
	for range 15 {
		time.Sleep(2 * time.Second)
		cur := p.rss()
		if cur <= prev+prev/100 {
			return cur
		}
		prev = cur
	}
	return prev
}

// runBareCRDs runs the bare informers on every custom resource.
func (b *bench) runBareCRDs(kubeconfig string) (scaleResult, error) {
	start := time.Now()
	p, err := startBareChild(kubeconfig, "bare-crds", scaleNS, "")
	if err != nil {
		return scaleResult{}, err
	}
	defer p.stop()
	if err := p.waitSynced(10 * time.Minute); err != nil {
		return scaleResult{}, err
	}
	r := scaleResult{ready: time.Since(start)}
	r.rss = settle(p)
	r.peak = p.peakRSS()
	r.goroutines, r.discovery = p.childStat("goroutines"), p.childStat("discovery")
	heap, err := p.childHeap()
	r.heap = int64(heap)
	return r, err
}

// runFieldwatchCRDs runs fieldwatch with rules on the scale CRDs, then
// creates CRD number next with an object and waits for it to fire.
func (b *bench) runFieldwatchCRDs(ctx context.Context, kubeconfig, binary string, rules []string, dyn dynamic.Interface, next int) (scaleResult, error) {
	pprofAddr, err := freeAddr()
	if err != nil {
		return scaleResult{}, err
	}
	args := []string{"--pprof", "--pprof-addr", pprofAddr}
	for _, r := range rules[1:] {
		args = append(args, "--rules", r)
	}
	start := time.Now()
	p, err := startFieldwatch("fieldwatch-crds", binary, kubeconfig, rules[0], nil, args...)
	if err != nil {
		return scaleResult{}, err
	}
	defer p.stop()
	if err := p.waitSynced(10 * time.Minute); err != nil {
		return scaleResult{}, err
	}
	r := scaleResult{ready: time.Since(start)}
	r.rss = settle(p)
	r.peak = p.peakRSS()
	r.goroutines = int(p.metric("go_goroutines "))
	r.resources = int(p.metric("fieldwatch_watcher_resources "))
	r.discovery = int(p.metric("fieldwatch_watcher_discovery_requests_total "))
	r.requests = int(p.metricSum("fieldwatch_watcher_requests_total{"))
	if n := p.metric("fieldwatch_watcher_discovery_duration_seconds_count "); n > 0 {
		r.pass = time.Duration(p.metric("fieldwatch_watcher_discovery_duration_seconds_sum ") / n * float64(time.Second))
	}
	r.firedAtStart = int(p.count.Load())
	if r.heap, err = fieldwatchHeap(p, pprofAddr); err != nil {
		return r, err
	}
	r.stacks = int64(p.metric("go_memstats_stack_inuse_bytes "))
	// A new CRD and its object: how long from the object's creation to
	// its firing (the CRD is served first, as a user would wait for it).
	if _, err := dyn.Resource(crdsGVR).Create(ctx, scaleCRD(next), metav1.CreateOptions{}); ignoreExists(err) != nil {
		return r, err
	}
	if err := waitScaleServed(ctx, dyn, next); err != nil {
		return r, err
	}
	before := p.count.Load()
	created := time.Now()
	if _, err := dyn.Resource(scaleGVR(next)).Namespace(scaleNS).Create(ctx, scaleObject(next), metav1.CreateOptions{}); err != nil {
		if ignoreExists(err) != nil {
			return r, err
		}
		r.extra = 1 // created by the previous variant: the run measures nothing new
		return r, nil
	}
	if _, err := p.waitCount(before+1, time.Minute); err != nil {
		return r, err
	}
	r.newCRD = time.Since(created)
	return r, nil
}

// waitScaleServed waits until the i-th scale CRD's resource is served.
func waitScaleServed(ctx context.Context, dyn dynamic.Interface, i int) error {
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := dyn.Resource(scaleGVR(i)).Namespace(scaleNS).List(ctx, metav1.ListOptions{Limit: 1})
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not served: %w", scaleGVR(i), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// objectCount is the object-count scenario: ConfigMaps of one namespace,
// at each count fieldwatch with a rule that reads one field, and a bare
// dynamic informer, one after the other: settled RSS, the heap after a
// collection, and what each object adds between the counts.
func (b *bench) objectCount(ctx context.Context) error {
	env, kubeconfig, dyn, err := b.scaleEnv(ctx, "objects")
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	rulesFile := filepath.Join(b.dir, "objects.yaml")
	if err := os.WriteFile(rulesFile, []byte(`rules:
  - name: owner-changed
    match: {resources: [{group: "", kind: ConfigMap}], namespaces: [`+scaleNS+`]}
    on: [update]
    fields: [data.owner]
    actions: [{log: {}}]
`), 0o644); err != nil {
		return err
	}
	cms := dyn.Resource(configMapsGVR).Namespace(scaleNS)
	created := 0
	var prevFW, prevBare scaleResult
	for _, n := range b.o.objectCounts {
		_, _ = fmt.Fprintf(os.Stderr, "bench: object count: creating ConfigMaps %d to %d\n", created, n-1)
		if err := forEach(n-created, func(i int) error {
			_, err := cms.Create(ctx, scaleConfigMap(created+i), metav1.CreateOptions{})
			return ignoreExists(err)
		}); err != nil {
			return err
		}
		created = n
		bare, err := b.runBareObjects(kubeconfig, n)
		if err != nil {
			return err
		}
		peer, err := b.runBareObjects(kubeconfig, n, "-child-fields", "data.owner")
		if err != nil {
			return err
		}
		fw, err := b.runFieldwatchObjects(b.binary, kubeconfig, rulesFile, n)
		if err != nil {
			return err
		}
		if b.o.compare != "" {
			other, err := b.runFieldwatchObjects(b.o.compare, kubeconfig, rulesFile, n)
			if err != nil {
				return err
			}
			b.t.add(fmt.Sprintf("%d ConfigMaps, %s: settled RSS, heap a object", n, b.o.compare), "",
				fmt.Sprintf("%.0f MiB, %.0f B", mib(other.rss), other.heapPerObject),
				fmt.Sprintf("%.2fx, %.2fx", float64(other.rss)/float64(bare.rss), other.heapPerObject/bare.heapPerObject), "")
		}
		b.t.add(fmt.Sprintf("%d ConfigMaps (~300 B each), a rule reading data.owner: settled RSS, heap a object", n),
			fmt.Sprintf("%.0f MiB, %.0f B", mib(bare.rss), bare.heapPerObject),
			fmt.Sprintf("%.0f MiB, %.0f B", mib(fw.rss), fw.heapPerObject),
			fmt.Sprintf("%.2fx, %.2fx", float64(fw.rss)/float64(bare.rss), fw.heapPerObject/bare.heapPerObject),
			fmt.Sprintf("all in %.0f B an object (bare %.0f)", float64(fw.rss)/float64(n), float64(bare.rss)/float64(n)))
		b.t.add("  same, fair peer: informer with a projecting transform (data.owner)",
			fmt.Sprintf("%.0f MiB, %.0f B", mib(peer.rss), peer.heapPerObject),
			fmt.Sprintf("%.0f MiB, %.0f B", mib(fw.rss), fw.heapPerObject),
			fmt.Sprintf("%.2fx, %.2fx", float64(fw.rss)/float64(peer.rss), fw.heapPerObject/peer.heapPerObject),
			fmt.Sprintf("peer all in %.0f B an object", float64(peer.rss)/float64(n)))
		if prevFW.objects > 0 {
			d := float64(n - prevFW.objects)
			b.t.add(fmt.Sprintf("  RSS each object adds, %d to %d ConfigMaps", prevFW.objects, n),
				fmt.Sprintf("%.0f B", float64(bare.rss-prevBare.rss)/d), fmt.Sprintf("%.0f B", float64(fw.rss-prevFW.rss)/d),
				ratio(float64(fw.rss-prevFW.rss), float64(bare.rss-prevBare.rss)),
				fmt.Sprintf("1,000,000 objects at this slope: %.0f MiB", mib(fw.rss+int64(float64(fw.rss-prevFW.rss)/d*float64(1000000-n)))))
		}
		prevFW, prevBare = fw, bare
	}
	return nil
}

// scaleConfigMap is a ConfigMap of about 300 bytes as served.
func scaleConfigMap(i int) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": fmt.Sprintf("cm-%07d", i), "namespace": scaleNS,
			"labels": map[string]any{"app": "scale"}},
		"data": map[string]any{"owner": fmt.Sprintf("team-%d", i%50), "note": "x"},
	}}
}

func (b *bench) runBareObjects(kubeconfig string, n int, extra ...string) (scaleResult, error) {
	p, err := startBareChild(kubeconfig, "bare", scaleNS, "configmaps", extra...)
	if err != nil {
		return scaleResult{}, err
	}
	defer p.stop()
	if err := p.waitSynced(10 * time.Minute); err != nil {
		return scaleResult{}, err
	}
	r := scaleResult{objects: n}
	r.rss = settle(p)
	heap, err := p.childHeap()
	r.heapPerObject = float64(heap) / float64(n)
	return r, err
}

func (b *bench) runFieldwatchObjects(binary, kubeconfig, rulesFile string, n int) (scaleResult, error) {
	pprofAddr, err := freeAddr()
	if err != nil {
		return scaleResult{}, err
	}
	p, err := startFieldwatch("fieldwatch-objects", binary, kubeconfig, rulesFile, nil, "--pprof", "--pprof-addr", pprofAddr)
	if err != nil {
		return scaleResult{}, err
	}
	defer p.stop()
	if err := p.waitSynced(10 * time.Minute); err != nil {
		return scaleResult{}, err
	}
	r := scaleResult{objects: n}
	r.rss = settle(p)
	heap, err := fieldwatchHeap(p, pprofAddr)
	r.heapPerObject = float64(heap) / float64(n)
	return r, err
}

// fieldwatchHeap returns the heap of a fieldwatch process after a
// collection: a heap profile with gc=1 collects first.
func fieldwatchHeap(p *process, pprofAddr string) (int64, error) {
	if code, _ := httpGet("http://" + pprofAddr + "/debug/pprof/heap?gc=1"); code != http.StatusOK {
		return 0, fmt.Errorf("fieldwatch's heap profile: HTTP %d", code)
	}
	return int64(p.metric("go_memstats_heap_alloc_bytes ")), nil
}

// childStat reads the last "NAME N" line of a bare child.
func (p *process) childStat(name string) int {
	p.statsMu.Lock()
	defer p.statsMu.Unlock()
	return p.stats[name]
}

// childHeap has a bare child collect its garbage and report its heap.
func (p *process) childHeap() (int, error) {
	if err := p.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		return 0, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for p.childStat("heap") == 0 {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%s reported no heap", p.name)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return p.childStat("heap"), nil
}

// rss returns the process's resident set size now.
func (p *process) rss() int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			kb, _ := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
			return kb * 1024
		}
	}
	return 0
}

func ignoreExists(err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
