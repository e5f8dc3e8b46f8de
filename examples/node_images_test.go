package examples_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// TestNodeImages runs examples/node-images against a Node whose images
// the test writes through the status subresource, as a kubelet does: the
// sizes change, the total crosses 50 GB up and down, twice, and only the
// crossings warn.
func TestNodeImages(t *testing.T) {
	env := testenv.Shared(t)
	cs := env.Clientset(t)
	ctx := context.Background()
	fw := startFieldwatch(t, "node-images/rules.yaml")

	const name = "node-images-test"
	var node *corev1.Node
	fw.step(t, "create the node", func() (err error) {
		node, err = cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		return err
	})
	t.Cleanup(func() { _ = cs.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })

	var (
		app   = corev1.ContainerImage{Names: []string{"registry.example.com/app:1.0"}, SizeBytes: 30_000_000_000}
		db    = corev1.ContainerImage{Names: []string{"registry.example.com/db:15"}, SizeBytes: 15_000_000_000}
		cache = corev1.ContainerImage{Names: []string{"registry.example.com/cache:7"}, SizeBytes: 12_000_000_000}
		tool  = corev1.ContainerImage{Names: []string{"registry.example.com/tool:2"}, SizeBytes: 4_000_000_000}
	)
	// setImages writes status.images as the kubelet does and returns the
	// Node's new resource version.
	setImages := func(what string, images ...corev1.ContainerImage) string {
		t.Helper()
		var rv string
		fw.step(t, what, func() error {
			body, err := json.Marshal(map[string]any{"status": map[string]any{"images": images}})
			if err != nil {
				return err
			}
			n, err := cs.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, body,
				metav1.PatchOptions{FieldManager: "kubelet"}, "status")
			if err != nil {
				return err
			}
			rv = n.ResourceVersion
			return nil
		})
		return rv
	}

	rv45 := setImages("45 GB", app, db)
	rv57 := setImages("57 GB: over", app, db, cache)
	rv61 := setImages("61 GB: still over", app, db, cache, tool)
	rv27 := setImages("27 GB: under", db, cache)
	rv57b := setImages("57 GB: over again", app, db, cache)
	rv31 := setImages("31 GB: under again", db, cache, tool)

	// Every change of the sizes is reported.
	fw.waitFiring(t, "node-images-changed", "", name, rv31)
	if got, want := resourceVersions(fw.firings(t, "node-images-changed", "", name)), []string{rv45, rv57, rv61, rv27, rv57b, rv31}; !slices.Equal(got, want) {
		t.Errorf("node-images-changed fired at %v, want every change %v", got, want)
	}
	// The crossings only: the later firing of each rule shows that the
	// changes before it (the node's creation included) did not fire it.
	fw.waitFiring(t, "node-images-over-threshold", "", name, rv57b)
	if got, want := resourceVersions(fw.firings(t, "node-images-over-threshold", "", name)), []string{rv57, rv57b}; !slices.Equal(got, want) {
		t.Errorf("node-images-over-threshold fired at %v, want %v", got, want)
	}
	fw.waitFiring(t, "node-images-under-threshold", "", name, rv31)
	if got, want := resourceVersions(fw.firings(t, "node-images-under-threshold", "", name)), []string{rv27, rv31}; !slices.Equal(got, want) {
		t.Errorf("node-images-under-threshold fired at %v, want %v", got, want)
	}

	// The payload the README shows.
	over := fw.firings(t, "node-images-over-threshold", "", name)[0]
	if over.Type != "updated" || over.Resource.Kind != "Node" || over.Resource.Resource != "nodes" ||
		over.Namespace != "" || over.UID != string(node.UID) || over.ID != string(node.UID)+"/"+rv57+"/node-images-over-threshold" {
		t.Errorf("over-threshold payload: %s", over.raw)
	}
	checkChanges(t, over, `[{"op":"add","path":"/status/images/2","value":{"names":["registry.example.com/cache:7"],"sizeBytes":12000000000}}]`)
	under := fw.firings(t, "node-images-under-threshold", "", name)[0]
	checkChanges(t, under, `[{"op":"replace","path":"/status/images",
		"value":[{"names":["registry.example.com/db:15"],"sizeBytes":15000000000},{"names":["registry.example.com/cache:7"],"sizeBytes":12000000000}],
		"oldValue":[{"names":["registry.example.com/app:1.0"],"sizeBytes":30000000000},{"names":["registry.example.com/db:15"],"sizeBytes":15000000000},
		            {"names":["registry.example.com/cache:7"],"sizeBytes":12000000000},{"names":["registry.example.com/tool:2"],"sizeBytes":4000000000}]}]`)

	// The Events regard the Node and sit in the default namespace.
	ev := waitEvent(t, metav1.NamespaceDefault, node.UID, "NodeImagesOverThreshold")
	if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Note, name) || ev.Regarding.Kind != "Node" {
		t.Errorf("over-threshold Event: type %q, note %q, regarding %+v", ev.Type, ev.Note, ev.Regarding)
	}
	ev = waitEvent(t, metav1.NamespaceDefault, node.UID, "NodeImagesUnderThreshold")
	if ev.Type != corev1.EventTypeNormal || !strings.Contains(ev.Note, name) {
		t.Errorf("under-threshold Event: type %q, note %q", ev.Type, ev.Note)
	}
}
