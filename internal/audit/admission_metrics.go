package audit

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fieldwatch/fieldwatch/change"
)

// AdmissionMetrics are the Prometheus metrics of admission attribution
// (prefix fieldwatch_admission_), shared by the endpoint and the Index.
type AdmissionMetrics struct {
	requests  *prometheus.CounterVec
	refused   *prometheus.CounterVec
	reviews   *prometheus.CounterVec
	pending   prometheus.Gauge
	bytes     prometheus.Gauge
	evictions *prometheus.CounterVec
	matches   *prometheus.CounterVec
	forwards  *prometheus.CounterVec
	echoes    *prometheus.CounterVec

	// resolved once: the hot paths do no label lookups
	ok                                     prometheus.Counter
	refusedBy                              map[string]prometheus.Counter
	reviewBy                               map[string]prometheus.Counter
	evictedAge, evictedCount, evictedBytes prometheus.Counter
	matchExact, matchAmbiguous             prometheus.Counter
	peerOK, peerFailed                     prometheus.Counter
	echoConfirmed, echoConflict            prometheus.Counter
}

// The results of fieldwatch_admission_reviews_total besides recordOf's.
const (
	reviewMalformed = "malformed"  // not a review, or one of no request uid (400)
	reviewVersion   = "version"    // not admission.k8s.io/v1 (400)
	reviewBody      = "body_limit" // a body over the limit (413)
	reviewBusy      = "busy"       // the bodies being read take the limit (503)
	reviewPeer      = "peer"       // a record forwarded by a peer and held
	reviewDuplicate = "duplicate"  // a request uid already held
)

// NewAdmissionMetrics creates the metrics and registers them on reg; a
// nil reg leaves them unregistered (tests, benchmarks).
func NewAdmissionMetrics(reg prometheus.Registerer) *AdmissionMetrics {
	const ns, sub = "fieldwatch", "admission"
	m := &AdmissionMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "requests_total",
			Help: "Requests to the admission endpoint, by response code (200: allowed, every review it could read; 400: malformed or not admission.k8s.io/v1; 401, 403: credentials; 404: another path; 413: body too large; 503: too many bodies being read), peers' forwards included.",
		}, []string{"code"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "refused_total",
			Help: "Clients the admission endpoint refused, by reason: no_credentials (401), wrong_token, untrusted_certificate, certificate_name, not_a_peer (403).",
		}, []string{"reason"}),
		reviews: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "reviews_total",
			Help: "AdmissionReviews read, by result: kept (a write's record held for matching), dry_run, filtered (a resource no rule selects), not_a_write (CONNECT, a subresource's create), too_large (its user and names keep over 64 KiB), refused (the CRD guard refused the write), dropped (the queue to the index was full, or no replica runs), malformed, version, body_limit, busy; peer and duplicate for records forwarded by peers.",
		}, []string{"result"}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "pending",
			Help: "Admission records held for matching (not matched, not expired).",
		}),
		bytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "pending_bytes",
			Help: "Bytes the admission records held take at most.",
		}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "evictions_total",
			Help: "Admission records removed unmatched, by reason: age, count (the maximum of pending records) or bytes.",
		}, []string{"reason"}),
		matches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "matches_total",
			Help: "Watched changes attributed from admission records, by match: exact, or ambiguous (candidates by several identities, from admission or from admission and the audit stream).",
		}, []string{"match"}),
		forwards: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "peer_forwards_total",
			Help: "Batches of admission records forwarded to another replica's endpoint, by result: ok, or failed (the peer is down, refused them, or the forwarding queue was full).",
		}, []string{"result"}),
		echoes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "audit_echoes_total",
			Help: "With an audit source too: audit events of a change admission attributed before they came, by result: confirmed (the same identity; consumed), conflict (another identity; kept as a candidate).",
		}, []string{"result"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.refused, m.reviews, m.pending, m.bytes, m.evictions, m.matches, m.forwards, m.echoes)
	}
	m.ok = m.requests.WithLabelValues("200")
	m.refusedBy = map[string]prometheus.Counter{}
	for _, r := range refusedReasons {
		m.refusedBy[r] = m.refused.WithLabelValues(r)
	}
	m.reviewBy = map[string]prometheus.Counter{}
	for _, r := range []string{reviewKept, reviewDryRun, reviewFiltered, reviewNotWrite, reviewDropped, reviewTooLarge, reviewRefused,
		reviewMalformed, reviewVersion, reviewBody, reviewBusy, reviewPeer, reviewDuplicate} {
		m.reviewBy[r] = m.reviews.WithLabelValues(r)
	}
	m.evictedAge = m.evictions.WithLabelValues("age")
	m.evictedCount = m.evictions.WithLabelValues("count")
	m.evictedBytes = m.evictions.WithLabelValues("bytes")
	m.matchExact = m.matches.WithLabelValues(string(change.MatchExact))
	m.matchAmbiguous = m.matches.WithLabelValues(string(change.MatchAmbiguous))
	m.peerOK = m.forwards.WithLabelValues("ok")
	m.peerFailed = m.forwards.WithLabelValues("failed")
	m.echoConfirmed = m.echoes.WithLabelValues("confirmed")
	m.echoConflict = m.echoes.WithLabelValues("conflict")
	return m
}

func (m *AdmissionMetrics) code(code int) {
	if code == 200 {
		m.ok.Inc()
		return
	}
	m.requests.WithLabelValues(strconv.Itoa(code)).Inc()
}

func (m *AdmissionMetrics) review(result string) { m.reviewBy[result].Inc() }
