//go:build e2e

package e2e

import (
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// testRollingUpdate rolls the StatefulSet to a new image tag (the image of
// make image tagged anew, as a release would be) while a writer changes
// Widgets: the pods are replaced one at a time, both run the new tag, and
// every change is delivered.
func testRollingUpdate(t *testing.T) {
	deployed(t)
	const ns = "e2e-rollout"
	c.ensureNamespace(t, ns)
	next := c.image + "-rollout"
	run(t, c.tool, "ctr", "-n", "k8s.io", "images", "tag", "--force", c.image, next)
	logs := c.followLogs(t)
	w := testenv.StartWidgetWriters(t, ns, 50*time.Millisecond, testenv.WidgetWriter{Prefix: "w", Client: c.dyn})
	w.WaitWrites(t, 40)
	before := c.statefulSet(t).Status.CurrentRevision
	start := time.Now()
	c.apply(t, c.render(t, "deploy", next)...)
	c.waitRolledOut(t, 5*time.Minute)
	t.Logf("rolled out to %s in %s", next, time.Since(start).Round(100*time.Millisecond))
	if after := c.statefulSet(t).Status.CurrentRevision; after == before {
		t.Errorf("the StatefulSet is still at revision %s", after)
	}
	for _, p := range c.pods(t) {
		if got := p.Spec.Containers[0].Image; got != next {
			t.Errorf("%s runs %s after the rollout, want %s", p.Name, got, next)
		}
	}
	w.WaitWrites(t, 40) // under the new pods
	o := settle(t, logs, w, "crd-audit", 2*time.Minute)
	t.Logf("rolling update: %s", o)
	logs.CheckNoErrors(t)
}
