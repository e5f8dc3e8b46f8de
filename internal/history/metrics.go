package history

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the history's series, shared by a store (the disk full, a
// file set aside) and its Recorder. A nil *Metrics counts nothing.
type Metrics struct {
	entries    *prometheus.CounterVec
	written    prometheus.Counter
	duplicate  prometheus.Counter
	dropped    prometheus.Counter
	failed     prometheus.Counter
	invalid    prometheus.Counter
	removed    *prometheus.CounterVec
	errors     *prometheus.CounterVec
	stored     prometheus.Gauge
	bytes      prometheus.Gauge
	queued     prometheus.Gauge
	writeTime  prometheus.Histogram
	errFull    prometheus.Counter
	errCorrupt prometheus.Counter
	errOther   prometheus.Counter
	// errUnavailable counts writes that could not reach the database.
	errUnavailable prometheus.Counter
	removedAge     prometheus.Counter
	removedSize    prometheus.Counter
	cpu            prometheus.Counter
	trail          *prometheus.CounterVec
}

// NewMetrics returns the history's series, registered on reg (none when
// reg is nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		entries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fieldwatch", Subsystem: "history", Name: "entries_total",
			Help: "Payloads given to the history, by result: written; duplicate (an entry of that id was there); dropped (the queue was full: the store was slow or failing); failed (the store refused them after retries); invalid (not a payload).",
		}, []string{"result"}),
		removed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fieldwatch", Subsystem: "history", Name: "removed_total",
			Help: "Entries removed from the history, oldest first, by the bound that removed them (age: --history-max-age; size: --history-max-bytes).",
		}, []string{"reason"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fieldwatch", Subsystem: "history", Name: "write_errors_total",
			Help: "Failed writes of the history, by kind (full: the disk or the database; corrupt: the file was set aside and a new one started; unavailable: the database could not be reached, retried until it can; other).",
		}, []string{"error"}),
		stored: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "fieldwatch", Subsystem: "history", Name: "entries",
			Help: "Entries the history holds.",
		}),
		bytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "fieldwatch", Subsystem: "history", Name: "bytes",
			Help: "Bytes the history takes, as --history-max-bytes counts them.",
		}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "fieldwatch", Subsystem: "history", Name: "queued",
			Help: "Payloads waiting to be written to the history.",
		}),
		writeTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "fieldwatch", Subsystem: "history", Name: "write_seconds",
			Help:    "Duration of one batch write of the history.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8),
		}),
		cpu: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "fieldwatch", Subsystem: "history", Name: "cpu_seconds_total",
			Help: "CPU time of the history's writer (reading payloads, writing them, applying the bounds), measured on the OS thread it has to itself; over entries_total{result=\"written\"}, what an entry costs (the collector's share of its garbage aside). Linux only.",
		}),
		trail: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fieldwatch", Subsystem: "history", Name: "trail_records_total",
			Help: "Records the history's writer appended to its trail (docs/trail.md), by kind (checkpoint: signed; gap: payloads not kept) and result (written; failed: tried again later).",
		}, []string{"kind", "result"}),
	}
	m.written = m.entries.WithLabelValues("written")
	m.duplicate = m.entries.WithLabelValues("duplicate")
	m.dropped = m.entries.WithLabelValues("dropped")
	m.failed = m.entries.WithLabelValues("failed")
	m.invalid = m.entries.WithLabelValues("invalid")
	m.errFull = m.errors.WithLabelValues("full")
	m.errCorrupt = m.errors.WithLabelValues("corrupt")
	m.errOther = m.errors.WithLabelValues("other")
	m.errUnavailable = m.errors.WithLabelValues("unavailable")
	m.removedAge = m.removed.WithLabelValues("age")
	m.removedSize = m.removed.WithLabelValues("size")
	if reg != nil {
		reg.MustRegister(m.entries, m.removed, m.errors, m.stored, m.bytes, m.queued, m.writeTime, m.cpu, m.trail)
	}
	return m
}

// full counts a full disk or database.
func (m *Metrics) full() {
	if m != nil {
		m.errFull.Inc()
	}
}

// reset counts a corrupt file set aside.
func (m *Metrics) reset() {
	if m != nil {
		m.errCorrupt.Inc()
	}
}
