package watcher

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// TestAPIServerRestart kills kube-apiserver (SIGKILL) mid-stream and starts it again
// (etcd keeps running). Changes made before the stop, in the gap before the
// informer is back, and after it are all delivered: those of the gap as
// their net effect (what a relist can see), the others one by one.
func TestAPIServerRestart(t *testing.T) {
	t.Parallel()
	env := testenv.Start(t, testenv.Options{})
	ns := namespace(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rec := &recorder{}
	startWatcher(t, env.Config(), Config{Selectors: []change.Selector{{Resource: "configmaps"}}, Handler: rec})
	cms := env.Dynamic(t).Resource(configMaps).Namespace(ns)

	churn(t, ctx, cms, ns, "before", 20)
	waitSeen(t, rec, cms, ns, "marker-1")

	mustf(t, env.KillAPIServer(), "kill apiserver")
	mustf(t, env.StartAPIServer(ctx), "start apiserver")
	// The gap: the informer has not reconnected yet.
	for i := 1; i < 20; i += 4 {
		name := fmt.Sprintf("before-%02d", i)
		cm, err := cms.Get(ctx, name, metav1.GetOptions{})
		mustf(t, err, "get %s", name)
		mustf(t, unstructured.SetNestedField(cm.Object, "gap", "data", "v"), "set")
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		mustf(t, err, "update %s in the gap", name)
	}
	mustf(t, cms.Delete(ctx, "before-03", metav1.DeleteOptions{}), "delete in the gap")
	_, err := cms.Create(ctx, configMap(ns, "gap-created", map[string]any{"v": "gap"}), metav1.CreateOptions{})
	mustf(t, err, "create in the gap")

	waitSeen(t, rec, cms, ns, "marker-2")
	churn(t, ctx, cms, ns, "after", 20)
	waitSeen(t, rec, cms, ns, "marker-3")

	// Every object's last change matches the apiserver's final state.
	final, err := cms.List(ctx, metav1.ListOptions{})
	mustf(t, err, "list")
	exists := map[string]string{}
	for _, item := range final.Items {
		v, _, _ := unstructured.NestedString(item.Object, "data", "v")
		exists[item.GetName()] = v
	}
	names := []string{"gap-created"}
	for i := range 20 {
		names = append(names, fmt.Sprintf("before-%02d", i), fmt.Sprintf("after-%02d", i))
	}
	for _, name := range names {
		cs := rec.of(configMaps, ns, name)
		if len(cs) == 0 {
			t.Errorf("%s: no changes", name)
			continue
		}
		last := cs[len(cs)-1]
		want, ok := exists[name]
		switch {
		case !ok && last.Type != change.Deleted:
			t.Errorf("%s: deleted, but the last change is %s", name, kinds(cs))
		case ok && (last.Type == change.Deleted || field(last.New, "data", "v") != want):
			t.Errorf("%s: final v=%q, but the last change is %s with v=%v", name, want, kinds(cs), field(last.New, "data", "v"))
		case cs[0].Type != change.Created:
			t.Errorf("%s: changes %s, want a create first", name, kinds(cs))
		}
	}
	// After the informer is back nothing is coalesced away.
	for i := range 20 {
		name := fmt.Sprintf("after-%02d", i)
		want := "[created]"
		switch {
		case i%4 == 0:
			want = "[created updated deleted]"
		case i%2 == 0:
			want = "[created updated]"
		}
		if got := kinds(rec.of(configMaps, ns, name)); got != want {
			t.Errorf("%s: changes %s, want %s", name, got, want)
		}
	}
}

// waitSeen creates a marker object and waits until the watcher reports it:
// every change made before it has been received by then.
func waitSeen(t *testing.T, rec *recorder, cms dynamic.ResourceInterface, ns, name string) {
	t.Helper()
	_, err := cms.Create(context.Background(), configMap(ns, name, nil), metav1.CreateOptions{})
	mustf(t, err, "create %s", name)
	testenv.Eventually(t, time.Minute, name+" to be reported", func() bool { return len(rec.of(configMaps, ns, name)) > 0 })
}

// churn creates n objects, updates every other one and deletes every
// fourth.
func churn(t *testing.T, ctx context.Context, cms dynamic.ResourceInterface, ns, prefix string, n int) {
	t.Helper()
	for i := range n {
		name := fmt.Sprintf("%s-%02d", prefix, i)
		cm, err := cms.Create(ctx, configMap(ns, name, map[string]any{"v": "0"}), metav1.CreateOptions{})
		mustf(t, err, "create %s", name)
		if i%2 == 0 {
			mustf(t, unstructured.SetNestedField(cm.Object, "1", "data", "v"), "set")
			_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
			mustf(t, err, "update %s", name)
		}
		if i%4 == 0 {
			mustf(t, cms.Delete(ctx, name, metav1.DeleteOptions{}), "delete %s", name)
		}
	}
}
