package fieldmetrics

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fieldwatch/fieldwatch/change"
)

// object is a test Object: its JSON, decoded at each Map.
type object struct{ json string }

func (o *object) Map() map[string]any {
	m, err := decodeJSON(o.json)
	if err != nil {
		panic(err)
	}
	return m
}

// source is a Source of fixed objects, by resource.
type source map[change.Resource][]Object

func (s source) Snapshots(want func(change.Resource) bool) []Snapshot {
	var out []Snapshot
	for r, objs := range s {
		if want(r) {
			out = append(out, Snapshot{Resource: r, Objects: func(yield func(Object) bool) {
				for _, o := range objs {
					if !yield(o) {
						return
					}
				}
			}})
		}
	}
	return out
}

var widgets = change.Resource{Group: "example.com", Version: "v1", Kind: "Widget", Resource: "widgets", Namespaced: true, Custom: true}

const widgetCRS = `
kind: CustomResourceStateMetrics
spec:
  resources:
    - groupVersionKind: {group: example.com, version: v1, kind: Widget}
      labelsFromPath:
        name: [metadata, name]
        namespace: [metadata, namespace]
      metrics:
        - name: widget_size
          help: The size of a widget.
          each: {type: Gauge, gauge: {path: [spec, size]}}
        - name: widget_info
          each: {type: Info, info: {labelsFromPath: {color: [spec, color], note: [spec, note]}}}
`

