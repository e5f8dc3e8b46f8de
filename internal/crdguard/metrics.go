package crdguard

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
)

// guardMetrics are the guard's metrics.
type guardMetrics struct {
	reviews    *prometheus.CounterVec
	seconds    prometheus.Histogram
	incomplete *prometheus.CounterVec
	objects    *prometheus.CounterVec
}

func newGuardMetrics(reg prometheus.Registerer) *guardMetrics {
	m := &guardMetrics{
		reviews: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fieldwatch", Name: "crd_guard_reviews_total",
			Help: "Admission reviews of CRD updates and deletions, by operation and decision: allowed (nothing to say), warned, denied, " +
				"overridden (deny mode let it through for the fieldwatch.io/allow-breaking annotation).",
		}, []string{"operation", "decision"}),
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "fieldwatch", Name: "crd_guard_review_seconds",
			Help:    "Time the CRD guard took to answer a review.",
			Buckets: []float64{0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16},
		}),
		incomplete: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fieldwatch", Name: "crd_guard_incomplete_total",
			Help: "CRD reviews answered before their check finished, by reason: limit (--crd-impact-max-objects), timeout, busy (other reviews took the time), error.",
		}, []string{"reason"}),
		objects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fieldwatch", Name: "crd_guard_objects_read_total",
			Help: "Custom resources the CRD guard read, by where from: cache or list.",
		}, []string{"origin"}),
	}
	if reg != nil {
		reg.MustRegister(m.reviews, m.seconds, m.incomplete, m.objects)
	}
	return m
}

// observe counts one answered review.
func (m *guardMetrics) observe(req *admissionv1.AdmissionRequest, d *Decision, took time.Duration) {
	decision := "allowed"
	switch {
	case !d.Response.Allowed:
		decision = "denied"
	case d.Override != nil:
		decision = "overridden"
	case len(d.Response.Warnings) > 0:
		decision = "warned"
	}
	m.reviews.WithLabelValues(strings.ToLower(string(req.Operation)), decision).Inc()
	m.seconds.Observe(took.Seconds())
}
