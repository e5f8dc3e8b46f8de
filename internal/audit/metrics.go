package audit

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fieldwatch/fieldwatch/change"
)

// Metrics are the Prometheus metrics of attribution (prefix
// fieldwatch_audit_), shared by the sources, the Index and the Attributor.
type Metrics struct {
	events          *prometheus.CounterVec
	decodeErrors    *prometheus.CounterVec
	webhookRequests *prometheus.CounterVec
	webhookRefused  *prometheus.CounterVec
	held            prometheus.Gauge
	heldBytes       prometheus.Gauge
	evictions       *prometheus.CounterVec
	matches         *prometheus.CounterVec
	unmatched       prometheus.Counter
	waiting         prometheus.Gauge
	wait            prometheus.Histogram
	logReopens      *prometheus.CounterVec
	logSkipped      prometheus.Counter
	logOpenFailures *prometheus.CounterVec

	// resolved once: the hot paths do no label lookups
	evictedAge, evictedCount             prometheus.Counter
	matchExact, matchWindow, matchAmbig  prometheus.Counter
	webhookOK                            prometheus.Counter
	refusedBy                            map[string]prometheus.Counter
	evictedBytes                         prometheus.Counter
	indexedBy, ignoredBy, duplicateBy    map[string]prometheus.Counter
	tooLargeBy                           map[string]prometheus.Counter
	filteredBy, failedBy, decodeErrorsBy map[string]prometheus.Counter
}

// The sources, as the source label names them.
const (
	SourceWebhook = "webhook"
	SourceLog     = "log"
)

// NewMetrics creates the metrics and registers them on reg; a nil reg
// leaves them unregistered (tests, benchmarks).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const ns, sub = "fieldwatch", "audit"
	m := &Metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "events_total",
			Help: "Audit events decoded, by source and result: indexed (a successful write held for matching), ignored (another stage, a read, a dry run), failed (a write that did not succeed), filtered (a resource no rule watches), duplicate (an auditID already held), too_large (its user, groups and names take more than 64 KiB).",
		}, []string{"source", "result"}),
		decodeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "decode_errors_total",
			Help: "Audit event lists or log lines that could not be decoded, by source.",
		}, []string{"source"}),
		webhookRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "webhook_requests_total",
			Help: "Requests to the audit webhook, by response code (401: no credentials, 403: wrong credentials, 413: body, event or the events kept too large, 429: too many at once, 503: standing by).",
		}, []string{"code"}),
		webhookRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "webhook_refused_total",
			Help: "Clients the audit webhook refused, by reason: no_credentials (401), wrong_token, untrusted_certificate (not signed by the client CA for client authentication), certificate_name (signed by it, naming none of the client names) (403).",
		}, []string{"reason"}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "index_events",
			Help: "Audit events held in the index for matching.",
		}),
		heldBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "index_bytes",
			Help: "Bytes the audit events in the index take at most (held ones, and matched ones kept to recognise a redelivery).",
		}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "index_evictions_total",
			Help: "Audit events removed from the index unmatched, by reason: age (older than the maximum age), count (the index held its maximum of events) or bytes (its maximum of bytes).",
		}, []string{"reason"}),
		matches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "matches_total",
			Help: "Watched changes attributed, by match: exact, window or ambiguous.",
		}, []string{"match"}),
		unmatched: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "unmatched_total",
			Help: "Watched changes for which no audit event arrived within the wait bound (or, for changes learned from a list, none was held).",
		}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "waiting_changes",
			Help: "Watched changes waiting for their audit event.",
		}),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "wait_seconds",
			Help:    "How long a watched change waited for its audit event (0 when it was already held).",
			Buckets: []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10},
		}),
		logReopens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "log_reopens_total",
			Help: "Times the audit log follower started over, by reason: rotated (the path names a new file) or truncated.",
		}, []string{"reason"}),
		logSkipped: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "log_lines_skipped_total",
			Help: "Audit log lines skipped because they were longer than the line limit or cut by a rotation.",
		}),
		logOpenFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "log_open_failures_total",
			Help: "Times the audit log path could not be followed, by reason: not_regular (a FIFO, a device, a directory: refused, never read) or error (it could not be looked at or opened). Each is counted once until a file is followed; the path is looked at again every poll interval.",
		}, []string{"reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.events, m.decodeErrors, m.webhookRequests, m.webhookRefused, m.held, m.heldBytes, m.evictions,
			m.matches, m.unmatched, m.waiting, m.wait, m.logReopens, m.logSkipped, m.logOpenFailures)
	}
	m.evictedAge = m.evictions.WithLabelValues("age")
	m.evictedCount = m.evictions.WithLabelValues("count")
	m.evictedBytes = m.evictions.WithLabelValues("bytes")
	m.matchExact = m.matches.WithLabelValues(string(change.MatchExact))
	m.matchWindow = m.matches.WithLabelValues(string(change.MatchWindow))
	m.matchAmbig = m.matches.WithLabelValues(string(change.MatchAmbiguous))
	m.webhookOK = m.webhookRequests.WithLabelValues("200")
	m.refusedBy = map[string]prometheus.Counter{}
	for _, r := range refusedReasons {
		m.refusedBy[r] = m.webhookRefused.WithLabelValues(r)
	}
	m.indexedBy, m.ignoredBy, m.duplicateBy = map[string]prometheus.Counter{}, map[string]prometheus.Counter{}, map[string]prometheus.Counter{}
	m.tooLargeBy = map[string]prometheus.Counter{}
	m.filteredBy, m.failedBy, m.decodeErrorsBy = map[string]prometheus.Counter{}, map[string]prometheus.Counter{}, map[string]prometheus.Counter{}
	for _, src := range []string{SourceWebhook, SourceLog} {
		m.indexedBy[src] = m.events.WithLabelValues(src, "indexed")
		m.ignoredBy[src] = m.events.WithLabelValues(src, "ignored")
		m.duplicateBy[src] = m.events.WithLabelValues(src, "duplicate")
		m.filteredBy[src] = m.events.WithLabelValues(src, "filtered")
		m.failedBy[src] = m.events.WithLabelValues(src, "failed")
		m.tooLargeBy[src] = m.events.WithLabelValues(src, "too_large")
		m.decodeErrorsBy[src] = m.decodeErrors.WithLabelValues(src)
	}
	return m
}

func (m *Metrics) webhookCode(code int) {
	if code == 200 {
		m.webhookOK.Inc()
		return
	}
	m.webhookRequests.WithLabelValues(strconv.Itoa(code)).Inc()
}
