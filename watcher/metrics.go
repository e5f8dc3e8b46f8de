package watcher

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"

	"github.com/fieldwatch/fieldwatch/change"
)

// metrics are the watcher's Prometheus metrics (namespace fieldwatch,
// subsystem watcher), registered on Config.Registerer.
type metrics struct {
	events          *prometheus.CounterVec
	listWatchErrors *prometheus.CounterVec
	discoveryFails  *prometheus.CounterVec
	handlerErrors   prometheus.Counter
	tombstones      *prometheus.CounterVec
	resources       prometheus.Gauge
	pendingKeys     prometheus.GaugeFunc
	pendingChanges  prometheus.GaugeFunc
	pendingBytes    prometheus.GaugeFunc
	backpressure    *prometheus.CounterVec
	cached          prometheus.GaugeFunc
	// discoveryRequests counts the HTTP requests discovery made (the
	// discovery client's transport counts them); discoveryPass times
	// each pass; requests counts the list and watch requests informers
	// made, by verb.
	discoveryRequests prometheus.CounterFunc
	discoveryPass     prometheus.Histogram
	requests          *prometheus.CounterVec
	queue             workqueue.MetricsProvider
}

func newMetrics(reg prometheus.Registerer, p *pending, cached func() float64, discoveryRequests func() float64) *metrics {
	const ns, sub = "fieldwatch", "watcher"
	m := &metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "events_total",
			Help: "Changes received from informers, by resource and type.",
		}, []string{"group", "version", "resource", "type"}),
		listWatchErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "list_watch_errors_total",
			Help: "Failed list or watch requests, by resource.",
		}, []string{"resource"}),
		discoveryFails: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "discovery_failures_total",
			Help: "Discovery passes in which a group version could not be discovered (for example an aggregated API whose service is down).",
		}, []string{"group_version"}),
		tombstones: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "relist_deletions_total",
			Help: "Deletions learned from a relist because the watch missed them (after a disconnection or 410 Gone), by resource.",
		}, []string{"resource"}),
		handlerErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "handler_errors_total",
			Help: "Changes the handler failed and that were re-queued.",
		}),
		resources: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "resources",
			Help: "Resources (group/version/resource) being watched.",
		}),
		pendingKeys: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "pending_objects",
			Help: "Objects with changes waiting for a worker.",
		}, func() float64 { return float64(p.len()) }),
		pendingChanges: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "pending_changes",
			Help: "Changes waiting for a worker (on a standby: for the leader's watermark), each write its own.",
		}, func() float64 { n, _ := p.totals(); return float64(n) }),
		pendingBytes: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "pending_bytes",
			Help: "Bytes the changes waiting for a worker hold.",
		}, func() float64 { _, b := p.totals(); return float64(b) }),
		backpressure: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "backpressure_seconds_total",
			Help: "Seconds an informer's watch stream waited because the waiting changes reached a bound of --queue-max-*, by resource.",
		}, []string{"resource"}),
		cached: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "cached_objects",
			Help: "Objects the informers of the selected resources cache.",
		}, cached),
		discoveryRequests: prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "discovery_requests_total",
			Help: "HTTP requests made by discovery passes (with aggregated discovery, two a pass: /api and /apis).",
		}, discoveryRequests),
		discoveryPass: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "discovery_duration_seconds",
			Help:    "How long a discovery pass takes, the informers it starts and stops included.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 12),
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "requests_total",
			Help: "List and watch requests the informers made, by verb (a watch-list, whose initial events replace the list, counts as a watch).",
		}, []string{"verb"}),
	}
	qm := &queueMetrics{
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: "workqueue", Name: "depth", Help: "Current depth of the work queue.",
		}, []string{"name"}),
		adds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: "workqueue", Name: "adds_total", Help: "Adds handled by the work queue.",
		}, []string{"name"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: "workqueue", Name: "queue_duration_seconds",
			Help: "How long an item waits in the work queue before a worker takes it.", Buckets: prometheus.ExponentialBuckets(1e-5, 4, 12),
		}, []string{"name"}),
		work: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: "workqueue", Name: "work_duration_seconds",
			Help: "How long handling an item takes.", Buckets: prometheus.ExponentialBuckets(1e-5, 4, 12),
		}, []string{"name"}),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: "workqueue", Name: "unfinished_work_seconds",
			Help: "Seconds of work in progress not yet observed by work_duration.",
		}, []string{"name"}),
		longest: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: "workqueue", Name: "longest_running_processor_seconds",
			Help: "Seconds the longest running worker has been handling its item.",
		}, []string{"name"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: "workqueue", Name: "retries_total", Help: "Items re-queued after a failure.",
		}, []string{"name"}),
	}
	m.queue = qm
	if reg != nil {
		reg.MustRegister(m.events, m.listWatchErrors, m.tombstones, m.discoveryFails, m.handlerErrors, m.resources, m.pendingKeys,
			m.pendingChanges, m.pendingBytes, m.backpressure, m.cached, m.discoveryRequests, m.discoveryPass, m.requests,
			qm.depth, qm.adds, qm.latency, qm.work, qm.unfinished, qm.longest, qm.retries)
	}
	return m
}

