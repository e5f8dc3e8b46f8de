//go:build e2e

package e2e

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fieldwatch/fieldwatch/internal/losscheck"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

var (
	widgetsGVR = testenv.WidgetsGVR
	crdGVR     = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// outcome is how the payloads compare with the writes (losscheck).
type outcome = losscheck.Outcome

// settle stops the writers, waits until every write is covered by the
// payloads of rule in the pods' logs, and fails the test with what was
// lost otherwise.
func settle(t testing.TB, logs podLogs, w *testenv.WidgetWriters, rule string, timeout time.Duration) outcome {
	t.Helper()
	return w.Settle(t, timeout, func() []losscheck.Delivery { return deliveries(logs.payloads(rule)) })
}

// onlyOurs keeps the payloads about the objects the writers wrote.
func onlyOurs(ps []payload, w *testenv.WidgetWriters) []payload {
	ours := w.Ours()
	var kept []payload
	for _, p := range ps {
		if ours(p.UID) {
			kept = append(kept, p)
		}
	}
	return kept
}
