//go:build e2e

package e2e

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/fieldwatch/fieldwatch/internal/losscheck"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

var (
	widgetsGVR = testenv.WidgetsGVR
	crdsGVR    = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// startWriter starts one writer of Widgets in ns, writing every interval
// (testenv.WidgetWriters, as ../../e2e's).
func startWriter(t testing.TB, ns string, interval time.Duration) *testenv.WidgetWriters {
	t.Helper()
	return startWriterAs(t, c.dyn, ns, interval)
}

// startWriterAs starts one writer in ns writing with dyn (as its user).
func startWriterAs(t testing.TB, dyn dynamic.Interface, ns string, interval time.Duration) *testenv.WidgetWriters {
	t.Helper()
	return testenv.StartWidgetWriters(t, ns, interval, testenv.WidgetWriter{Prefix: "w", Client: dyn})
}

// settle stops the writer, waits until every write is covered by the
// payloads of rule in the pods' logs, and fails the test with what was
// lost otherwise.
func settle(t testing.TB, logs podLogs, w *testenv.WidgetWriters, rule string, timeout time.Duration) losscheck.Outcome {
	t.Helper()
	return w.Settle(t, timeout, func() []losscheck.Delivery {
		ps := logs.payloads(rule)
		ds := make([]losscheck.Delivery, len(ps))
		for i, p := range ps {
			ds[i] = losscheck.Delivery{ID: p.ID, Type: string(p.Type), UID: p.UID, ResourceVersion: p.ResourceVersion}
		}
		return ds
	})
}
