package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/crd/diff"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// bigCRDYAML returns a Widget CRD of about size bytes of YAML: groups of
// fields with enums, patterns, limits, defaults, lists of objects, maps
// and a CEL rule each, as generated CRDs have them. With changed, one
// group in twenty differs (an enum value and a field removed, a limit
// tightened, a field required).
func bigCRDYAML(size int, changed bool) []byte {
	var b bytes.Buffer
	b.WriteString(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
`)
	for g := 0; b.Len() < size; g++ {
		hit := changed && g%20 == 0
		modes, max, legacy, required := "[Always, Never, IfNotPresent]", 100, "\n                    legacy: {type: string, description: deprecated}", "[name]"
		if hit {
			modes, max, legacy, required = "[Always, Never]", 50, "", "[name, mode]"
		}
		fmt.Fprintf(&b, `                group%05d:
                  type: object
                  required: %s
                  x-kubernetes-validations:
                    - {rule: "!has(self.ports) || self.ports.size() <= self.replicas * 4", message: too many ports}
                  properties:
                    name: {type: string, minLength: 1, maxLength: 63, pattern: "^[a-z0-9-]+$", description: "The name of the group, a DNS label."}
                    replicas: {type: integer, minimum: 0, maximum: %d, default: 1, description: "How many copies run."}
                    mode: {type: string, enum: %s}%s
                    ports:
                      type: array
                      maxItems: 16
                      x-kubernetes-list-type: map
                      x-kubernetes-list-map-keys: [port]
                      items:
                        type: object
                        required: [port]
                        properties:
                          name: {type: string}
                          port: {type: integer, minimum: 1, maximum: 65535}
                          protocol: {type: string, enum: [TCP, UDP, SCTP], default: TCP}
                    labels: {type: object, additionalProperties: {type: string, maxLength: 63}}
                    target: {x-kubernetes-int-or-string: true, anyOf: [{type: integer}, {type: string}]}
`, g, required, max, modes, legacy)
	}
	return b.Bytes()
}

// peakHeap samples the live heap every millisecond until stop is called
// and returns the highest value seen.
func peakHeap() (stop func() uint64) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(sample)
			if v := sample[0].Value.Uint64(); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() uint64 {
		close(done)
		wg.Wait()
		return peak.Load()
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCRDDiffLarge runs crd-diff on two CRDs of 5 MB of YAML each
// (read, validated with the apiserver's validation, compared), and side
// by side each step alone: reading both files, validating both CRDs,
// comparing them. Beside ns/op and B/op it reports the CPU time per op
// (the machine may be shared: wall time then overstates) and the peak
// live heap.
func BenchmarkCRDDiffLarge(b *testing.B) {
	dir := b.TempDir()
	oldPath, newPath := filepath.Join(dir, "old.yaml"), filepath.Join(dir, "new.yaml")
	oldData, newData := bigCRDYAML(5<<20, false), bigCRDYAML(5<<20, true)
	if err := os.WriteFile(oldPath, oldData, 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(newPath, newData, 0o644); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	read := func(b *testing.B) (old, new []diff.Document) {
		old, err := diff.ReadCRDs(oldPath)
		if err != nil {
			b.Fatal(err)
		}
		new, err = diff.ReadCRDs(newPath)
		if err != nil {
			b.Fatal(err)
		}
		return old, new
	}
	oldDocs, newDocs := read(b)
	steps := []struct {
		name string
		run  func(b *testing.B)
	}{
		{"crd-diff", func(b *testing.B) {
			results, err := crdDiff(ctx, oldPath, newPath, crdDiffOptions{})
			if err != nil || len(results) != 1 || results[0].Breaking == 0 {
				b.Fatalf("results %+v, %v", results, err)
			}
		}},
		{"read", func(b *testing.B) { read(b) }},
		{"validate", func(b *testing.B) {
			if err := errors.Join(validateEach(ctx, oldDocs, newDocs)...); err != nil {
				b.Fatal(err)
			}
		}},
		{"compare", func(b *testing.B) {
			if r := diff.Compare(oldDocs[0].CRD, newDocs[0].CRD); r.Breaking == 0 {
				b.Fatal("nothing breaking")
			}
		}},
	}
	for _, st := range steps {
		b.Run(st.name, func(b *testing.B) {
			b.ReportAllocs()
			var peak uint64
			cpu := cpuTime(b)
			for b.Loop() {
				runtime.GC()
				stop := peakHeap()
				st.run(b)
				peak = max(peak, stop())
			}
			b.ReportMetric((cpuTime(b)-cpu).Seconds()/float64(b.N), "cpu-s/op")
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
			b.ReportMetric(float64(len(oldData)+len(newData))/(1<<20), "input-MB")
		})
	}
}

// BenchmarkCRDDiffCluster runs crd-diff --cluster over 10,000 live
// Widgets of about 1 KiB (one in twenty hit by the change) on the real
// control plane, side by side with a bare paged list of them (the same
// pages of 500 at the same version): what the command adds to reading
// the objects is the scan.
func BenchmarkCRDDiffCluster(b *testing.B) {
	const n = 10000
	env := testenv.Shared(b)
	const group = "bench.crddiff.example.com"
	crd := func(max int, modes string) string {
		return fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.%[1]s}
spec:
  group: %[1]s
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              x-kubernetes-validations: [{rule: "!has(self.ports) || self.ports.size() <= 16", message: too many ports}]
              properties:
                name: {type: string, minLength: 1, maxLength: 63, pattern: "^[a-z0-9-]+$"}
                replicas: {type: integer, minimum: 0, maximum: %[2]d, default: 1}
                mode: {type: string, enum: %[3]s}
                labels: {type: object, additionalProperties: {type: string, maxLength: 63}}
                ports:
                  type: array
                  maxItems: 16
                  items:
                    type: object
                    required: [port]
                    properties:
                      name: {type: string}
                      port: {type: integer, minimum: 1, maximum: 65535}
                      protocol: {type: string, enum: [TCP, UDP, SCTP]}
`, group, max, modes)
	}
	ctx := context.Background()
	if _, err := env.Apply(ctx, testenv.ApplyOptions{FieldManager: "bench"}, []byte(crd(100, "[Always, Never, IfNotPresent]")+"---\napiVersion: v1\nkind: Namespace\nmetadata: {name: crd-diff-bench}\n")); err != nil {
		b.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: group, Version: "v1", Resource: "widgets"}
	dyn := env.Dynamic(b)
	client := dyn.Resource(gvr).Namespace("crd-diff-bench")
	existing, err := client.List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		b.Fatal(err)
	}
	if existing.GetRemainingItemCount() == nil || *existing.GetRemainingItemCount()+int64(len(existing.Items)) < n {
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := w; i < n; i += 8 {
					mode, replicas := "Always", i%50
					if i%20 == 0 {
						mode, replicas = "IfNotPresent", 80
					}
					u := &unstructured.Unstructured{Object: map[string]any{
						"apiVersion": group + "/v1", "kind": "Widget",
						"metadata": map[string]any{"name": fmt.Sprintf("w%05d", i), "labels": map[string]any{"app": "shop"},
							"annotations": map[string]any{"owner": "team-payments@example.com"}},
						"spec": map[string]any{"name": fmt.Sprintf("widget-%d", i), "mode": mode, "replicas": int64(replicas),
							"labels": map[string]any{"app": "shop", "tier": "web", "team": "payments", "release": fmt.Sprintf("r%d", i%7)},
							"ports": []any{
								map[string]any{"name": "http", "port": int64(8080), "protocol": "TCP"},
								map[string]any{"name": "https", "port": int64(8443), "protocol": "TCP"},
								map[string]any{"name": "metrics", "port": int64(9090), "protocol": "TCP"},
							}},
					}}
					if _, err := client.Create(ctx, u, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
						errs <- err
						return
					}
				}
			}(w)
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	kubeconfig := env.WriteKubeconfig(b)
	newFile := filepath.Join(b.TempDir(), "new.yaml")
	if err := os.WriteFile(newFile, []byte(crd(50, "[Always, Never]")), 0o644); err != nil {
		b.Fatal(err)
	}
	perObject := func(b *testing.B) {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/object")
	}
	b.Run("list", func(b *testing.B) {
		b.ReportAllocs()
		all := dyn.Resource(gvr)
		for b.Loop() {
			count := 0
			opts := metav1.ListOptions{Limit: clusterPageSize}
			for {
				page, err := all.List(ctx, opts)
				if err != nil {
					b.Fatal(err)
				}
				count += len(page.Items)
				if opts.Continue = page.GetContinue(); opts.Continue == "" {
					break
				}
			}
			if count != n {
				b.Fatalf("listed %d", count)
			}
		}
		perObject(b)
	})
	b.Run("crd-diff", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var stdout, stderr bytes.Buffer
			if code := run(ctx, []string{"crd-diff", "--cluster", newFile, "--kubeconfig", kubeconfig, "--kube-qps", "1000", "--kube-burst", "1000"}, &stdout, &stderr); code != 1 {
				b.Fatalf("exit %d: %s%s", code, stdout.String(), stderr.String())
			}
			if !strings.Contains(stdout.String(), fmt.Sprintf("; %d object(s) checked", n)) || !strings.Contains(stdout.String(), fmt.Sprintf("impact enum-values-removed (v1, spec.mode): %d object(s) rejected", n/20)) {
				b.Fatalf("output:\n%s", stdout.String())
			}
		}
		perObject(b)
	})
}
