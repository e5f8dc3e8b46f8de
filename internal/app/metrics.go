package app

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the process-level metrics of `fieldwatch run`.
type metrics struct {
	changes     *prometheus.CounterVec
	byType      map[string]prometheus.Counter // changes, resolved once
	evalErrors  prometheus.Counter
	rules       prometheus.Gauge
	reloads     prometheus.Counter
	reloadFails prometheus.Counter
	leader      prometheus.Gauge
	leaseWrites prometheus.Histogram
	serverShard prometheus.Gauge

	impactScans    *prometheus.CounterVec
	impactObjects  prometheus.Counter
	impactSeconds  prometheus.Histogram
	impactFailures *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fieldwatch", Name: "changes_evaluated_total",
			Help: "Changes evaluated against the rules, by type.",
		}, []string{"type"}),
		evalErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "fieldwatch", Name: "rule_evaluation_errors_total",
			Help: "Rule evaluations that failed (a CEL runtime error, for example); the rule did not fire.",
		}),
		rules: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "fieldwatch", Name: "rules",
			Help: "Rules loaded.",
		}),
		reloads: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "fieldwatch", Name: "rules_reloads_total",
			Help: "Rules files reloaded successfully.",
		}),
		reloadFails: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "fieldwatch", Name: "rules_reload_failures_total",
			Help: "Rules files that failed to load on a reload; the previous rules kept running.",
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "fieldwatch", Name: "leader",
			Help: "1 when this replica watches and acts (the leader, or no leader election).",
		}),
		leaseWrites: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "fieldwatch", Name: "leader_lease_write_seconds",
			Help:    "Time a successful write of the leader election Lease took (a renewal, a takeover), client-side rate limiting included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}),
		serverShard: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "fieldwatch", Name: "shard_server_side",
			Help: "1 when the apiserver filters this shard's objects (ShardedListAndWatch), 0 when the client does.",
		}),
		impactScans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fieldwatch", Name: "crd_impact_scans_total",
			Help: "Scans of the custom resources a breaking CRD change hits, by where the objects came from (cache, list, or none when the new CRD could not be read).",
		}, []string{"source"}),
		impactObjects: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "fieldwatch", Name: "crd_impact_objects_scanned_total",
			Help: "Custom resources run through the new schema by CRD impact scans.",
		}),
		impactSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "fieldwatch", Name: "crd_impact_scan_seconds",
			Help:    "Duration of CRD impact scans, list included.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 8),
		}),
		impactFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fieldwatch", Name: "crd_impact_failures_total",
			Help: "CRD impact scans that stopped early or failed, by reason (limit, timeout, error); their payloads carry an impactError.",
		}, []string{"reason"}),
	}
	reg.MustRegister(m.changes, m.evalErrors, m.rules, m.reloads, m.reloadFails, m.leader, m.leaseWrites, m.serverShard,
		m.impactScans, m.impactObjects, m.impactSeconds, m.impactFailures)
	m.byType = map[string]prometheus.Counter{}
	for _, t := range []string{"created", "updated", "deleted"} {
		m.byType[t] = m.changes.WithLabelValues(t)
	}
	return m
}

// changeCounter returns the counter of changes of type t.
func (m *metrics) changeCounter(t string) prometheus.Counter {
	if c, ok := m.byType[t]; ok {
		return c
	}
	return m.changes.WithLabelValues(t)
}

func promhttpHandler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}