// forget deletes the series labelled with res: its events, list and
// watch errors and relist deletions.
func (m *metrics) forget(res change.Resource) {
	for _, t := range []change.Type{change.Created, change.Updated, change.Deleted} {
		m.events.DeleteLabelValues(res.Group, res.Version, res.Resource, string(t))
	}
	m.listWatchErrors.DeleteLabelValues(res.String())
	m.tombstones.DeleteLabelValues(res.String())
	m.backpressure.DeleteLabelValues(res.String())
}

// queueMetrics implements workqueue.MetricsProvider with Prometheus.
type queueMetrics struct {
	depth, unfinished, longest *prometheus.GaugeVec
	adds, retries              *prometheus.CounterVec
	latency, work              *prometheus.HistogramVec
}

var _ workqueue.MetricsProvider = &queueMetrics{}

// NewDepthMetric implements workqueue.MetricsProvider.
func (q *queueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return q.depth.WithLabelValues(name)
}

// NewAddsMetric implements workqueue.MetricsProvider.
func (q *queueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return q.adds.WithLabelValues(name)
}

// NewLatencyMetric implements workqueue.MetricsProvider.
func (q *queueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return q.latency.WithLabelValues(name)
}

// NewWorkDurationMetric implements workqueue.MetricsProvider.
func (q *queueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return q.work.WithLabelValues(name)
}

// NewUnfinishedWorkSecondsMetric implements workqueue.MetricsProvider.
func (q *queueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.unfinished.WithLabelValues(name)
}

// NewLongestRunningProcessorSecondsMetric implements workqueue.MetricsProvider.
func (q *queueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.longest.WithLabelValues(name)
}

// NewRetriesMetric implements workqueue.MetricsProvider.
func (q *queueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return q.retries.WithLabelValues(name)
}

// baselineMetrics are the metrics of the baseline and of the watermark
// (subsystem baseline).
type baselineMetrics struct {
	objects   prometheus.GaugeFunc
	lag       prometheus.GaugeFunc
	confirmed prometheus.Counter
	takeover  *prometheus.CounterVec
	missing   prometheus.Counter
	replays   *prometheus.CounterVec
	errors    prometheus.CounterFunc
	waiting   prometheus.GaugeFunc
}

func newBaselineMetrics(reg prometheus.Registerer, store *Store, lag func() float64) *baselineMetrics {
	const ns, sub = "fieldwatch", "baseline"
	m := &baselineMetrics{
		objects: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "objects",
			Help: "Objects recorded in the baseline (--state-dir): the state last handled, by this replica or, on a standby, by the leader.",
		}, func() float64 {
			if store == nil {
				return 0
			}
			return float64(store.count())
		}),
		lag: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "watermark_lag_seconds",
			Help: "How long the oldest change received has waited to be done: handled (leader) or confirmed by the leader's watermark (standby). 0 when none waits.",
		}, lag),
		confirmed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "confirmed_total",
			Help: "Changes a standby recorded as handled because the leader's watermark passed them.",
		}),
		takeover: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "takeover_changes_total",
			Help: "Changes fired when this replica took over: those the previous leader had not confirmed, by type.",
		}, []string{"type"}),
		missing: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "takeover_without_watermark_total",
			Help: "Informers that had no watermark of the previous leader at a takeover: all their changes fired.",
		}),
		replays: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "resumes_total",
			Help: "Informers started from the previous run's watermark, by outcome: replayed (the apiserver replayed every write since, one by one) or compared (it could not; the objects were compared with the baseline).",
		}, []string{"outcome"}),
		errors: prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "write_errors_total",
			Help: "Commits of the baseline that failed (a full or failing volume): their writes are kept, each object's last, and committed with the next batch.",
		}, func() float64 {
			if store == nil {
				return 0
			}
			return float64(store.failed())
		}),
		waiting: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "pending_writes",
			Help: "Writes of the baseline waiting to be committed: a batch's worth at most while commits succeed, up to one per object changed while they fail.",
		}, func() float64 {
			if store == nil {
				return 0
			}
			return float64(store.waiting())
		}),
	}
	if reg != nil {
		reg.MustRegister(m.objects, m.lag, m.confirmed, m.takeover, m.missing, m.replays, m.errors, m.waiting)
	}
	return m
}
