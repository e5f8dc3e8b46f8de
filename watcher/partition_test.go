package watcher

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// TestPartitionAndCompaction cuts the watcher off the apiserver, changes
// objects, compacts etcd's history past the watcher's resourceVersion, and
// restores the connection. ConfigMaps are served without the watch cache
// here, so the resumed watch gets 410 Gone from etcd and the informer
// relists: every object's final state is delivered, deletions missed by
// the watch arrive as deletions, and no change is delivered twice.
func TestPartitionAndCompaction(t *testing.T) {
	t.Parallel()
	env := testenv.Start(t, testenv.Options{APIServerArgs: map[string][]string{"watch-cache-sizes": {"configmaps#0"}}})
	ns := namespace(t, env)
	ctx := context.Background()
	cms := env.Dynamic(t).Resource(configMaps).Namespace(ns)
	host, err := url.Parse(env.Config().Host)
	mustf(t, err, "host")
	px := testenv.NewProxy(t, host.Host)
	cfg := env.Config()
	cfg.Host = "https://" + px.Addr()

	rec := &recorder{}
	w, _ := startWatcher(t, cfg, Config{Selectors: []change.Selector{{Resource: "configmaps"}}, Handler: rec})
	const n = 20
	for i := range n {
		_, err := cms.Create(ctx, configMap(ns, fmt.Sprintf("cm-%02d", i), map[string]any{"v": "0"}), metav1.CreateOptions{})
		mustf(t, err, "create")
	}
	testenv.Eventually(t, 30*time.Second, "the creates", func() bool {
		return rec.count(func(c *Change) bool { return c.Object().GetNamespace() == ns }) == n
	})

	px.Cut()
	for round := 1; round <= 2; round++ {
		for i := range n {
			name := fmt.Sprintf("cm-%02d", i)
			cm, err := cms.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				continue
			}
			mustf(t, unstructured.SetNestedField(cm.Object, strconv.Itoa(round), "data", "v"), "set")
			_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
			mustf(t, err, "update %s", name)
		}
	}
	for i := range 5 {
		mustf(t, cms.Delete(ctx, fmt.Sprintf("cm-%02d", i), metav1.DeleteOptions{}), "delete")
		_, err := cms.Create(ctx, configMap(ns, fmt.Sprintf("new-%02d", i), map[string]any{"v": "new"}), metav1.CreateOptions{})
		mustf(t, err, "create new")
	}
	_, err = env.CompactEtcd(ctx)
	mustf(t, err, "compact etcd")
	px.Restore()

	testenv.Eventually(t, 60*time.Second, "the relist", func() bool {
		return testutil.ToFloat64(w.metrics.tombstones.WithLabelValues("configmaps.v1")) >= 5 &&
			len(rec.of(configMaps, ns, "new-04")) == 1 && len(rec.of(configMaps, ns, "cm-19")) >= 2
	})
	final, err := cms.List(ctx, metav1.ListOptions{})
	mustf(t, err, "list")
	want := map[string]string{}
	for _, item := range final.Items {
		v, _, _ := unstructured.NestedString(item.Object, "data", "v")
		want[item.GetName()] = v
	}
	for i := range n {
		name := fmt.Sprintf("cm-%02d", i)
		cs := rec.of(configMaps, ns, name)
		last := cs[len(cs)-1]
		if v, ok := want[name]; ok {
			if last.Type != change.Updated || field(last.New, "data", "v") != v {
				t.Errorf("%s: last change %s v=%v, want updated to %s", name, last.Type, field(last.New, "data", "v"), v)
			}
		} else if last.Type != change.Deleted {
			t.Errorf("%s: deleted, but the last change is %s", name, kinds(cs))
		}
		// The creates came from watch events; what the relist found is
		// marked listed, and no update from it names a previous version
		// (it may skip several).
		if cs[0].Type != change.Created || cs[0].Listed {
			t.Errorf("%s: first change %s listed=%v, want a create from a watch event", name, cs[0].Type, cs[0].Listed)
		}
		if !last.Listed || last.PreviousResourceVersion() != "" {
			t.Errorf("%s: the relist's %s: listed=%v, previous resourceVersion %q; want listed, none",
				name, last.Type, last.Listed, last.PreviousResourceVersion())
		}
		seen := map[string]bool{}
		for _, c := range cs {
			rv := c.Object().GetResourceVersion()
			if c.Type != change.Deleted && seen[rv] {
				t.Errorf("%s: the change to resourceVersion %s was delivered twice: %s", name, rv, kinds(cs))
			}
			seen[rv] = true
		}
	}
	for i := range 5 {
		if cs := rec.of(configMaps, ns, fmt.Sprintf("new-%02d", i)); len(cs) != 1 || !cs[0].Listed {
			t.Errorf("new-%02d, created while cut off: %s, want one listed create", i, kinds(cs))
		}
	}
}
