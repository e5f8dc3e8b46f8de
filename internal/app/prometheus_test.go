package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// startPrometheus runs Debian's prometheus (make testdeps installs it) on
// a loopback port, scraping target every 5 seconds, and returns the base URL
// of its HTTP API. It is stopped by its PID when the test ends.
func startPrometheus(t *testing.T, target string) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("prometheus is not installed: run make testdeps (Debian's prometheus package): %v", err)
	}
	dir := t.TempDir()
	config := filepath.Join(dir, "prometheus.yml")
	// A scrape of 50,000 series under -race on a loaded machine takes
	// seconds: a short timeout would fail every scrape, not the test.
	if err := os.WriteFile(config, []byte(fmt.Sprintf(`global: {scrape_interval: 5s, scrape_timeout: 5s}
scrape_configs:
  - job_name: fieldwatch
    static_configs: [{targets: [%q]}]
`, target)), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	var out testenv.SyncBuffer
	cmd := exec.Command(bin, "--config.file="+config, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus output:\n%s", out.String())
		}
	})
	return "http://" + addr
}

// promQuery runs an instant query and returns the value of each series
// by its label set (as Prometheus prints it); nil when Prometheus is not
// answering yet.
func promQuery(base, query string) map[string]float64 {
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(query))
	if err != nil {
		return nil
	}
	defer func() { _ = resp.Body.Close() }()
	var r struct {
		Status string
		Data   struct {
			Result []struct {
				Metric map[string]string
				Value  [2]any
			}
		}
	}
	body, _ := io.ReadAll(resp.Body)
	if json.Unmarshal(body, &r) != nil || r.Status != "success" {
		return nil
	}
	out := map[string]float64{}
	for _, s := range r.Data.Result {
		v, _ := strconv.ParseFloat(fmt.Sprint(s.Value[1]), 64)
		out[fmt.Sprint(s.Metric)] = v
	}
	return out
}

// TestPrometheusScrapesMetricsFromFields: a real Prometheus scrapes
// fieldwatch's series of 10,000 custom resources, five series each;
// PromQL over its HTTP API sees every one, sees an object's change, and
// stops seeing an object's series once it is deleted.
func TestPrometheusScrapesMetricsFromFields(t *testing.T) {
	const n = 10_000
	env := testenv.Shared(t)
	ctx := context.Background()
	const group = "prom.app.example.com"
	const ns = "metrics-prometheus"
	env.EnsureNamespace(t, ns)
	if _, err := env.Apply(ctx, testenv.ApplyOptions{}, []byte(sprocketCRD(group, "Sprocket"))); err != nil {
		t.Fatal(err)
	}
	crs := filepath.Join(t.TempDir(), "crs.yaml")
	if err := writeTestFile(crs, sprocketsCRS(group)); err != nil {
		t.Fatal(err)
	}
	res := schema.GroupVersionResource{Group: group, Version: "v1", Resource: "sprockets"}
	sprockets := env.Dynamic(t).Resource(res).Namespace(ns)
	sprocket := func(i, size int) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": group + "/v1", "kind": "Sprocket",
			"metadata": map[string]any{"name": fmt.Sprintf("s%05d", i), "namespace": ns},
			"spec":     map[string]any{"size": int64(size)},
			"status": map[string]any{"phase": []string{"Pending", "Ready"}[i%2],
				"conditions": []any{map[string]any{"type": "Ready", "status": []string{"False", "True"}[i%2]}}},
		}}
	}
	// 10,000 objects, 16 writers at a time.
	work := make(chan int)
	errs := make(chan error, 16)
	for range 16 {
		go func() {
			for i := range work {
				if _, err := sprockets.Create(ctx, sprocket(i, i%10), metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	for range 16 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}

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
	var target string
	select {
	case target = <-addr:
	case err := <-done:
		t.Fatalf("Run: %v\nlogs:\n%s", err, logs.String())
	}
	prom := startPrometheus(t, target)

	one := func(q string) (float64, bool) {
		r := promQuery(prom, q)
		if len(r) != 1 {
			return 0, false
		}
		for _, v := range r {
			return v, true
		}
		return 0, false
	}
	wantValue := func(what, q string, want float64) {
		t.Helper()
		var got float64
		if !testenv.Poll(2*time.Minute, func() bool { v, ok := one(q); got = v; return ok && v == want }) {
			t.Fatalf("timed out waiting for %s: %s = %v, want %v\nscrapes: up %v, duration %v s, samples %v\nfieldwatch logs:\n%s",
				what, q, got, want, promQuery(prom, "up"), promQuery(prom, "scrape_duration_seconds"), promQuery(prom, "scrape_samples_scraped"), logs.String())
		}
	}
	wantValue("every object's size", `count(kube_customresource_sprocket_size)`, n)
	wantValue("five series an object", `count({__name__=~"kube_customresource_sprocket_.*"})`, 5*n)
	wantValue("one phase an object", `sum(kube_customresource_sprocket_phase)`, n)
	wantValue("the ready ones", `sum(kube_customresource_sprocket_ready)`, n/2)
	wantValue("s00003's size", `kube_customresource_sprocket_size{name="s00003"}`, 3)

	patch := []byte(`{"spec":{"size":42}}`)
	if _, err := sprockets.Patch(ctx, "s00003", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	wantValue("s00003 resized", `kube_customresource_sprocket_size{name="s00003"}`, 42)

	if err := sprockets.Delete(ctx, "s00003", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wantValue("s00003's series gone", `count(kube_customresource_sprocket_size{name="s00003"}) or vector(0)`, 0)
	wantValue("the others still there", `count(kube_customresource_sprocket_size)`, n-1)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
