//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// reloadedRule is the rule the edited ConfigMap adds to deploy/base/rules.yaml.
const reloadedRule = `
  - name: e2e-reloaded
    description: added by editing the ConfigMap
    match:
      resources: [{group: example.com, kind: Widget}]
      namespaces: [e2e-reload]
    on: [create]
    actions:
      - log: {}
`

// rulesConfigMap returns deploy/'s rules ConfigMap as kustomize renders it.
func rulesConfigMap(t testing.TB) *unstructured.Unstructured {
	t.Helper()
	for _, o := range c.render(t, "deploy", c.image) {
		if o.GetKind() == "ConfigMap" && o.GetName() == "fieldwatch-rules" {
			return o
		}
	}
	t.Fatal("deploy/ renders no ConfigMap fieldwatch-rules")
	return nil
}

// testRulesReload edits the rules ConfigMap and applies it: once the
// kubelet has updated the projected volume, each running pod reloads the
// rules, with no restart, and the new rule fires.
func testRulesReload(t *testing.T) {
	deployed(t)
	const ns = "e2e-reload"
	c.ensureNamespace(t, ns)
	type seen struct {
		container string
		restarts  int32
		reloads   float64
	}
	before := map[string]seen{}
	for _, p := range c.pods(t) {
		st := containerStatus(&p)
		n, _ := metric(c.podMetrics(t, p.Name), "fieldwatch_rules_reloads_total ")
		before[p.Name] = seen{st.ContainerID, st.RestartCount, n}
	}
	cm := rulesConfigMap(t)
	original, _, _ := unstructured.NestedString(cm.Object, "data", "rules.yaml")
	t.Cleanup(func() {
		restore := rulesConfigMap(t)
		c.apply(t, restore)
	})
	if err := unstructured.SetNestedField(cm.Object, original+reloadedRule, "data", "rules.yaml"); err != nil {
		t.Fatal(err)
	}
	edited := time.Now()
	c.apply(t, cm)

	for name, b := range before {
		if !poll(3*time.Minute, func() bool {
			n, _ := metric(c.podMetrics(t, name), "fieldwatch_rules_reloads_total ")
			return n > b.reloads
		}) {
			t.Fatalf("%s did not reload the rules within 3 minutes of the edit", name)
		}
		t.Logf("%s reloaded the rules %s after the ConfigMap was applied", name, time.Since(edited).Round(time.Second))
		st := containerStatus(c.pod(t, name))
		if st.ContainerID != b.container || st.RestartCount != b.restarts {
			t.Errorf("%s restarted to reload: container %s (%d restarts), was %s (%d)", name, st.ContainerID, st.RestartCount, b.container, b.restarts)
		}
	}
	leader := c.leader(t)
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "after-reload", "namespace": ns},
		"spec":     map[string]any{"size": int64(1)},
	}}
	created, err := c.dyn.Resource(widgetsGVR).Namespace(ns).Create(context.Background(), w, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !poll(time.Minute, func() bool {
		data, err := c.cs.CoreV1().Pods(namespace).GetLogs(leader, &corev1.PodLogOptions{Container: container}).DoRaw(context.Background())
		if err != nil {
			return false
		}
		for _, line := range splitLines(string(data)) {
			if p, ok := parsePayload(testenv.LogLine{Text: line}); ok && p.Rule == "e2e-reloaded" && p.UID == string(created.GetUID()) {
				return true
			}
		}
		return false
	}) {
		t.Errorf("the reloaded rule e2e-reloaded did not fire on the leader %s", leader)
	}
}

func splitLines(s string) []string { return strings.Split(strings.TrimRight(s, "\n"), "\n") }
