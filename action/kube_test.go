package action

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
	"github.com/fieldwatch/fieldwatch/rules"
)

var widgetsGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

var installCRDs sync.Once

// cluster returns clients of the shared control plane, with the Widget CRD
// installed, and a fresh namespace for the test.
func cluster(t *testing.T) (kubernetes.Interface, dynamic.Interface, string) {
	t.Helper()
	env := testenv.Shared(t)
	var err error
	installCRDs.Do(func() {
		var root string
		if root, err = testenv.RepoRoot(); err == nil {
			_, err = env.InstallCRDs(filepath.Join(root, "examples", "crds", "widgets.yaml"))
		}
	})
	if err != nil {
		t.Fatalf("install CRDs: %v", err)
	}
	kube, dyn := env.Clientset(t), env.Dynamic(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "action-"}}
	ns, err = kube.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	return kube, dyn, ns.Name
}

func kubeHarness(t *testing.T, kube kubernetes.Interface, dyn dynamic.Interface, mutate func(*Options)) *harness {
	t.Helper()
	return newHarness(t, func(o *Options) {
		o.Kube, o.Dynamic = kube, dyn
		o.ReportingController = "example.com/fieldwatch-test"
		o.ReportingInstance = "test-instance"
		if mutate != nil {
			mutate(o)
		}
	})
}

// firingFor returns a firing of r about obj, with a payload like the
// watcher's for an update of spec.size from 1 to 2.
func firingFor(r *rules.Rule, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) rules.Firing {
	ref := rules.ObjectRef{
		Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource, Kind: obj.GetKind(),
		Namespace: obj.GetNamespace(), Name: obj.GetName(), UID: string(obj.GetUID()), ResourceVersion: obj.GetResourceVersion(),
	}
	id := fmt.Sprintf("%s/%s/%s", ref.UID, ref.ResourceVersion, r.Name)
	now := time.Now().UTC().Truncate(time.Microsecond)
	payload, _ := json.Marshal(map[string]any{
		"id": id, "time": now.Format(rules.TimeFormat), "rule": r.Name, "type": "updated",
		"resource":  map[string]any{"group": gvr.Group, "version": gvr.Version, "resource": gvr.Resource, "kind": ref.Kind},
		"namespace": ref.Namespace, "name": ref.Name, "uid": ref.UID, "resourceVersion": ref.ResourceVersion,
		"changes": []any{map[string]any{"op": "replace", "path": "/spec/size", "value": 2, "oldValue": 1}},
	})
	return rules.Firing{ID: id, Rule: r, Payload: payload, Object: ref, Time: now, Type: change.Updated}
}

func createWidget(t *testing.T, dyn dynamic.Interface, ns, name string) *unstructured.Unstructured {
	t.Helper()
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"size": int64(2), "color": "blue"},
	}}
	got, err := dyn.Resource(widgetsGVR).Namespace(ns).Create(context.Background(), w, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create widget: %v", err)
	}
	return got
}

func getWidget(t *testing.T, dyn dynamic.Interface, ns, name string) *unstructured.Unstructured {
	t.Helper()
	got, err := dyn.Resource(widgetsGVR).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get widget: %v", err)
	}
	return got
}

// deliverAndWait delivers f and waits for its done.
func deliverAndWait(t *testing.T, h *harness, f rules.Firing) {
	t.Helper()
	done := newDoneCounter(t)
	h.deliver(t, f, done.fn(f.ID))
	testenv.Eventually(t, 30*time.Second, "done", func() bool { return done.count(f.ID) == 1 })
}

func eventsRegarding(t *testing.T, kube kubernetes.Interface, ns, name string) []eventsv1.Event {
	t.Helper()
	list, err := kube.EventsV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list events: %v", err)
	}
	var out []eventsv1.Event
	for _, ev := range list.Items {
		if ev.Regarding.Name == name {
			out = append(out, ev)
		}
	}
	return out
}

