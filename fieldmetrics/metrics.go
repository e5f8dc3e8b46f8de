package fieldmetrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are a Scraper's own metrics: what it exposes, skips and fails to
// evaluate. Their metric label is a metric family's name, so their series
// are bounded by the configuration.
type Metrics struct {
	series        *prometheus.GaugeVec
	skips         *prometheus.CounterVec
	errors        *prometheus.CounterVec
	objects       prometheus.Gauge
	unmatched     prometheus.Gauge
	scrapeSeconds prometheus.Histogram
}

// NewMetrics registers a Scraper's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		series: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "fieldwatch", Subsystem: "field_metrics", Name: "series",
			Help: "Series of each metric family (from fields) the last scrape exposed.",
		}, []string{"metric"}),
		skips: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fieldwatch", Subsystem: "field_metrics", Name: "series_skipped_total",
			Help: "Series of a metric family (from fields) left out, by reason: limit (the family's series limit) or label_value_too_long.",
		}, []string{"metric", "reason"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fieldwatch", Subsystem: "field_metrics", Name: "evaluation_errors_total",
			Help: "Errors evaluating a metric family (from fields) on an object: a value that is not a number, a path that does not resolve; counted once per version of the object.",
		}, []string{"metric"}),
		objects: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "fieldwatch", Subsystem: "field_metrics", Name: "objects",
			Help: "Objects whose series the last scrape of the metrics from fields computed or kept.",
		}),
		unmatched: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "fieldwatch", Subsystem: "field_metrics", Name: "unmatched_resources",
			Help: "Resources of the metrics configuration that matched no resource the cluster serves (or none synced yet) at the last scrape.",
		}),
		scrapeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "fieldwatch", Subsystem: "field_metrics", Name: "scrape_seconds",
			Help:    "Time to compute and write the metrics from fields for one scrape.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
		}),
	}
	if reg != nil {
		reg.MustRegister(m.series, m.skips, m.errors, m.objects, m.unmatched, m.scrapeSeconds)
	}
	return m
}

// reset drops the per-family series of families no longer configured.
func (m *Metrics) reset(*Set) {
	m.series.Reset()
}

func (m *Metrics) skipped(f *Family, reason string, n int) {
	m.skips.WithLabelValues(f.Name, reason).Add(float64(n))
}
