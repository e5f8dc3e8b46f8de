package app

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/client-go/rest"

	"github.com/fieldwatch/fieldwatch/action"
	"github.com/fieldwatch/fieldwatch/fieldmetrics"
	"github.com/fieldwatch/fieldwatch/internal/audit"
	"github.com/fieldwatch/fieldwatch/internal/connlimit"
	"github.com/fieldwatch/fieldwatch/internal/crdguard"
	"github.com/fieldwatch/fieldwatch/internal/history"
	"github.com/fieldwatch/fieldwatch/internal/history/web"
	"github.com/fieldwatch/fieldwatch/watcher"
)

var updateDocs = flag.Bool("update", false, "rewrite docs/metrics.md")

// metricsDoc is the metrics reference TestMetricsReference generates.
const metricsDoc = "../../docs/metrics.md"

// metricSection is one package's share of the metrics: what registers
// them in `fieldwatch run`, and when.
type metricSection struct {
	pkg, about string
	register   func(t *testing.T, reg prometheus.Registerer)
}

// metricSections register every family `fieldwatch run` can register, as
// newApp and the pipeline it starts do, each on its own.
var metricSections = []metricSection{
	{"internal/app", "`fieldwatch run` itself: changes evaluated, rules, leader election, sharding, CRD impact scans.",
		func(t *testing.T, reg prometheus.Registerer) { newMetrics(reg) }},
	{"watcher", "Discovery, the informers, the changes waiting for a worker (each write its own), the work queue, and the restart baseline with its watermarks (`--state-dir`, `--leader-elect`). A resource's `events_total` series come with its first event and go with its informer.",
		func(t *testing.T, reg prometheus.Registerer) {
			_, err := watcher.New(&rest.Config{Host: "https://127.0.0.1:1"}, watcher.Config{
				Handler:    watcher.HandlerFunc(func(context.Context, *watcher.Change) error { return nil }),
				Registerer: reg,
			})
			if err != nil {
				t.Fatal(err)
			}
		}},
	{"internal/audit", "Attribution, with an audit source (`--audit-webhook-addr` or `--audit-log`); [attribution.md](attribution.md#metrics) says how to read them.",
		func(t *testing.T, reg prometheus.Registerer) { audit.NewMetrics(reg) }},
	{"internal/audit (admission)", "Attribution from fieldwatch's admission webhook (`--admission-addr`); [attribution.md](attribution.md) says how to read them.",
		func(t *testing.T, reg prometheus.Registerer) { audit.NewAdmissionMetrics(reg) }},
	{"action", "Delivery, per rule and action (`index` is the action's position in the rule).",
		func(t *testing.T, reg prometheus.Registerer) {
			d, err := action.New(action.Options{Registerer: reg})
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
		}},
	{"internal/history", "The history, when there is one (`--state-dir` or `--history-dsn`, unless `--history=false`); [history.md](history.md#metrics) says how to read them.",
		func(t *testing.T, reg prometheus.Registerer) { history.NewMetrics(reg) }},
	{"internal/history (trail verification)", "The verification of the history's trail in place (`--history-verify-interval`, with a history); [trail.md](trail.md) says what it finds.",
		func(t *testing.T, reg prometheus.Registerer) {
			history.NewVerifier(nil, history.VerifierOptions{Registerer: reg})
		}},
	{"internal/history/web", "The history's API and pages.",
		func(t *testing.T, reg prometheus.Registerer) {
			if _, err := web.New(web.Options{Rest: &rest.Config{Host: "https://127.0.0.1:1"}, Registerer: reg}); err != nil {
				t.Fatal(err)
			}
		}},
	{"internal/crdguard", "The CRD guard at admission (`--crd-guard warn|deny`). Its storage-version ledger adds the gauge `fieldwatch_crd_stored_objects{crd,version}`: the objects of each CRD fieldwatch caches, by the version they were last written at (`unknown` where it cannot tell).",
		func(t *testing.T, reg prometheus.Registerer) {
			if _, err := crdguard.New(crdguard.Options{Mode: crdguard.Warn, Source: crdguard.CacheSource{Cache: func() crdguard.Cache { return nil }}, Registerer: reg}); err != nil {
				t.Fatal(err)
			}
		}},
	{"fieldmetrics", "Metrics from fields (`--metrics-config`, rules files' `metrics:` sections; [metrics-from-fields.md](metrics-from-fields.md)): what their scrapes expose, skip and fail to evaluate. The series themselves are served on `--metrics-addr`.",
		func(t *testing.T, reg prometheus.Registerer) { fieldmetrics.NewMetrics(reg) }},
	{"internal/connlimit", "Every HTTP server's connections (`--http-addr`, `--pprof-addr`, the audit receiver) and their cap.",
		func(t *testing.T, reg prometheus.Registerer) { connlimit.NewMetrics(reg) }},
}