// TestEvent records Events on the real apiserver and reads them back.
func TestEvent(t *testing.T) {
	kube, dyn, ns := cluster(t)
	h := kubeHarness(t, kube, dyn, nil)
	note, err := rules.ParseTemplate("note", `size {{(index .changes 0).oldValue}} -> {{(index .changes 0).value}} on {{.name}}`, false)
	if err != nil {
		t.Fatal(err)
	}
	w := createWidget(t, dyn, ns, "evented")

	r := &rules.Rule{Name: "widget-resized", Actions: []rules.Action{{Event: &rules.EventAction{Reason: "WidgetResized", Type: "Warning", Note: note}}}}
	f := firingFor(r, widgetsGVR, w)
	deliverAndWait(t, h, f)
	// The same firing again (a retry whose response was lost, a replay)
	// records no second Event.
	deliverAndWait(t, h, f)
	if dls := h.deadLetters(t); len(dls) != 0 {
		t.Fatalf("dead letters: %+v", dls)
	}
	evs := eventsRegarding(t, kube, ns, "evented")
	if len(evs) != 1 {
		t.Fatalf("%d events regarding the widget, want 1: %+v", len(evs), evs)
	}
	ev := evs[0]
	want := corev1.ObjectReference{
		APIVersion: "example.com/v1", Kind: "Widget", Namespace: ns, Name: "evented",
		UID: w.GetUID(), ResourceVersion: w.GetResourceVersion(),
	}
	if ev.Regarding != want {
		t.Errorf("regarding = %+v, want %+v", ev.Regarding, want)
	}
	for field, pair := range map[string][2]string{
		"reason":              {ev.Reason, "WidgetResized"},
		"type":                {ev.Type, "Warning"},
		"note":                {ev.Note, "size 1 -> 2 on evented"},
		"action":              {ev.Action, "widget-resized"},
		"reportingController": {ev.ReportingController, "example.com/fieldwatch-test"},
		"reportingInstance":   {ev.ReportingInstance, "test-instance"},
	} {
		if pair[0] != pair[1] {
			t.Errorf("%s = %q, want %q", field, pair[0], pair[1])
		}
	}
	if ev.EventTime.IsZero() {
		t.Error("eventTime not set")
	}
}

