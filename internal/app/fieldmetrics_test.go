package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// sprocketCRD is a CRD of the metrics tests' own, in group.
func sprocketCRD(group, kind string) string {
	return fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: %[3]ss.%[1]s}
spec:
  group: %[1]s
  scope: Namespaced
  names: {plural: %[3]ss, singular: %[3]s, kind: %[2]s, listKind: %[2]sList}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
`, group, kind, lower(kind))
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// sprocketsCRS reads size, phase and the Ready condition of Sprockets and
// Cogs of group.
func sprocketsCRS(group string) string {
	return fmt.Sprintf(`kind: CustomResourceStateMetrics
spec:
  resources:
    - groupVersionKind: {group: %[1]s, version: v1, kind: Sprocket}
      labelsFromPath: {name: [metadata, name], namespace: [metadata, namespace]}
      metrics:
        - name: sprocket_size
          help: The size.
          each: {type: Gauge, gauge: {path: [spec, size]}}
        - name: sprocket_phase
          each: {type: StateSet, stateSet: {path: [status, phase], labelName: phase, list: [Pending, Ready, Failed]}}
        - name: sprocket_ready
          each: {type: Gauge, gauge: {path: [status, conditions, "[type=Ready]", status]}}
    - groupVersionKind: {group: %[1]s, version: v1, kind: Cog}
      labelsFromPath: {name: [metadata, name]}
      metrics:
        - name: cog_teeth
          each: {type: Gauge, gauge: {path: [spec, teeth]}}
`, group)
}

// TestMetricsFromFields runs fieldwatch with a CustomResourceStateMetrics
// file and no rules against the real apiserver: the series follow the
// objects as they are created, changed and deleted, a resource's series
// go with its CRD, and a CRD created while serving gets its series.
func TestMetricsFromFields(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	const group = "fm.app.example.com"
	const ns = "metrics-from-fields"
	env.EnsureNamespace(t, ns)
	if _, err := env.Apply(ctx, testenv.ApplyOptions{}, []byte(sprocketCRD(group, "Sprocket"))); err != nil {
		t.Fatal(err)
	}
	crs := filepath.Join(t.TempDir(), "crs.yaml")
	if err := writeTestFile(crs, sprocketsCRS(group)); err != nil {
		t.Fatal(err)
	}
	apply := func(y string) {
		t.Helper()
		if _, err := env.Apply(ctx, testenv.ApplyOptions{}, []byte(y)); err != nil {
			t.Fatal(err)
		}
	}
	sprocket := func(name string, size int, phase, ready string) string {
		return fmt.Sprintf("apiVersion: %s/v1\nkind: Sprocket\nmetadata: {name: %s, namespace: %s}\nspec: {size: %d}\nstatus: {phase: %s, conditions: [{type: Ready, status: %q}]}\n", group, name, ns, size, phase, ready)
	}
	apply(sprocket("a", 1, "Pending", "False") + "---\n" + sprocket("b", 2, "Ready", "True"))

	var logs testenv.SyncBuffer
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	addr := make(chan string, 1)
	httpAddr := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(runCtx, Config{
			Rest: env.Config(), Stdout: io.Discard, Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
			HTTPAddr: "127.0.0.1:0", Ready: func(a string) { httpAddr <- a },
			Metrics:      MetricsConfig{File: crs, Addr: "127.0.0.1:0"},
			MetricsReady: func(a string) { addr <- a },
		})
	}()
	own := "http://" + <-httpAddr + "/metrics"
	unmatched := func() float64 {
		s, err := testenv.Scrape(own, "fieldwatch_field_metrics_unmatched_resources")
		if err != nil {
			t.Fatal(err)
		}
		return s["fieldwatch_field_metrics_unmatched_resources{}"]
	}
	var url string
	select {
	case a := <-addr:
		url = "http://" + a + "/metrics"
	case err := <-done:
		t.Fatalf("Run: %v\nlogs:\n%s", err, logs.String())
	}
	scrape := func() testenv.Series {
		s, err := testenv.Scrape(url, "kube_customresource_")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	key := func(metric, name string) string {
		return fmt.Sprintf(`%s{customresource_group=%q,customresource_kind="Sprocket",customresource_version="v1",name=%q,namespace=%q}`, metric, group, name, ns)
	}
	want := func(what string, cond func(testenv.Series) bool) {
		t.Helper()
		var last testenv.Series
		if !testenv.Poll(time.Minute, func() bool { last = scrape(); return cond(last) }) {
			t.Fatalf("timed out waiting for %s; last scrape:\n%v\nlogs:\n%s", what, last, logs.String())
		}
	}
	want("the series of a and b", func(s testenv.Series) bool {
		return s[key("kube_customresource_sprocket_size", "a")] == 1 &&
			s[key("kube_customresource_sprocket_size", "b")] == 2 &&
			s[`kube_customresource_sprocket_phase{customresource_group="fm.app.example.com",customresource_kind="Sprocket",customresource_version="v1",name="b",namespace="metrics-from-fields",phase="Ready"}`] == 1 &&
			s[key("kube_customresource_sprocket_ready", "b")] == 1 &&
			len(s.With("sprocket_phase")) == 6
	})

	apply(sprocket("a", 5, "Ready", "True"))
	want("a resized and ready", func(s testenv.Series) bool {
		return s[key("kube_customresource_sprocket_size", "a")] == 5 && s[key("kube_customresource_sprocket_ready", "a")] == 1
	})

	res := schema.GroupVersionResource{Group: group, Version: "v1", Resource: "sprockets"}
	if err := env.Dynamic(t).Resource(res).Namespace(ns).Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want("b's series gone", func(s testenv.Series) bool {
		return len(s.With(`name="b"`)) == 0 && len(s.With(`name="a"`)) == 5
	})

	// A CRD the configuration names, created while serving: until then
	// its resource is counted as matching nothing the cluster serves.
	if n := unmatched(); n != 1 {
		t.Errorf("unmatched resources before the Cog CRD: %v, want 1", n)
	}
	apply(sprocketCRD(group, "Cog"))
	apply(fmt.Sprintf("apiVersion: %s/v1\nkind: Cog\nmetadata: {name: c, namespace: %s}\nspec: {teeth: 12}\n", group, ns))
	want("the new Cog's series", func(s testenv.Series) bool {
		return s[`kube_customresource_cog_teeth{customresource_group="fm.app.example.com",customresource_kind="Cog",customresource_version="v1",name="c"}`] == 12
	})
	if n := unmatched(); n != 0 {
		t.Errorf("unmatched resources once the Cog CRD is served: %v, want 0", n)
	}

	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if err := env.Dynamic(t).Resource(crds).Delete(ctx, "sprockets."+group, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want("the Sprockets' series gone with their CRD", func(s testenv.Series) bool {
		return len(s.With("sprocket")) == 0 && len(s.With("cog_teeth")) == 1
	})
	if err := env.Dynamic(t).Resource(crds).Delete(ctx, "cogs."+group, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
