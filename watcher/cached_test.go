package watcher

import (
	"context"
	"fmt"
	"slices"
	"strconv"
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

// gizmosCRD is a CRD of the test's own whose v1 schema has spec.size and,
// with legacy, spec.legacy.
func gizmosCRD(group string, legacy bool) string {
	props := `size: {type: integer}`
	if legacy {
		props += `, legacy: {type: string}`
	}
	return fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gizmos.%[1]s}
spec:
  group: %[1]s
  scope: Namespaced
  names: {plural: gizmos, singular: gizmo, kind: Gizmo, listKind: GizmoList}
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, properties: {spec: {type: object, properties: {%[2]s}}}}}
`, group, props)
}

// TestCached checks the snapshot of what the watcher caches of a resource,
// and that Listed tells objects read before a CRD change from objects read
// after it: the apiserver drops its watches of the custom resources when
// their CRD's schema changes, the informer lists them again, and a field
// the new schema removed is gone from every object read then.
func TestCached(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	ctx := context.Background()
	const ns = "cached-snapshot"
	_, err := env.Clientset(t).CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	const group = "cached.watcher.example.com"
	gizmos := schema.GroupResource{Group: group, Resource: "gizmos"}
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

	started := time.Now()
	w, _ := startWatcher(t, env.Config(), Config{
		Selectors: []change.Selector{{Group: group, Resource: "gizmos"}, {Group: "", Resource: "configmaps"}},
		Handler:   &recorder{},
		Namespaces: func(r change.Resource) []string {
			if r.Resource == "configmaps" {
				return []string{ns}
			}
			return nil
		},
	})
	snap, err := w.Cached(gizmos)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Resource.Version != "v1" || !snap.Projection.Full || snap.Listed.Before(started) || snap.Listed.After(time.Now()) || revision(t, snap.ResourceVersion) == 0 {
		t.Errorf("snapshot of %s at %s, projection %s, listed %s at %q (watcher started %s)", snap.Resource, snap.Resource.Version, snap.Projection, snap.Listed, snap.ResourceVersion, started)
	}
	legacy := func(s Snapshot) []string {
		var out []string
		for _, o := range s.Objects {
			if v, _ := field(o, "spec", "legacy").(string); v != "" {
				out = append(out, o.GetName())
			}
		}
		slices.Sort(out)
		return out
	}
	if got := legacy(snap); !slices.Equal(got, []string{"g0", "g1", "g2"}) {
		t.Errorf("objects with spec.legacy: %v", got)
	}
	for _, tt := range []struct {
		gr   schema.GroupResource
		want string
	}{
		{schema.GroupResource{Resource: "configmaps"}, "watched in some namespaces only"},
		{schema.GroupResource{Resource: "secrets"}, "not watched"},
	} {
		if _, err := w.Cached(tt.gr); err == nil || err.Error() != tt.want {
			t.Errorf("Cached(%s) = %v, want %q", tt.gr, err, tt.want)
		}
	}

	// The field is removed: the cache holds the objects as they were
	// until the informer lists them again, at the resourceVersion of the
	// change or later, and then without it.
	objs2, err := env.Apply(ctx, testenv.ApplyOptions{}, []byte(gizmosCRD(group, false)))
	if err != nil {
		t.Fatal(err)
	}
	changed := revision(t, objs2[0].GetResourceVersion())
	if listed := revision(t, snap.ResourceVersion); listed >= changed {
		t.Errorf("listed at %d, not before the CRD change at %d", listed, changed)
	}
	var after Snapshot
	testenv.Eventually(t, time.Minute, "the gizmos to be listed again after the CRD change", func() bool {
		after, err = w.Cached(gizmos)
		return err == nil && revision(t, after.ResourceVersion) >= changed
	})
	testenv.Eventually(t, 30*time.Second, "spec.legacy to be pruned from the cache", func() bool {
		after, _ = w.Cached(gizmos)
		return len(legacy(after)) == 0 && len(after.Objects) == 3
	})
}

// revision parses a resourceVersion.
func revision(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", s, err)
	}
	return n
}

func TestCachedSharded(t *testing.T) {
	w, err := newForClients(nil, nil, Config{Handler: &recorder{}, Shard: Shard{Index: 1, Total: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Cached(schema.GroupResource{Resource: "configmaps"}); err == nil || err.Error() != "shard 1 of 2 caches a share of the objects only" {
		t.Errorf("Cached = %v", err)
	}
}
