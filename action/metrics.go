package action

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the dispatcher's Prometheus collectors. Every series carries
// the labels rule, action (the action's kind) and index (its position in
// the rule's actions list, so that two webhooks of one rule stay apart).
type metrics struct {
	fired        *prometheus.CounterVec
	delivered    *prometheus.CounterVec
	failed       *prometheus.CounterVec
	retried      *prometheus.CounterVec
	deadLettered *prometheus.CounterVec
	handedOver   *prometheus.CounterVec
	messages     *prometheus.CounterVec
	depth        *prometheus.GaugeVec
	grouped      *prometheus.GaugeVec
	latency      *prometheus.HistogramVec
}

var metricLabels = []string{"rule", "action", "index"}

// latencyBuckets span a local receiver (sub-millisecond) to a firing that
// waited out several retries.
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fieldwatch", Subsystem: "action", Name: name, Help: help,
		}, metricLabels)
	}
	m := &metrics{
		fired:        counter("fired_total", "Firings handed to the action."),
		delivered:    counter("delivered_total", "Firings the action delivered."),
		failed:       counter("failed_total", "Delivery attempts that failed (each attempt counts)."),
		retried:      counter("retried_total", "Delivery attempts retried after a failure."),
		deadLettered: counter("dead_lettered_total", "Firings that failed for good and went to the dead-letter file."),
		handedOver:   counter("handed_over_total", "Firings left undelivered because this replica stopped leading (Abort): the next leader delivers them."),
		messages:     counter("messages_total", "Messages the slack, teams, pagerduty and email actions sent, each for a group of firings."),
		grouped: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "fieldwatch", Subsystem: "action", Name: "grouped",
			Help: "Firings of the slack, teams, pagerduty and email actions waiting in groups to be sent.",
		}, metricLabels),
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "fieldwatch", Subsystem: "action", Name: "queue_depth",
			Help: "Firings waiting in the action's queue.",
		}, metricLabels),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "fieldwatch", Subsystem: "action", Name: "delivery_seconds",
			Help:    "Time from Deliver to a successful delivery, queueing and retries included.",
			Buckets: latencyBuckets,
		}, metricLabels),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	m.fired, err = register(reg, m.fired)
	if err == nil {
		m.delivered, err = register(reg, m.delivered)
	}
	if err == nil {
		m.failed, err = register(reg, m.failed)
	}
	if err == nil {
		m.retried, err = register(reg, m.retried)
	}
	if err == nil {
		m.deadLettered, err = register(reg, m.deadLettered)
	}
	if err == nil {
		m.handedOver, err = register(reg, m.handedOver)
	}
	if err == nil {
		m.messages, err = register(reg, m.messages)
	}
	if err == nil {
		m.grouped, err = register(reg, m.grouped)
	}
	if err == nil {
		m.depth, err = register(reg, m.depth)
	}
	if err == nil {
		m.latency, err = register(reg, m.latency)
	}
	return m, err
}

// register registers c, or returns the collector already registered under
// its name (a second Dispatcher on the same registry shares the series).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	if err != nil {
		return c, fmt.Errorf("register metrics: %w", err)
	}
	return c, nil
}

// series are one action's metrics, curried once so that the hot path does
// not hash label values.
type series struct {
	fired, delivered, failed, retried, deadLettered, handedOver prometheus.Counter
	messages                                                    prometheus.Counter
	depth, grouped                                              prometheus.Gauge
	latency                                                     prometheus.Observer
}

// groupedKinds are the actions that send messages for groups of firings:
// only theirs have the series messages_total and grouped.
var groupedKinds = map[string]bool{"slack": true, "teams": true, "pagerduty": true, "email": true}

func (m *metrics) series(rule, kind string, index int) series {
	l := []string{rule, kind, strconv.Itoa(index)}
	var messages prometheus.Counter
	var grouped prometheus.Gauge
	if groupedKinds[kind] {
		messages, grouped = m.messages.WithLabelValues(l...), m.grouped.WithLabelValues(l...)
	}
	return series{
		messages:     messages,
		grouped:      grouped,
		fired:        m.fired.WithLabelValues(l...),
		delivered:    m.delivered.WithLabelValues(l...),
		failed:       m.failed.WithLabelValues(l...),
		retried:      m.retried.WithLabelValues(l...),
		deadLettered: m.deadLettered.WithLabelValues(l...),
		handedOver:   m.handedOver.WithLabelValues(l...),
		depth:        m.depth.WithLabelValues(l...),
		latency:      m.latency.WithLabelValues(l...),
	}
}
