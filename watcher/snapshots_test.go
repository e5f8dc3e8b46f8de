package watcher

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// TestSnapshotsOfCachedResources: a resource Config.Cache selects is
// cached with its projection, its changes reach no handler, Snapshots
// follows its objects, and the resource is gone from Snapshots once its
// CRD is deleted.
func TestSnapshotsOfCachedResources(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	ctx := context.Background()
	const ns = "snapshots-cached"
	_, err := env.Clientset(t).CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	const group = "snapshots.watcher.example.com"
	if _, err = env.Apply(ctx, testenv.ApplyOptions{}, []byte(gizmosCRD(group, true))); err != nil {
		t.Fatal(err)
	}
	var objs strings.Builder
	for i := range 3 {
		fmt.Fprintf(&objs, "---\napiVersion: %s/v1\nkind: Gizmo\nmetadata: {name: g%d, namespace: %s}\nspec: {size: %d, legacy: old}\n", group, i, ns, i)
	}
	if _, err := env.Apply(ctx, testenv.ApplyOptions{}, []byte(objs.String())); err != nil {
		t.Fatal(err)
	}
	sel := change.Selector{Group: group, Kind: "Gizmo", Version: "*"}
	rec := &recorder{}
	w, _ := startWatcher(t, env.Config(), Config{
		Cache:   []change.Selector{sel},
		Handler: rec,
		Projection: func(change.Resource) change.Projection {
			return change.Projection{Paths: [][]string{{"spec", "size"}}}
		},
	})
	sizes := func() map[string]any {
		out := map[string]any{}
		for _, s := range w.Snapshots(sel.Matches) {
			for _, o := range s.Objects {
				m := o.Map()
				spec, _ := m["spec"].(map[string]any)
				if _, ok := spec["legacy"]; ok {
					t.Errorf("%s: spec.legacy cached outside the projection", o.GetName())
				}
				out[o.GetName()] = spec["size"]
			}
		}
		return out
	}
	testenv.Eventually(t, 30*time.Second, "three gizmos in the snapshot", func() bool { return len(sizes()) == 3 })

	if _, err := env.Apply(ctx, testenv.ApplyOptions{}, []byte(fmt.Sprintf("apiVersion: %s/v1\nkind: Gizmo\nmetadata: {name: g0, namespace: %s}\nspec: {size: 10}\n", group, ns))); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "g0 resized", func() bool { return sizes()["g0"] == int64(10) })
	if n := rec.count(func(*Change) bool { return true }); n != 0 {
		t.Errorf("the handler received %d changes of a cache-only resource", n)
	}

	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if err := env.Dynamic(t).Resource(crds).Delete(ctx, "gizmos."+group, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "no snapshot once the CRD is gone", func() bool { return len(w.Snapshots(sel.Matches)) == 0 })
}