// TestEventDefaultNoteAndClusterScope: without a note template the Event
// summarises the change; an Event about a cluster-scoped object goes to
// the default namespace.
func TestEventDefaultNoteAndClusterScope(t *testing.T) {
	kube, dyn, ns := cluster(t)
	h := kubeHarness(t, kube, dyn, nil)
	nsObj, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Get(context.Background(), ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := &rules.Rule{Name: "ns-watch", Actions: []rules.Action{{Event: &rules.EventAction{Reason: "Changed"}}}}
	f := firingFor(r, schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, nsObj)
	deliverAndWait(t, h, f)
	if dls := h.deadLetters(t); len(dls) != 0 {
		t.Fatalf("dead letters: %+v", dls)
	}
	evs := eventsRegarding(t, kube, metav1.NamespaceDefault, ns)
	if len(evs) != 1 {
		t.Fatalf("%d events in default regarding namespace %s, want 1", len(evs), ns)
	}
	ev := evs[0]
	if ev.Note != "ns-watch: updated /spec/size: 1 -> 2" || ev.Type != "Normal" || ev.Regarding.Namespace != "" || ev.Regarding.Kind != "Namespace" {
		t.Errorf("event note %q type %q regarding %+v", ev.Note, ev.Type, ev.Regarding)
	}
}

// TestEventRateLimit: a rule's Events are throttled client-side: over the
// rate they wait (and so does the queue), none is dropped.
func TestEventRateLimit(t *testing.T) {
	kube, dyn, ns := cluster(t)
	const qps, n = 20, 11
	h := kubeHarness(t, kube, dyn, func(o *Options) {
		o.EventQPS = qps
		o.EventBurst = 1
	})
	w := createWidget(t, dyn, ns, "noisy")
	r := &rules.Rule{Name: "noisy", Actions: []rules.Action{{Event: &rules.EventAction{Reason: "Noise"}}}}
	done := newDoneCounter(t)
	start := time.Now()
	for i := range n {
		f := firingFor(r, widgetsGVR, w)
		f.ID = fmt.Sprintf("%s/%d", f.ID, i)
		h.deliver(t, f, done.fn(f.ID))
	}
	testenv.Eventually(t, 30*time.Second, "all done", func() bool { return done.total.Load() == n })
	if el, least := time.Since(start), time.Duration(n-1)*time.Second/qps; el < least*9/10 {
		t.Errorf("%d events took %s, want at least %s at %d/s", n, el, least, qps)
	}
	if got := len(eventsRegarding(t, kube, ns, "noisy")); got != n {
		t.Errorf("%d events, want %d", got, n)
	}
}

// TestPatch applies merge and JSON patches, to the object and to its
// status subresource.
func TestPatch(t *testing.T) {
	kube, dyn, ns := cluster(t)
	h := kubeHarness(t, kube, dyn, nil)
	statusAudited := func(w *unstructured.Unstructured) error {
		if got, _, _ := unstructured.NestedString(w.Object, "status", "phase"); got != "Audited" {
			return fmt.Errorf("status.phase = %q", got)
		}
		return nil
	}
	cases := []struct {
		name  string
		spec  rules.PatchAction
		stale bool // the object changed after the firing: a conflict to resolve
		check func(w *unstructured.Unstructured) error
	}{
		{
			name: "merge",
			spec: rules.PatchAction{Merge: map[string]any{"metadata": map[string]any{"annotations": map[string]any{"audited": "yes"}}}},
			check: func(w *unstructured.Unstructured) error {
				if got := w.GetAnnotations()["audited"]; got != "yes" {
					return fmt.Errorf("annotation audited = %q", got)
				}
				return nil
			},
		},
		{
			name: "json",
			spec: rules.PatchAction{JSON: []map[string]any{{"op": "add", "path": "/metadata/labels", "value": map[string]any{"audited": "yes"}}}},
			check: func(w *unstructured.Unstructured) error {
				if got := w.GetLabels()["audited"]; got != "yes" {
					return fmt.Errorf("label audited = %q", got)
				}
				return nil
			},
		},
		{
			name:  "merge status",
			spec:  rules.PatchAction{Merge: map[string]any{"status": map[string]any{"phase": "Audited"}}, Subresource: "status"},
			check: statusAudited,
		},
		{
			name:  "merge status, object changed since the firing",
			spec:  rules.PatchAction{Merge: map[string]any{"status": map[string]any{"phase": "Audited"}}, Subresource: "status"},
			stale: true,
			check: statusAudited,
		},
		{
			name:  "merge, object changed since the firing",
			spec:  rules.PatchAction{Merge: map[string]any{"metadata": map[string]any{"annotations": map[string]any{"audited": "yes"}}}},
			stale: true,
			check: func(w *unstructured.Unstructured) error {
				if got := w.GetAnnotations()["audited"]; got != "yes" {
					return fmt.Errorf("annotation audited = %q", got)
				}
				return nil
			},
		},
		{
			name:  "json status",
			spec:  rules.PatchAction{JSON: []map[string]any{{"op": "add", "path": "/status", "value": map[string]any{"phase": "Audited"}}}, Subresource: "status"},
			check: statusAudited,
		},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("patched-%d", i)
			w := createWidget(t, dyn, ns, name)
			f := firingFor(&rules.Rule{Name: "patch-" + name, Actions: []rules.Action{{Patch: &tc.spec}}}, widgetsGVR, w)
			if tc.stale {
				w.Object["spec"].(map[string]any)["color"] = "red"
				if _, err := dyn.Resource(widgetsGVR).Namespace(ns).Update(context.Background(), w, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			deliverAndWait(t, h, f)
			if dls := h.deadLetters(t); len(dls) != 0 {
				t.Fatalf("dead letters: %+v", dls)
			}
			got := getWidget(t, dyn, ns, name)
			if err := tc.check(got); err != nil {
				t.Error(err)
			}
			if size, _, _ := unstructured.NestedInt64(got.Object, "spec", "size"); size != 2 {
				t.Errorf("spec.size = %d, want 2 (untouched)", size)
			}
		})
	}
}

// TestPatchRecreatedObjectFails: a patch meant for an object that was
// deleted and recreated under the same name fails for good, and the new
// object is left alone; so does one for an object that is gone.
func TestPatchRecreatedObjectFails(t *testing.T) {
	kube, dyn, ns := cluster(t)
	h := kubeHarness(t, kube, dyn, nil)
	specs := map[string]rules.PatchAction{
		"merge":        {Merge: map[string]any{"metadata": map[string]any{"annotations": map[string]any{"audited": "yes"}}}},
		"json":         {JSON: []map[string]any{{"op": "add", "path": "/metadata/annotations", "value": map[string]any{"audited": "yes"}}}},
		"merge status": {Merge: map[string]any{"status": map[string]any{"phase": "Audited"}}, Subresource: "status"},
		"json status":  {JSON: []map[string]any{{"op": "add", "path": "/status", "value": map[string]any{"phase": "Audited"}}}, Subresource: "status"},
	}
	i := 0
	for name, spec := range specs {
		for _, recreate := range []bool{true, false} {
			i++
			t.Run(fmt.Sprintf("%s recreated=%v", name, recreate), func(t *testing.T) {
				objName := fmt.Sprintf("replaced-%d", i)
				old := createWidget(t, dyn, ns, objName)
				ctx := context.Background()
				if err := dyn.Resource(widgetsGVR).Namespace(ns).Delete(ctx, objName, metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
				var fresh *unstructured.Unstructured
				if recreate {
					fresh = createWidget(t, dyn, ns, objName)
				}
				r := &rules.Rule{Name: "guard-" + objName, Actions: []rules.Action{{Patch: &spec}}}
				f := firingFor(r, widgetsGVR, old)
				deliverAndWait(t, h, f)

				var dl *DeadLetter
				for _, d := range h.deadLetters(t) {
					if d.ID == f.ID {
						dl = &d
					}
				}
				if dl == nil {
					t.Fatal("the patch was not dead-lettered")
				}
				if dl.Attempts != 1 {
					t.Errorf("attempts = %d, want 1 (not worth retrying): %s", dl.Attempts, dl.Error)
				}
				if !recreate {
					return
				}
				got := getWidget(t, dyn, ns, objName)
				if got.GetUID() != fresh.GetUID() {
					t.Fatalf("uid changed again")
				}
				if got.GetResourceVersion() != fresh.GetResourceVersion() {
					t.Errorf("the new object was written: resourceVersion %s -> %s", fresh.GetResourceVersion(), got.GetResourceVersion())
				}
				if _, ok := got.GetAnnotations()["audited"]; ok {
					t.Error("the new object got the annotation")
				}
				if phase, _, _ := unstructured.NestedString(got.Object, "status", "phase"); phase != "" {
					t.Errorf("the new object got status.phase %q", phase)
				}
			})
		}
	}
}

// TestPatchDryRun: in dry-run mode the patch is logged, not sent.
func TestPatchDryRun(t *testing.T) {
	kube, dyn, ns := cluster(t)
	h := kubeHarness(t, kube, dyn, func(o *Options) { o.DryRun = true })
	w := createWidget(t, dyn, ns, "dry")
	spec := rules.PatchAction{Merge: map[string]any{"metadata": map[string]any{"annotations": map[string]any{"audited": "yes"}}}}
	r := &rules.Rule{Name: "dry", Actions: []rules.Action{{Patch: &spec}}}
	deliverAndWait(t, h, firingFor(r, widgetsGVR, w))
	got := getWidget(t, dyn, ns, "dry")
	if got.GetResourceVersion() != w.GetResourceVersion() {
		t.Errorf("dry run wrote the object")
	}
	logs := h.logs.String()
	if !strings.Contains(logs, "dry run: patch not sent") || !strings.Contains(logs, `"uid":"`+string(w.GetUID())+`"`) {
		t.Errorf("the patch is not in the log:\n%s", logs)
	}
}

// TestClassifyKube: which apiserver errors are worth retrying.
func TestClassifyKube(t *testing.T) {
	gr := schema.GroupResource{Group: "example.com", Resource: "widgets"}
	cases := []struct {
		err        error
		permanent  bool
		retryAfter time.Duration
	}{
		{apierrors.NewConflict(gr, "w", errors.New("changed")), false, 0},
		{apierrors.NewTooManyRequests("slow down", 3), false, 3 * time.Second},
		{apierrors.NewServerTimeout(gr, "patch", 2), false, 2 * time.Second},
		{apierrors.NewTimeoutError("timeout", 0), false, 0},
		{apierrors.NewInternalError(errors.New("boom")), false, 0},
		{apierrors.NewServiceUnavailable("unavailable"), false, 0},
		{errors.New("dial tcp: connection refused"), false, 0},
		{apierrors.NewNotFound(gr, "w"), true, 0},
		{apierrors.NewForbidden(gr, "w", errors.New("rbac")), true, 0},
		{apierrors.NewBadRequest("bad"), true, 0},
		{apierrors.NewInvalid(schema.GroupKind{Group: "example.com", Kind: "Widget"}, "w", nil), true, 0},
		{apierrors.NewUnauthorized("who"), true, 0},
	}
	for _, tc := range cases {
		got := classifyKube(fmt.Errorf("wrapped: %w", tc.err))
		if isPermanent(got) != tc.permanent || retryAfter(got) != tc.retryAfter {
			t.Errorf("%v: permanent %v retryAfter %s, want %v %s", tc.err, isPermanent(got), retryAfter(got), tc.permanent, tc.retryAfter)
		}
	}
}
