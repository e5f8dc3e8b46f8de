package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// The kube-state-metrics section (ksm): the same CustomResourceStateMetrics
// file served by kube-state-metrics (bin/kube-state-metrics, make ksm) and
// by fieldwatch (--metrics-config), one after the other on the same
// control plane: 100,000 custom resources with five series each, and
// 3,000 CRDs with one object each. For each: the time from the process's
// start to its first scrape with every series, its settled and peak RSS,
// the median time of five scrapes of every series (the body read whole,
// not compressed) and the server's CPU for each.

// metricWidgetsGVR is the resource of the object-count case.
var metricWidgetsGVR = schema.GroupVersionResource{Group: "metrics.bench.example.com", Version: "v1", Resource: "metricwidgets"}

const metricWidgetsCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: metricwidgets.metrics.bench.example.com}
spec:
  group: metrics.bench.example.com
  scope: Namespaced
  names: {plural: metricwidgets, singular: metricwidget, kind: MetricWidget, listKind: MetricWidgetList}
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`

// metricWidgetsCRS gives five series an object: replicas, the Ready
// condition, and a phase of three states.
const metricWidgetsCRS = `kind: CustomResourceStateMetrics
spec:
  resources:
    - groupVersionKind: {group: metrics.bench.example.com, version: v1, kind: MetricWidget}
      labelsFromPath: {name: [metadata, name], namespace: [metadata, namespace]}
      metrics:
        - name: metricwidget_replicas
          each: {type: Gauge, gauge: {path: [spec, replicas]}}
        - name: metricwidget_ready
          each: {type: Gauge, gauge: {path: [status, conditions, "[type=Ready]", status]}}
        - name: metricwidget_phase
          each: {type: StateSet, stateSet: {path: [status, phase], labelName: phase, list: [Pending, Running, Failed]}}
`

// metricWidget is an object of about 1 KiB, of which the metrics read a
// few fields.
func metricWidget(i int) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "metrics.bench.example.com/v1", "kind": "MetricWidget",
		"metadata": map[string]any{"name": fmt.Sprintf("mw-%06d", i), "namespace": scaleNS,
			"labels": map[string]any{"app": "bench", "shard": fmt.Sprintf("s%d", i%16)}},
		"spec": map[string]any{
			"replicas": int64(i % 7), "image": "registry.example.com/team/service:v1.2." + fmt.Sprint(i%100),
			"config": strings.Repeat("x", 400), "owner": "team-" + fmt.Sprint(i%20),
		},
		"status": map[string]any{
			"phase": []string{"Pending", "Running", "Failed"}[i%3],
			"conditions": []any{
				map[string]any{"type": "Ready", "status": []string{"True", "False"}[i%2], "reason": "Reconciled", "message": strings.Repeat("m", 120), "lastTransitionTime": "2026-01-01T00:00:00Z"},
				map[string]any{"type": "Synced", "status": "True", "reason": "Reconciled", "lastTransitionTime": "2026-01-01T00:00:00Z"},
			},
			"observedGeneration": int64(1),
		},
	}}
}

// scaleCRS gives two series to each object of the 3,000 CRDs: one
// resource per group, every kind of it (a wildcard, as kube-state-metrics
// resolves it from the CRDs).
func scaleCRS() string {
	var b strings.Builder
	b.WriteString("kind: CustomResourceStateMetrics\nspec:\n  resources:\n")
	for g := range scaleGroups {
		fmt.Fprintf(&b, `    - groupVersionKind: {group: %s, version: v1, kind: "*"}
      labelsFromPath: {name: [metadata, name], namespace: [metadata, namespace]}
      metrics:
        - name: scale_info
          each: {type: Info, info: {labelsFromPath: {field: [spec, field000]}}}
        - name: scale_created
          each: {type: Gauge, gauge: {path: [metadata, creationTimestamp]}}
