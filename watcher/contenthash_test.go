package watcher

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/jsonscan"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// TestContentHash: with Config.ContentHash, a created and an updated
// change carry the digest of the whole object as the apiserver serves it
// (a projection that keeps none of its data), and a deletion the
// resourceVersion the object had before it; without, neither.
func TestContentHash(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	for _, on := range []bool{true, false} {
		ns := namespace(t, env)
		rec := &recorder{}
		startWatcher(t, env.Config(), Config{
			Selectors: []change.Selector{{Resource: "configmaps"}},
			Projection: func(change.Resource) change.Projection {
				return change.Projection{Paths: [][]string{{"metadata", "labels"}}}
			},
			Handler:     rec,
			ContentHash: on,
		})
		cms := env.Dynamic(t).Resource(configMaps).Namespace(ns)
		created, err := cms.Create(ctx, configMap(ns, "hashed", map[string]any{"k": "1"}), metav1.CreateOptions{})
		mustf(t, err, "create")
		updated, err := cms.Patch(ctx, "hashed", types.MergePatchType, []byte(`{"data":{"k":"2"}}`), metav1.PatchOptions{})
		mustf(t, err, "patch")
		mustf(t, cms.Delete(ctx, "hashed", metav1.DeleteOptions{}), "delete")
		testenv.Eventually(t, 30*time.Second, "three changes", func() bool { return len(rec.of(configMaps, ns, "hashed")) >= 3 })
		cs := rec.of(configMaps, ns, "hashed")
		for i, want := range []any{created.Object, updated.Object} {
			raw, err := json.Marshal(want)
			mustf(t, err, "encode")
			h, err := jsonscan.ObjectHash(raw)
			mustf(t, err, "hash")
			if !on {
				h = ""
			}
			if got := cs[i].ContentHash(); got != h {
				t.Errorf("ContentHash %v: %s change: %q, want %q", on, cs[i].Type, got, h)
			}
		}
		want := updated.GetResourceVersion() // taken whether or not hashes are
		if got := cs[2].DeletedResourceVersion(); got != want || got == cs[2].Old.GetResourceVersion() {
			t.Errorf("deletion: DeletedResourceVersion %q (its object's %q), want %q", got, cs[2].Old.GetResourceVersion(), want)
		}
		if cs[2].ContentHash() != "" {
			t.Errorf("deletion: ContentHash %q, want none", cs[2].ContentHash())
		}
	}
}
