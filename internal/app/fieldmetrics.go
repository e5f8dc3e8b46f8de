package app

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/fieldmetrics"
	"github.com/fieldwatch/fieldwatch/rules"
	"github.com/fieldwatch/fieldwatch/watcher"
)

// serverMetrics names the listener of the metrics from fields.
const serverMetrics = "metrics"

// MetricsConfig turns on metrics from fields (docs/metrics-from-fields.md):
// series computed from the watcher's cache, as kube-state-metrics'
// custom-resource-state metrics are, served on their own listener.
type MetricsConfig struct {
	// File is a CustomResourceStateMetrics file (--metrics-config); the
	// rules files' metrics sections add to it.
	File string
	// Addr serves the series at /metrics when any are configured (""
	// serves none).
	Addr string
	// SeriesLimit and MaxLabelValueBytes bound the series (zero: the
	// defaults of fieldmetrics.Options).
	SeriesLimit        int
	MaxLabelValueBytes int
}

// fieldMetrics is the running metrics from fields: the configuration, the
// scraper that keeps their series, and the set, also read by the
// watcher's projection.
type fieldMetrics struct {
	scraper *fieldmetrics.Scraper
	metrics *fieldmetrics.Metrics
}

// loadMetrics loads the metrics configuration: nil when nothing defines a
// metric.
func (a *app) loadMetrics() (*fieldmetrics.Set, error) {
	set, err := fieldmetrics.Load(a.cfg.Metrics.File, a.cfg.RulesFiles...)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return set, nil
}

// startMetrics keeps the loaded set; with one, it registers the
// scraper's metrics.
func (a *app) startMetrics(set *fieldmetrics.Set) {
	a.metricSet.Store(set)
	if set.Empty() && a.cfg.Metrics.File == "" {
		return
	}
	m := fieldmetrics.NewMetrics(a.reg)
	a.fields = &fieldMetrics{
		metrics: m,
		scraper: fieldmetrics.NewScraper(set, fieldmetrics.Options{
			SeriesLimit:        a.cfg.Metrics.SeriesLimit,
			MaxLabelValueBytes: a.cfg.Metrics.MaxLabelValueBytes,
			Logger:             a.log.With("component", "metrics"),
			Metrics:            m,
		}),
	}
	a.log.Info("metrics from fields", "resources", len(set.Resources()), "families", len(set.Families()), "addr", a.cfg.Metrics.Addr)
}

// reloadMetrics replaces the metrics configuration (a reload). Metrics
// defined by a reload when none were at the start are not served: the
// listener starts with the process.
func (a *app) reloadMetrics(ms *fieldmetrics.Set) {
	a.metricSet.Store(ms)
	switch {
	case a.fields != nil:
		a.fields.scraper.SetSet(ms)
	case !ms.Empty():
		a.log.Warn("metrics defined by a reload are served after a restart: the process started without any")
	}
}

// projection is what the watcher caches of res: what the rules read and
// what the metrics read.
func (a *app) projection(set *rules.Set, ms *fieldmetrics.Set) func(change.Resource) change.Projection {
	return func(res change.Resource) change.Projection {
		p := set.Projection(res)
		if ms.Selects(res) {
			p = p.Union(ms.Projection(res)).Minimal()
		}
		return p
	}
}

// namespaces is where the watcher lists and watches res: every namespace
// when the metrics read it (their series cover all), otherwise the rules'.
func (a *app) namespaces(set *rules.Set, ms *fieldmetrics.Set) func(change.Resource) []string {
	return func(res change.Resource) []string {
		if ms.Selects(res) {
			return nil
		}
		return set.Namespaces(res)
	}
}

// cacheSelectors are the resources the watcher caches for the metrics.
func cacheSelectors(ms *fieldmetrics.Set) []change.Selector {
	if ms.Empty() {
		return nil
	}
	return ms.Resources()
}

// serveMetrics listens on Metrics.Addr for the series at /metrics. Only
// the replica that acts serves them (a standby answers with none), so
// that replicas do not double the series.
func (a *app) serveMetrics() (*http.Server, net.Listener, error) {
	ln, err := a.listen(serverMetrics, a.cfg.Metrics.Addr)
	if err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", a.fields.scraper.Handler(watcherSource{a}, func() bool {
		return a.watcher.Load() != nil && !a.standby.Load()
	}))
	a.log.Info("metrics from fields listening", "addr", ln.Addr().String(), "maxConnections", ln.Max())
	if a.cfg.MetricsReady != nil {
		a.cfg.MetricsReady(ln.Addr().String())
	}
	// A scrape of many series takes as long as writing them does.
	return a.httpServer(ln, mux, 2*time.Minute), ln, nil
}

// watcherSource gives the scraper the watcher's cache.
type watcherSource struct{ a *app }

func (s watcherSource) Snapshots(want func(change.Resource) bool) []fieldmetrics.Snapshot {
	w := s.a.watcher.Load()
	if w == nil {
		return nil
	}
	var out []fieldmetrics.Snapshot
	for _, snap := range w.Snapshots(want) {
		objs := snap.Objects
		out = append(out, fieldmetrics.Snapshot{Resource: snap.Resource, Objects: func(yield func(fieldmetrics.Object) bool) {
			for _, o := range objs {
				if !yield(o) {
					return
				}
			}
		}})
	}
	return out
}

var _ fieldmetrics.Object = (*watcher.Object)(nil)
