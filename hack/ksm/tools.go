//go:build tools

// Package ksm pins kube-state-metrics, built with
// `go build k8s.io/kube-state-metrics/v2` in this module (make ksm).
package ksm

import _ "k8s.io/kube-state-metrics/v2"