`, scaleGroup(g))
	}
	return b.String()
}

// peerResult is what one process measured.
type peerResult struct {
	firstFull      time.Duration
	rss, peak      int64
	scrape, cpu    time.Duration
	series, scrapB int
}

// ksmSection runs both cases.
func (b *bench) ksmSection(ctx context.Context) error {
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	ksm := filepath.Join(root, "bin", "kube-state-metrics")
	if _, err := os.Stat(ksm); err != nil {
		return fmt.Errorf("%s: run `make ksm` first: %w", ksm, err)
	}
	if !b.o.hold {
		if err := b.ksmObjects(ctx, ksm, 100_000); err != nil {
			return err
		}
	}
	return b.ksmCRDs(ctx, ksm, 3000)
}

// ksmObjects is the object-count case: n custom resources of one CRD.
func (b *bench) ksmObjects(ctx context.Context, ksm string, n int) error {
	env, kubeconfig, dyn, err := b.scaleEnv(ctx, "ksm-objects")
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	if _, err := env.Apply(ctx, testenv.ApplyOptions{}, []byte(metricWidgetsCRD)); err != nil {
		return err
	}
	_, _ = fmt.Fprintf(os.Stderr, "bench: ksm: creating %d custom resources\n", n)
	ri := dyn.Resource(metricWidgetsGVR).Namespace(scaleNS)
	if err := forEach(n, func(i int) error {
		_, err := ri.Create(ctx, metricWidget(i), metav1.CreateOptions{})
		return ignoreExists(err)
	}); err != nil {
		return err
	}
	crs := filepath.Join(b.dir, "ksm-objects.crs.yaml")
	if err := os.WriteFile(crs, []byte(metricWidgetsCRS), 0o644); err != nil {
		return err
	}
	return b.comparePeers(fmt.Sprintf("%d custom resources, 5 series each", n), ksm, kubeconfig, crs, 5*n)
}

// ksmCRDs is the CRD-count case: n CRDs with one object each.
func (b *bench) ksmCRDs(ctx context.Context, ksm string, n int) error {
	env, kubeconfig, dyn, err := b.scaleEnv(ctx, "ksm-crds")
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	_, _ = fmt.Fprintf(os.Stderr, "bench: ksm: creating %d CRDs with an object each\n", n)
	if err := createScaleCRDs(ctx, env, dyn, n); err != nil {
		return err
	}
	crs := filepath.Join(b.dir, "ksm-crds.crs.yaml")
	if err := os.WriteFile(crs, []byte(scaleCRS()), 0o644); err != nil {
		return err
	}
	if b.o.hold {
		_, _ = fmt.Fprintf(os.Stderr, "bench: holding %d CRDs with an object each; kubeconfig %s; metrics config %s; interrupt to stop\n", n, kubeconfig, crs)
		<-ctx.Done()
		return nil
	}
	return b.comparePeers(fmt.Sprintf("%d CRDs, one object each, 2 series each", n), ksm, kubeconfig, crs, 2*n)
}

// createScaleCRDs creates the scale scenario's first n CRDs, waits until
// each is served, and creates an object of each.
func createScaleCRDs(ctx context.Context, env *testenv.Env, dyn dynamic.Interface, n int) error {
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	if err := forEach(n, func(i int) error {
		_, err := crds.Create(ctx, scaleCRD(i), metav1.CreateOptions{})
		return ignoreExists(err)
	}); err != nil {
		return err
	}
	return forEach(n, func(i int) error {
		deadline := time.Now().Add(5 * time.Minute)
		for {
			_, err := dyn.Resource(scaleGVR(i)).Namespace(scaleNS).Create(ctx, scaleObject(i), metav1.CreateOptions{})
			if err = ignoreExists(err); err == nil || time.Now().After(deadline) {
				return err
			}
			time.Sleep(100 * time.Millisecond) // the CRD is not served yet
		}
	})
}

// comparePeers runs kube-state-metrics, then fieldwatch, on the same CRS
// file, and adds their rows.
func (b *bench) comparePeers(what, ksm, kubeconfig, crs string, series int) error {
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	telemetry, err := freeAddr()
	if err != nil {
		return err
	}
	host, port, _ := strings.Cut(addr, ":")
	_, tport, _ := strings.Cut(telemetry, ":")
	k, err := b.measurePeer("kube-state-metrics", addr, series, exec.Command(ksm, "--kubeconfig", kubeconfig,
		"--custom-resource-state-only", "--custom-resource-state-config-file", crs,
		"--host", host, "--port", port, "--telemetry-host", host, "--telemetry-port", tport))
	if err != nil {
		return err
	}
	httpAddr, err := freeAddr()
	if err != nil {
		return err
	}
	if addr, err = freeAddr(); err != nil {
		return err
	}
	f, err := b.measurePeer("fieldwatch", addr, series, exec.Command(b.binary, "run", "--kubeconfig", kubeconfig,
		"--metrics-config", crs, "--metrics-addr", addr, "--http-addr", httpAddr, "--history=false", "--log-level", "warn"))
	if err != nil {
		return err
	}
	note := "peer: kube-state-metrics v2.20.0 (the BARE INFORMER column)"
	b.t.add(what+": start to the first scrape with every series", k.firstFull.Round(time.Millisecond).String(), f.firstFull.Round(time.Millisecond).String(),
		ratio(float64(f.firstFull), float64(k.firstFull)), note)
	b.t.add(what+": settled RSS, peak RSS", fmt.Sprintf("%.0f MiB, %.0f MiB", mib(k.rss), mib(k.peak)), fmt.Sprintf("%.0f MiB, %.0f MiB", mib(f.rss), mib(f.peak)),
		fmt.Sprintf("%.2fx, %.2fx", float64(f.rss)/float64(k.rss), float64(f.peak)/float64(k.peak)), "settled: after the scrapes")
	b.t.add(what+": scrape of every series (median of 5)", msCol(k.scrape), msCol(f.scrape), ratio(float64(f.scrape), float64(k.scrape)),
		fmt.Sprintf("%d series, %d and %d bytes, text format", series, k.scrapB, f.scrapB))
	b.t.add(what+": CPU a scrape (mean of 5)", msCol(k.cpu), msCol(f.cpu), ratio(float64(f.cpu), float64(k.cpu)), "the server's CPU, from /proc")
	return nil
}

// measurePeer starts cmd (serving the series on addr) and measures it;
// it stops the process by its PID.
func (b *bench) measurePeer(name, addr string, want int, cmd *exec.Cmd) (peerResult, error) {
	var r peerResult
	logFile, err := os.Create(filepath.Join(b.dir, name+".log"))
	if err != nil {
		return r, err
	}
	defer func() { _ = logFile.Close() }()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return r, err
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	defer p.stop()
	url := "http://" + addr + "/metrics"
	for {
		n, _, _ := scrapeCount(url)
		if n >= want {
			r.firstFull = time.Since(start)
			break
		}
		select {
		case <-p.done:
			return r, fmt.Errorf("%s exited (log %s)", name, logFile.Name())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Since(start) > 15*time.Minute {
			return r, fmt.Errorf("%s: %d of %d series after 15 minutes (log %s)", name, n, want, logFile.Name())
		}
	}
	var times []time.Duration
	cpu := p.cpu()
	for range 5 {
		n, size, d := scrapeCount(url)
		if n != want {
			return r, fmt.Errorf("%s: a scrape had %d series, not %d", name, n, want)
		}
		times = append(times, d)
		r.scrapB = size
	}
	r.cpu = (p.cpu() - cpu) / 5
	slices.Sort(times)
	r.scrape = times[len(times)/2]
	r.series = want
	r.rss = settle(p)
	r.peak = p.peakRSS()
	_, _ = fmt.Fprintf(os.Stderr, "bench: ksm: %s: first full scrape %s, scrape %s, RSS %.0f MiB (peak %.0f)\n", name, r.firstFull, r.scrape, mib(r.rss), mib(r.peak))
	return r, nil
}

// scrapeCount gets url and returns how many samples it holds, its size
// and how long the whole body took.
func scrapeCount(url string) (int, int, time.Duration) {
	start := time.Now()
	resp, err := http.Get(url)
	if err != nil {
		return 0, 0, 0
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	d := time.Since(start)
	if err != nil || resp.StatusCode != http.StatusOK {
		return 0, 0, d
	}
	n := 0
	for line := range strings.SplitSeq(string(body), "\n") {
		if line != "" && line[0] != '#' {
			n++
		}
	}
	return n, len(body), d
}
