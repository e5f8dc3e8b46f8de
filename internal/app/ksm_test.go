package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fieldwatch/fieldwatch/fieldmetrics"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// sinksCRD serves Sinks at v1 and v2 (the same schema, no conversion):
// a configuration without a version gives the series of both.
const sinksCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: sinks.ksm.app.example.com}
spec:
  group: ksm.app.example.com
  scope: Namespaced
  names: {plural: sinks, singular: sink, kind: Sink, listKind: SinkList}
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
    - name: v2
      served: true
      storage: false
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`

// ksmObjects are the objects of the comparison: Widgets with and without
// status, and Sinks that exercise every feature and every error.
func ksmObjects(ns string) string {
	return fmt.Sprintf(`apiVersion: example.com/v1
kind: Widget
metadata: {name: w1, namespace: %[1]s}
spec: {size: 3, color: red, owner: alice, parts: [{name: wheel, count: 4}, {name: bell, count: 1}]}
---
apiVersion: example.com/v1
kind: Widget
metadata: {name: w2, namespace: %[1]s}
spec: {size: 0}
---
apiVersion: ksm.app.example.com/v1
kind: Sink
metadata:
  name: s1
  namespace: %[1]s
  labels: {app: sink, app.kubernetes.io/name: sink-one}
  annotations: {note: "quote \" and backslash \\ here", team.example.com/owner: storage}
spec:
  replicas: 3
  paused: true
  memory: 512Mi
  ratio: "25%%"
  owner: alice
  note: "line one\nline two, ünïcödé"
  endpoints: [a.example.com, b.example.com]
  ports: [{port: 80, protocol: TCP}, {port: 53, protocol: UDP}]
status:
  startedAt: "2026-06-01T12:00:00Z"
  phase: Running
  observed: 7
  conditions:
    - {type: Ready, status: "True", reason: Up}
    - {type: Degraded, status: "False", reason: Fine}
    - {type: Synced, status: Unknown}
  queues: {high: 2, low: 40, broken: many}
  shards:
    a: {ready: true, zone: eu-1}
    b: {ready: "false", zone: eu-2}
    c: {zone: eu-3}
---
apiVersion: ksm.app.example.com/v1
kind: Sink
metadata: {name: s2, namespace: %[1]s}
spec:
  replicas: 1.5
  memory: 250m
  owner: {name: bob}
  ports: {port: 8080}
status:
  phase: Gone
  conditions: {type: Ready, status: "True"}
  queues: []
