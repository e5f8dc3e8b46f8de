package fieldmetrics

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"

	"github.com/fieldwatch/fieldwatch/change"
)

// benchCRS gives five series an object: replicas, the Ready condition and
// a phase of three states.
const benchCRS = `
kind: CustomResourceStateMetrics
spec:
  resources:
    - groupVersionKind: {group: example.com, version: v1, kind: Widget}
      labelsFromPath: {name: [metadata, name], namespace: [metadata, namespace]}
      metrics:
        - name: widget_replicas
          each: {type: Gauge, gauge: {path: [spec, replicas]}}
        - name: widget_ready
          each: {type: Gauge, gauge: {path: [status, conditions, "[type=Ready]", status]}}
        - name: widget_phase
          each: {type: StateSet, stateSet: {path: [status, phase], labelName: phase, list: [Pending, Running, Failed]}}
`

// benchObjects are n Widgets as the watcher's cache holds them with the
// benchmark's projection: the fields the metrics read.
func benchObjects(n int) []Object {
	objs := make([]Object, n)
	for i := range objs {
		objs[i] = &object{fmt.Sprintf(`{"metadata":{"name":"widget-%06d","namespace":"ns-%02d"},"spec":{"replicas":%d},"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"},{"type":"Synced","status":"True"}]}}`, i, i%50, i%7)}
	}
	return objs
}

// BenchmarkScrape measures a scrape of 100,000 objects (500,000 series)
// in the text format: Memo keeps each object's series between scrapes
// (what Scraper does), Fresh evaluates every object at every scrape. The
// memo's bytes an object are reported beside.
func BenchmarkScrape(b *testing.B) {
	set, err := Parse("bench.yaml", []byte(benchCRS))
	if err != nil {
		b.Fatal(err)
	}
	src := source{widgets: benchObjects(100_000)}
	for _, fresh := range []bool{false, true} {
		name := "Memo"
		if fresh {
			name = "Fresh"
		}
		b.Run(name, func(b *testing.B) {
			sc := NewScraper(set, Options{fresh: fresh})
			format := expfmt.NewFormat(expfmt.TypeTextPlain)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			if err := sc.WriteTo(context.Background(), src, io.Discard, format); err != nil {
				b.Fatal(err)
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/100_000, "memo-B/object")
			b.ResetTimer()
			cpu := processCPU()
			for b.Loop() {
				if err := sc.WriteTo(context.Background(), src, io.Discard, format); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkEvaluate measures the evaluation of one object (its five
// series), decoding included.
func BenchmarkEvaluate(b *testing.B) {
	set, err := Parse("bench.yaml", []byte(benchCRS))
	if err != nil {
		b.Fatal(err)
	}
	sc := NewScraper(set, Options{})
	o := benchObjects(1)[0]
	rm := set.resources[0]
	m := &resMemo{rm: rm, res: widgets, common: commonLabels(rm, widgets)}
	b.ReportAllocs()
	for b.Loop() {
		sc.evaluate(m, o)
	}
}

// BenchmarkScrapeHTTP measures a scrape of 100,000 objects (500,000
// series) through Handler, the body read whole by an HTTP client, as
// Prometheus reads it (text format, not compressed).
func BenchmarkScrapeHTTP(b *testing.B) {
	set, err := Parse("bench.yaml", []byte(benchCRS))
	if err != nil {
		b.Fatal(err)
	}
	src := source{widgets: benchObjects(100_000)}
	sc := NewScraper(set, Options{})
	srv := httptest.NewServer(sc.Handler(src, nil))
	defer srv.Close()
	get := func() {
		resp, err := http.Get(srv.URL)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	get() // the memo
	b.ResetTimer()
	cpu := processCPU()
	for b.Loop() {
		get()
	}
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
}

// processCPU returns the CPU time this process used so far: on a shared
// machine, what a scrape costs, whatever the wall time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkScrapeResources measures a scrape of 3,000 resources of one
// object each (300 groups of ten kinds, each group one configured
// resource with every kind): what a scrape costs a resource.
func BenchmarkScrapeResources(b *testing.B) {
	var crs strings.Builder
	crs.WriteString("kind: CustomResourceStateMetrics\nspec:\n  resources:\n")
	for g := range 300 {
		fmt.Fprintf(&crs, `    - groupVersionKind: {group: g%03d.example.com, version: v1, kind: "*"}
      labelsFromPath: {name: [metadata, name], namespace: [metadata, namespace]}
      metrics:
        - {name: scale_info, each: {type: Info, info: {labelsFromPath: {field: [spec, field000]}}}}
        - {name: scale_created, each: {type: Gauge, gauge: {path: [metadata, creationTimestamp]}}}
`, g)
	}
	set, err := Parse("bench.yaml", []byte(crs.String()))
	if err != nil {
		b.Fatal(err)
	}
	src := source{}
	for i := range 3000 {
		res := change.Resource{Group: fmt.Sprintf("g%03d.example.com", i%300), Version: "v1", Kind: fmt.Sprintf("Scale%04d", i), Resource: fmt.Sprintf("scale%04ds", i), Namespaced: true, Custom: true}
		src[res] = []Object{&object{`{"metadata":{"name":"one","namespace":"scale","creationTimestamp":"2026-01-01T00:00:00Z"},"spec":{"field000":"a value"}}`}}
	}
	sc := NewScraper(set, Options{})
	format := expfmt.NewFormat(expfmt.TypeTextPlain)
	if err := sc.WriteTo(context.Background(), src, io.Discard, format); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	cpu := processCPU()
	for b.Loop() {
		if err := sc.WriteTo(context.Background(), src, io.Discard, format); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
}
