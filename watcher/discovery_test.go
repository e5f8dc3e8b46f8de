package watcher

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// TestDiscoveryRequests: with the apiserver's aggregated discovery a pass
// asks two documents (/api and /apis) whatever the number of groups, the
// metrics count the requests and time the passes, and the informers'
// start-up requests are counted by verb.
func TestDiscoveryRequests(t *testing.T) {
	env := testenv.Shared(t)
	installWidgets(t, env)
	w, reg := startWatcher(t, env.Config(), Config{
		Selectors: []change.Selector{{Resource: "configmaps"}, {Group: "example.com", Kind: "Widget"}},
		Handler:   &recorder{},
	})
	waitPasses(t, w, 2)
	passes := float64(w.passes.Load())
	requests := testutil.ToFloat64(w.metrics.discoveryRequests)
	if requests < 2 || requests > 2*passes+2 {
		t.Errorf("discovery requests %v for %v passes, want 2 a pass (aggregated discovery)", requests, passes)
	}
	families, err := reg.Gather()
	mustf(t, err, "gather")
	timed := uint64(0)
	for _, f := range families {
		if f.GetName() == "fieldwatch_watcher_discovery_duration_seconds" {
			timed = f.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	if timed < uint64(passes) {
		t.Errorf("discovery passes timed %d, want at least %v", timed, passes)
	}
	// The CRDs the watcher follows for itself come as metadata only:
	// their names say what they serve.
	w.mu.Lock()
	crds := w.crds
	w.mu.Unlock()
	objs := crds.store.list()
	if !crds.metaOnly || len(objs) == 0 {
		t.Fatalf("CRD follower: metadata only %v, %d CRDs", crds.metaOnly, len(objs))
	}
	for _, o := range objs {
		if spec, ok := o.Map()["spec"]; ok {
			t.Fatalf("CRD %s cached with its spec: %.80v", o.GetName(), spec)
		}
	}
	if !w.customResources()(widgets.GroupResource()) {
		t.Error("widgets not known as custom resources")
	}
	// Each watched resource (configmaps, widgets and the CRDs the
	// watcher follows) listed or watched at least once.
	if n := testutil.ToFloat64(w.metrics.requests.WithLabelValues("list")) + testutil.ToFloat64(w.metrics.requests.WithLabelValues("watch")); n < 3 {
		t.Errorf("list and watch requests %v, want at least 3", n)
	}
}