// TestMetricsReference holds docs/metrics.md to the metric families the
// packages register: their names, types, labels and help. With -update it
// rewrites the file.
func TestMetricsReference(t *testing.T) {
	got := metricsReference(t)
	if *updateDocs {
		if err := os.WriteFile(metricsDoc, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatalf("%v: generate it with go test ./internal/app -run TestMetricsReference -update", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("docs/metrics.md is not what the packages register: regenerate it with\n" +
			"  go test ./internal/app -run TestMetricsReference -update")
	}
}

// metricFamily is one row of the reference.
type metricFamily struct {
	name, kind, help string
	labels           []string
}

// metricsReference renders docs/metrics.md.
func metricsReference(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	b.WriteString("# Metrics\n\n" +
		"<!-- Generated by `go test ./internal/app -run TestMetricsReference -update` from the\n" +
		"metric families the packages register; TestMetricsReference fails when this file is\n" +
		"stale. Do not edit. -->\n\n" +
		"`fieldwatch run` serves these on `--http-addr` at `/metrics`, in Prometheus' text\n" +
		"format, beside the Go runtime's (`go_*`) and the process's (`process_*`) collectors.\n" +
		"A family with labels has series only for the label values seen so far.\n")
	reg := prometheus.NewRegistry() // one registry: a name registered twice fails
	for _, s := range metricSections {
		rec := &recordingRegisterer{reg: reg}
		s.register(t, rec)
		fmt.Fprintf(&b, "\n## %s\n\n%s\n\n", s.pkg, s.about)
		b.WriteString("| Metric | Type | Labels | Description |\n|---|---|---|---|\n")
		for _, f := range families(t, rec.collectors) {
			labels := "`" + strings.Join(f.labels, "`, `") + "`"
			if len(f.labels) == 0 {
				labels = ""
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", f.name, f.kind, labels, strings.ReplaceAll(f.help, "|", `\|`))
		}
	}
	return b.Bytes()
}

// recordingRegisterer registers on reg and keeps what it registered.
type recordingRegisterer struct {
	reg        *prometheus.Registry
	collectors []prometheus.Collector
}

var _ prometheus.Registerer = &recordingRegisterer{}

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	if err := r.reg.Register(c); err != nil {
		return err
	}
	r.collectors = append(r.collectors, c)
	return nil
}

func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r *recordingRegisterer) Unregister(c prometheus.Collector) bool { return r.reg.Unregister(c) }

// descPattern reads a Desc's String, the one place client_golang shows a
// family's name, help and variable labels.
var descPattern = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*"), unit: "(?:[^"\\]|\\.)*", constLabels: \{(.*)\}, variableLabels: \{(.*)\}\}$`)

// families describes the collectors' families, sorted by name.
func families(t *testing.T, cs []prometheus.Collector) []metricFamily {
	t.Helper()
	var out []metricFamily
	for _, c := range cs {
		kinds := collectedKinds(c)
		descs := make(chan *prometheus.Desc, 16)
		go func() { c.Describe(descs); close(descs) }()
		for d := range descs {
			m := descPattern.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read %s", d)
			}
			name, err1 := strconv.Unquote(m[1])
			help, err2 := strconv.Unquote(m[2])
			if err1 != nil || err2 != nil {
				t.Fatalf("cannot read %s", d)
			}
			f := metricFamily{name: name, help: help, kind: vecKind(c)}
			if f.kind == "" {
				f.kind = kinds[name]
			}
			if f.kind == "" {
				t.Fatalf("%s: cannot tell its type", name)
			}
			for _, l := range strings.Split(m[4], ",") {
				if l = strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"); l != "" {
					f.labels = append(f.labels, l)
				}
			}
			out = append(out, f)
		}
	}
	slices.SortFunc(out, func(a, b metricFamily) int { return strings.Compare(a.name, b.name) })
	return out
}

// vecKind is the type of a vector's family, which has no sample until a
// label value is used; "" for other collectors.
func vecKind(c prometheus.Collector) string {
	switch c.(type) {
	case *prometheus.CounterVec:
		return "counter"
	case *prometheus.GaugeVec:
		return "gauge"
	case *prometheus.HistogramVec:
		return "histogram"
	case *prometheus.SummaryVec:
		return "summary"
	}
	return ""
}

// collectedKinds is the type of each family c has a sample of.
func collectedKinds(c prometheus.Collector) map[string]string {
	ms := make(chan prometheus.Metric, 16)
	go func() { c.Collect(ms); close(ms) }()
	kinds := map[string]string{}
	for m := range ms {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			continue
		}
		name := descPattern.FindStringSubmatch(m.Desc().String())
		if name == nil {
			continue
		}
		n, _ := strconv.Unquote(name[1])
		switch {
		case pb.Counter != nil:
			kinds[n] = "counter"
		case pb.Gauge != nil:
			kinds[n] = "gauge"
		case pb.Histogram != nil:
			kinds[n] = "histogram"
		case pb.Summary != nil:
			kinds[n] = "summary"
		}
	}
	return kinds
}