func widget(name string, size int, color string) Object {
	return &object{fmt.Sprintf(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":%q,"namespace":"shop"},"spec":{"size":%d,"color":%q}}`, name, size, color)}
}

func scrapeText(t *testing.T, sc *Scraper, src Source, format expfmt.Format) string {
	t.Helper()
	var b bytes.Buffer
	if err := sc.WriteTo(context.Background(), src, &b, format); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func mustParse(t *testing.T, crs string) *Set {
	t.Helper()
	set, err := Parse("crs.yaml", []byte(crs))
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// TestScrapeFollowsObjects: a changed object's series change, a deleted
// object's and a deleted resource's go.
func TestScrapeFollowsObjects(t *testing.T) {
	sc := NewScraper(mustParse(t, widgetCRS), Options{})
	text := expfmt.NewFormat(expfmt.TypeTextPlain)
	a, b := widget("a", 1, "red"), widget("b", 2, "blue")
	src := source{widgets: {a, b}}
	got := scrapeText(t, sc, src, text)
	want := `# HELP kube_customresource_widget_info 
# TYPE kube_customresource_widget_info gauge
kube_customresource_widget_info{color="blue",customresource_group="example.com",customresource_kind="Widget",customresource_version="v1",name="b",namespace="shop"} 1
kube_customresource_widget_info{color="red",customresource_group="example.com",customresource_kind="Widget",customresource_version="v1",name="a",namespace="shop"} 1
# HELP kube_customresource_widget_size The size of a widget.
# TYPE kube_customresource_widget_size gauge
kube_customresource_widget_size{customresource_group="example.com",customresource_kind="Widget",customresource_version="v1",name="a",namespace="shop"} 1
kube_customresource_widget_size{customresource_group="example.com",customresource_kind="Widget",customresource_version="v1",name="b",namespace="shop"} 2
`
	if sortLines(got) != sortLines(want) {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	src[widgets] = []Object{widget("a", 5, "red")}
	got = scrapeText(t, sc, src, text)
	if !strings.Contains(got, `name="a",namespace="shop"} 5`) || strings.Contains(got, `name="b"`) {
		t.Errorf("after a change and a deletion:\n%s", got)
	}
	delete(src, widgets)
	if got = scrapeText(t, sc, src, text); got != "" {
		t.Errorf("after the resource went:\n%s", got)
	}
}

func sortLines(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	// Keep the headers where they are; sort the samples between them.
	var out, block []string
	flush := func() {
		sortStrings(block)
		out = append(out, block...)
		block = nil
	}
	for _, l := range lines {
		if strings.HasPrefix(l, "#") {
			flush()
			out = append(out, l)
			continue
		}
		block = append(block, l)
	}
	flush()
	return strings.Join(out, "\n")
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// TestScrapeBounds: a family's series stop at its limit and label values
// past their bound are skipped, both counted.
func TestScrapeBounds(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	sc := NewScraper(mustParse(t, widgetCRS), Options{SeriesLimit: 3, MaxLabelValueBytes: 100, Metrics: m})
	var objs []Object
	for i := range 5 {
		objs = append(objs, widget(fmt.Sprintf("w%d", i), i, "red"))
	}
	huge := &object{fmt.Sprintf(`{"metadata":{"name":"huge","namespace":"shop"},"spec":{"size":1,"color":%q}}`, strings.Repeat("x", 1<<20))}
	objs = append(objs, huge)
	src := source{widgets: objs}
	got := scrapeText(t, sc, src, expfmt.NewFormat(expfmt.TypeTextPlain))
	if n := strings.Count(got, "kube_customresource_widget_size{"); n != 3 {
		t.Errorf("%d widget_size series, want the limit, 3:\n%s", n, got)
	}
	if strings.Contains(got, "xxxx") {
		t.Error("a 1 MiB label value was exposed")
	}
	if v := testutil.ToFloat64(m.skips.WithLabelValues("kube_customresource_widget_size", SkipLimit)); v != 3 {
		t.Errorf("widget_size skipped at the limit: %v, want 3", v)
	}
	if v := testutil.ToFloat64(m.skips.WithLabelValues("kube_customresource_widget_info", SkipLabelValue)); v != 1 {
		t.Errorf("widget_info skipped for its label: %v, want 1", v)
	}
}

// TestHandlerFormats: the handler's text and OpenMetrics bodies parse,
// and a family of many pieces has one TYPE line and every series; the
// Collector gives the same series through a Registry.
func TestHandlerFormats(t *testing.T) {
	var objs []Object
	for i := range 3 * chunkSize {
		objs = append(objs, widget(fmt.Sprintf("w%d", i), i, "red"))
	}
	src := source{widgets: objs}
	sc := NewScraper(mustParse(t, widgetCRS), Options{})
	srv := httptest.NewServer(sc.Handler(src, nil))
	defer srv.Close()

	for _, accept := range []string{"text/plain", "application/openmetrics-text; version=1.0.0"} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		req.Header.Set("Accept", accept)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body bytes.Buffer
		_, _ = body.ReadFrom(resp.Body)
		_ = resp.Body.Close()
		if n := strings.Count(body.String(), "# TYPE kube_customresource_widget_size"); n != 1 {
			t.Errorf("%s: %d TYPE lines for widget_size", accept, n)
		}
		if n := strings.Count(body.String(), "kube_customresource_widget_size{"); n != 3*chunkSize {
			t.Errorf("%s: %d widget_size series, want %d", accept, n, 3*chunkSize)
		}
		if strings.HasPrefix(accept, "application/openmetrics") && !strings.HasSuffix(body.String(), "# EOF\n") {
			t.Errorf("OpenMetrics body does not end with # EOF")
		}
		if accept == "text/plain" {
			p := expfmt.NewTextParser(model.LegacyValidation)
			fams, err := p.TextToMetricFamilies(&body)
			if err != nil {
				t.Fatalf("text body does not parse: %v", err)
			}
			if n := len(fams["kube_customresource_widget_size"].GetMetric()); n != 3*chunkSize {
				t.Errorf("parsed %d widget_size series", n)
			}
		}
	}

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(sc.Collector(src))
	n, err := testutil.GatherAndCount(reg, "kube_customresource_widget_size")
	if err != nil || n != 3*chunkSize {
		t.Errorf("Collector: %d widget_size series, %v", n, err)
	}
}

// TestStandbyServesNothing: a replica that does not lead answers with no
// series.
func TestStandbyServesNothing(t *testing.T) {
	sc := NewScraper(mustParse(t, widgetCRS), Options{})
	rec := httptest.NewRecorder()
	sc.Handler(source{widgets: {widget("a", 1, "red")}}, func() bool { return false }).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK || rec.Body.Len() != 0 {
		t.Errorf("standby: %d %q", rec.Code, rec.Body.String())
	}
}
