package testenv

import (
	"context"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"

	"github.com/fieldwatch/fieldwatch/internal/losscheck"
)

func TestMain(m *testing.M) { Main(m, Options{}) }

var widgets = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

// TestPlumbing proves the control plane works end to end: a CRD installed
// from examples/, an object of it written and read back with the dynamic
// client, and discovery listing it among the preferred resources.
func TestPlumbing(t *testing.T) {
	env := Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.InstallCRDs(filepath.Join(root, "examples", "crds", "widgets.yaml")); err != nil {
		t.Fatalf("install CRD: %v", err)
	}

	dyn := env.Dynamic(t)
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1",
		"kind":       "Widget",
		"metadata":   map[string]any{"name": "plumbing", "namespace": "default"},
		"spec":       map[string]any{"size": int64(3), "color": "blue"},
	}}
	created, err := dyn.Resource(widgets).Namespace("default").Create(ctx, w, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create widget: %v", err)
	}
	got, err := dyn.Resource(widgets).Namespace("default").Get(ctx, "plumbing", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get widget: %v", err)
	}
	if got.GetUID() != created.GetUID() {
		t.Errorf("uid = %s, want %s", got.GetUID(), created.GetUID())
	}
	size, found, err := unstructured.NestedInt64(got.Object, "spec", "size")
	if err != nil || !found || size != 3 {
		t.Errorf("spec.size = %d (found %v, err %v), want 3", size, found, err)
	}

	dc, err := discovery.NewDiscoveryClientForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	lists, err := dc.ServerPreferredResources()
	if err != nil {
		t.Fatalf("preferred resources: %v", err)
	}
	seen := map[schema.GroupVersionResource]bool{}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			t.Fatalf("group version %q: %v", l.GroupVersion, err)
		}
		for _, r := range l.APIResources {
			seen[gv.WithResource(r.Name)] = true
		}
	}
	for _, want := range []schema.GroupVersionResource{
		widgets,
		{Version: "v1", Resource: "configmaps"},
		{Group: "apps", Version: "v1", Resource: "deployments"},
		{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"},
	} {
		if !seen[want] {
			t.Errorf("discovery does not list %s among %d preferred resources", want, len(seen))
		}
	}
}

// TestRestartKeepsClients checks what the fault tests rely on: after the
// apiserver restarts, clients made before it still work.
func TestRestartKeepsClients(t *testing.T) {
	env := Start(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := env.Clientset(t)
	if err := env.RestartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("client made before the restart: %v", err)
	}
}

// TestWidgetWriters: the writers' writes are recorded as the apiserver
// made them, and Settle finds each covered by a delivery of its state.
func TestWidgetWriters(t *testing.T) {
	env := Shared(t)
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.InstallCRDs(filepath.Join(root, "examples", "crds", "widgets.yaml")); err != nil {
		t.Fatalf("install CRD: %v", err)
	}
	created, err := env.Clientset(t).CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "widget-writers-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns := created.Name
	w := StartWidgetWriters(t, ns, time.Millisecond, WidgetWriter{User: "a", Prefix: "a", Client: env.Dynamic(t)}, WidgetWriter{Prefix: "b", Client: env.Dynamic(t)})
	w.WaitWrites(t, 50)
	o := w.Settle(t, 10*time.Second, func() []losscheck.Delivery {
		var ds []losscheck.Delivery
		for i, m := range w.Made() {
			ds = append(ds, losscheck.Delivery{ID: strconv.Itoa(i), Type: m.Type, UID: string(m.UID), ResourceVersion: m.ResourceVersion})
		}
		return append(ds, losscheck.Delivery{ID: "other", Type: "created", UID: "not-ours", ResourceVersion: "1"})
	})
	if o.Writes < 50 || o.Delivered != o.Writes {
		t.Errorf("%s: want every write delivered once, the other object's delivery left out", o)
	}
	live := map[string]bool{}
	for _, m := range w.Made() {
		if !strings.HasPrefix(m.Name, "a-") && !strings.HasPrefix(m.Name, "b-") || (m.User == "a") != strings.HasPrefix(m.Name, "a-") {
			t.Errorf("write %+v: name or user not of its writer", m)
		}
		live[m.Name] = m.Type != "deleted"
	}
	list, err := env.Dynamic(t).Resource(WidgetsGVR).Namespace(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for name, ok := range live {
		if ok {
			n++
			if !slices.ContainsFunc(list.Items, func(u unstructured.Unstructured) bool { return u.GetName() == name }) {
				t.Errorf("%s was written and not deleted, and is not there", name)
			}
		}
	}
	if n != len(list.Items) {
		t.Errorf("%d widgets live by the writes, %d listed", n, len(list.Items))
	}
}
