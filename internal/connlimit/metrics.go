package connlimit

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the connection metrics of the HTTP servers (prefix
// fieldwatch_http_), by server.
type Metrics struct {
	open    *prometheus.GaugeVec
	max     *prometheus.GaugeVec
	dropped *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them on reg; a nil reg
// leaves them unregistered (tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const ns, sub = "fieldwatch", "http"
	m := &Metrics{
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "connections",
			Help: "Connections a server holds open, by server (http: /metrics and the probes, pprof, audit-webhook).",
		}, []string{"server"}),
		max: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "connections_max",
			Help: "The most connections a server holds open at once, by server (derived from the file descriptor limit).",
		}, []string{"server"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "connections_dropped_total",
			Help: "Connections a full server closed, by server and reason: evicted (the connection idle the longest, closed for a new one) or refused (a new connection closed at once: every open one was serving a request).",
		}, []string{"server", "reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.open, m.max, m.dropped)
	}
	return m
}

// serverMetrics are one server's series, resolved once.
type serverMetrics struct {
	open, max        prometheus.Gauge
	evicted, refused prometheus.Counter
}

func (m *Metrics) server(name string) *serverMetrics {
	return &serverMetrics{
		open:    m.open.WithLabelValues(name),
		max:     m.max.WithLabelValues(name),
		evicted: m.dropped.WithLabelValues(name, "evicted"),
		refused: m.dropped.WithLabelValues(name, "refused"),
	}
}