`, ns)
}

// kubeStateMetrics returns bin/kube-state-metrics, built from the module
// proxy by make ksm (hack/ksm: a module of its own).
func kubeStateMetrics(t *testing.T) string {
	t.Helper()
	testenv.SkipShort(t, testenv.NeedsProcesses)
	path, err := filepath.Abs("../../bin/kube-state-metrics")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("kube-state-metrics is not built: run make ksm (%v)", err)
	}
	return path
}

// freeAddr returns a loopback address with a port free now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().String()
}

// comparisonCRS writes one CustomResourceStateMetrics file of the
// Widgets example's resources and the Sinks'.
func comparisonCRS(t *testing.T) string {
	t.Helper()
	var all fieldmetrics.File
	for _, f := range []string{"../../examples/metrics/widgets.crs.yaml", "testdata/ksm-sinks.crs.yaml"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var one fieldmetrics.File
		if err := yaml.Unmarshal(data, &one); err != nil {
			t.Fatal(err)
		}
		all.Kind = one.Kind
		all.Spec.Resources = append(all.Spec.Resources, one.Spec.Resources...)
	}
	data, err := yaml.Marshal(all)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "crs.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSeriesAsKubeStateMetrics runs kube-state-metrics itself and
// fieldwatch against the same control plane with the same
// CustomResourceStateMetrics file and the same objects, and holds the
// series fieldwatch serves to those kube-state-metrics serves: the same
// names, labels and values, every one of them.
func TestSeriesAsKubeStateMetrics(t *testing.T) {
	ksm := kubeStateMetrics(t)
	env := testenv.Shared(t)
	ctx := context.Background()
	const ns = "ksm-compare"
	env.EnsureNamespace(t, ns)
	if _, err := env.ApplyFiles(ctx, testenv.ApplyOptions{}, "../../examples/crds/widgets.yaml"); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Apply(ctx, testenv.ApplyOptions{}, []byte(sinksCRD)); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Apply(ctx, testenv.ApplyOptions{}, []byte(ksmObjects(ns))); err != nil {
		t.Fatal(err)
	}
	crs := comparisonCRS(t)

	// kube-state-metrics, as a process stopped by its PID.
	ksmAddr := freeAddr(t)
	host, port, _ := net.SplitHostPort(ksmAddr)
	var ksmLog testenv.SyncBuffer
	cmd := exec.Command(ksm, "--kubeconfig", env.WriteKubeconfig(t), "--custom-resource-state-only",
		"--custom-resource-state-config-file", crs, "--host", host, "--port", port,
		"--telemetry-host", "127.0.0.1", "--telemetry-port", strings.Split(freeAddr(t), ":")[1])
	cmd.Stdout, cmd.Stderr = &ksmLog, &ksmLog
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()

	// fieldwatch, in process.
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	addr := make(chan string, 1)
	done := make(chan error, 1)
	var logs testenv.SyncBuffer
	go func() {
		done <- Run(runCtx, Config{
			Rest: env.Config(), Stdout: io.Discard, Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
			Metrics:      MetricsConfig{File: crs, Addr: "127.0.0.1:0"},
			MetricsReady: func(a string) { addr <- a },
		})
	}()
	var fw string
	select {
	case a := <-addr:
		fw = "http://" + a + "/metrics"
	case err := <-done:
		t.Fatalf("Run: %v\nlogs:\n%s", err, logs.String())
	}

	ours := func() testenv.Series { s, _ := testenv.Scrape(fw, ""); return s.With(`namespace="` + ns + `"`) }
	theirs := func() testenv.Series {
		s, _ := testenv.Scrape("http://"+ksmAddr+"/metrics", "")
		return s.With(`namespace="` + ns + `"`)
	}
	// Both have every object once each has the two Sinks at both
	// versions and both Widgets.
	complete := func(s testenv.Series) bool {
		return len(s.With(`customresource_version="v2"`, `sink_replicas`)) == 2 &&
			len(s.With(`sink_replicas`)) == 4 && len(s.With(`widget_size`)) == 2
	}
	var a, b testenv.Series
	testenv.Eventually(t, 2*time.Minute, "kube-state-metrics' series of every object", func() bool { b = theirs(); return complete(b) })
	testenv.Eventually(t, time.Minute, "fieldwatch's series of every object", func() bool { a = ours(); return complete(a) })
	if len(b) < 60 {
		t.Errorf("kube-state-metrics serves %d series; the comparison expects more than 60", len(b))
	}
	var diff []string
	for _, k := range slices.Sorted(maps.Keys(b)) {
		if v, ok := a[k]; !ok {
			diff = append(diff, fmt.Sprintf("- %s %v", k, b[k]))
		} else if v != b[k] {
			diff = append(diff, fmt.Sprintf("~ %s %v, fieldwatch %v", k, b[k], v))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(a)) {
		if _, ok := b[k]; !ok {
			diff = append(diff, fmt.Sprintf("+ %s %v", k, a[k]))
		}
	}
	if len(diff) > 0 {
		t.Errorf("%d series differ (- only kube-state-metrics, + only fieldwatch, ~ values):\n%s", len(diff), strings.Join(diff, "\n"))
	}
	var lines []string
	for _, k := range slices.Sorted(maps.Keys(b)) {
		lines = append(lines, fmt.Sprintf("%s %v", k, b[k]))
	}
	t.Logf("%d series, the same from both:\n%s", len(b), strings.Join(lines, "\n"))
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
