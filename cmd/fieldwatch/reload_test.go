package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

const reloadRuleCM = `
  - name: cm-changed
    match:
      resources: [{group: "", kind: ConfigMap}]
      namespaces: [reload]
    on: [update]
    fields: [data.v]
    actions: [{log: {}}]
`

const reloadRuleWidget = `
  - name: widget-created
    match:
      resources: [{group: example.com, kind: Widget}]
      namespaces: [reload]
    on: [create]
    actions: [{log: {}}]
`

// mountedRules imitates a ConfigMap volume: dir/rules.yaml is a symlink to
// ..data/rules.yaml, and ..data a symlink to a timestamped directory that an
// update replaces atomically.
type mountedRules struct {
	t   *testing.T
	dir string
	gen int
}

func newMountedRules(t *testing.T, content string) *mountedRules {
	m := &mountedRules{t: t, dir: t.TempDir()}
	m.write(content)
	if err := os.Symlink(filepath.Join("..data", "rules.yaml"), filepath.Join(m.dir, "rules.yaml")); err != nil {
		t.Fatal(err)
	}
	return m
}

func (m *mountedRules) path() string { return filepath.Join(m.dir, "rules.yaml") }

// write swaps in new content the way the kubelet does.
func (m *mountedRules) write(content string) {
	m.t.Helper()
	m.gen++
	gen := filepath.Join(m.dir, fmt.Sprintf("..2026_12_02_%d", m.gen))
	if err := os.Mkdir(gen, 0o755); err != nil {
		m.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(gen, "rules.yaml"), []byte(content), 0o644); err != nil {
		m.t.Fatal(err)
	}
	tmp := filepath.Join(m.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(gen), tmp); err != nil {
		m.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(m.dir, "..data")); err != nil {
		m.t.Fatal(err)
	}
}

// TestHotReload adds a rule, rejects a broken file, and removes a rule
// while fieldwatch runs, with the file updated the way a mounted ConfigMap
// is.
func TestHotReload(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	ctx := context.Background()
	if _, err := env.ApplyFiles(ctx, testenv.ApplyOptions{}, repo(t, "examples/crds/widgets.yaml")); err != nil {
		t.Fatal(err)
	}
	ns := namespace(t, env, "reload")
	apply(t, env, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: reload}\ndata: {v: '0'}\n")
	rules := newMountedRules(t, "rules:"+reloadRuleCM)
	p := startFieldwatch(t, env.WriteKubeconfig(t), "--rules", rules.path())

	cms := env.Clientset(t).CoreV1().ConfigMaps(ns)
	setV := func(v string) {
		t.Helper()
		body := fmt.Sprintf(`{"data":{"v":%q}}`, v)
		if _, err := cms.Patch(ctx, "c", types.MergePatchType, []byte(body), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	count := func(rule string) int {
		n := 0
		for _, pl := range inNamespace(p.payloads(), ns) {
			if pl["rule"] == rule {
				n++
			}
		}
		return n
	}

	setV("1")
	testenv.Eventually(t, 30*time.Second, "cm-changed to fire", func() bool { return count("cm-changed") == 1 })

	// Add a rule for a resource not watched so far.
	rules.write("rules:" + reloadRuleCM + reloadRuleWidget)
	testenv.Eventually(t, 30*time.Second, "the reload", func() bool { return p.metric("fieldwatch_rules_reloads_total") == 1 })
	// Widgets that exist when the new rule's informer lists them are its
	// baseline, and /readyz does not wait for that list: create a probe
	// widget every second until one fires.
	testenv.Eventually(t, 30*time.Second, "widgets to be watched", func() bool {
		return p.metric("fieldwatch_watcher_resources") == 2
	})
	probes, last := 0, time.Time{}
	testenv.Eventually(t, 30*time.Second, "widget-created to fire", func() bool {
		if count("widget-created") > 0 {
			return true
		}
		if time.Since(last) >= time.Second {
			apply(t, env, fmt.Sprintf("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: probe-%d, namespace: reload}\nspec: {size: 1}\n", probes))
			probes, last = probes+1, time.Now()
		}
		return false
	})

	// A broken file is rejected and the running rules stay.
	rules.write("rules:\n  - name: broken\n    match: {resources: [{group: '', kind: ConfigMap}]}\n    actions: [{webhook: {url: 'not a url'}}]\n")
	testenv.Eventually(t, 30*time.Second, "the failed reload to be counted", func() bool {
		return p.metric("fieldwatch_rules_reload_failures_total") == 1
	})
	setV("2")
	testenv.Eventually(t, 30*time.Second, "cm-changed to fire with the old rules", func() bool { return count("cm-changed") == 2 })

	// Remove cm-changed: a change fires nothing, while widget-created
	// still works (it marks that the change was processed).
	rules.write("rules:" + reloadRuleWidget)
	testenv.Eventually(t, 30*time.Second, "the second reload", func() bool { return p.metric("fieldwatch_rules_reloads_total") == 2 })
	setV("3")
	before := count("widget-created")
	apply(t, env, "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: marker, namespace: reload}\nspec: {size: 1}\n")
	testenv.Eventually(t, 30*time.Second, "the marker widget", func() bool { return count("widget-created") > before })
	if n := count("cm-changed"); n != 2 {
		t.Errorf("cm-changed fired %d times, want 2 (it was removed before the third change)", n)
	}
}
