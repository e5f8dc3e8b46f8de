package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fieldwatch/fieldwatch/internal/history"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// statesRules keep the states of one CRD and of the Widgets in one
// namespace, their owners redacted.
const statesRules = `rules:
  - name: crd-states
    match:
      resources: [{group: apiextensions.k8s.io, kind: CustomResourceDefinition}]
      names: [gadgets.states.example.com]
    history: {states: true}
    actions: [{log: {}}]
  - name: widget-states
    match:
      resources: [{group: example.com, kind: Widget}]
      namespaces: [states]
    on: [delete]
    redact: [spec.owner]
    history: {states: true}
    actions: [{log: {}}]
`

var (
	crdGVR    = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	gadgetGVR = schema.GroupVersionResource{Group: "states.example.com", Version: "v1", Resource: "gadgets"}
)

// The plane audits writes to Widgets, not to CRDs: a Widget's change
// names its user, a CRD's its field manager (the writer's user agent)
// when managedFields tell it.

// gadgetCRD is the Gadget CRD with the properties f0 .. f(n-1) in its
// spec's schema.
func gadgetCRD(n int) *unstructured.Unstructured {
	props := map[string]any{"size": map[string]any{"type": "integer"}, "password": map[string]any{"type": "string"}}
	for i := range n {
		props[fmt.Sprintf("f%d", i)] = map[string]any{"type": "string", "description": fmt.Sprintf("field %d", i)}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "gadgets.states.example.com"},
		"spec": map[string]any{
			"group": "states.example.com", "scope": "Namespaced",
			"names": map[string]any{"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true, "schema": map[string]any{
				"openAPIV3Schema": map[string]any{"type": "object", "properties": map[string]any{
					"spec": map[string]any{"type": "object", "properties": props},
				}},
			}}},
		},
	}}
}

// read is an object as a client read it after a write.
type read struct {
	obj map[string]any
	who string // who made the write before it (State.Who); "" when another write came between
}

// TestStatesRebuild: a CRD changed 30 times and a custom resource changed
// 500 times, by three users, rebuild from the history, at the time
// fieldwatch observed each version, to exactly what a client read (less
// managedFields, the owner redacted), and between two versions to the
// earlier one (at a random time before the next version); the last
// change names who made it, a diff lists the changes between two CRD
// versions with theirs, and no owner's value is in any rebuilt state nor
// in the database's files.
func TestStatesRebuild(t *testing.T) {
	plane := sharedAuditPlane(t)
	env := plane.env
	env.EnsureNamespace(t, "states")
	const (
		widgetWrites = 500
		crdChanges   = 30
	)
	users := []testenv.Writer{env.Impersonating(t, "alice"), env.Impersonating(t, "bob"), env.Impersonating(t, "carol")}
	ctx := context.Background()
	t.Cleanup(func() {
		for _, name := range []string{"w0", "w1"} {
			_ = env.Dynamic(t).Resource(widgetGVR).Namespace("states").Delete(ctx, name, metav1.DeleteOptions{})
		}
		_ = env.Dynamic(t).Resource(crdGVR).Delete(ctx, "gadgets.states.example.com", metav1.DeleteOptions{})
	})
	// A Widget there before fieldwatch: its first state is its baseline.
	before, err := users[0].Dynamic.Resource(widgetGVR).Namespace("states").Create(ctx, testWidget("w0", 7), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stateDir := t.TempDir()
	fw := runFieldwatch(t, plane, statesRules, func(c *Config) { c.StateDir = stateDir })
	fw.warmUp(t, plane)
	store := fw.app.history.store
	w0 := history.ObjectKey{Group: "example.com", Resource: "widgets", Namespace: "states", Name: "w0"}
	var baseline history.Rebuilt
	testenv.EventuallyWhy(t, time.Minute, "w0's baseline", func() (bool, string) {
		baseline, err = history.Rebuild(ctx, store, w0, time.Now())
		return err == nil, fmt.Sprint(err)
	})
	if want := normalised(t, before.Object, true); canonical(t, baseline.Object) != want || !baseline.Last.Baseline {
		t.Errorf("w0's baseline (%+v):\n got %s\nwant %s", baseline.Last, canonical(t, baseline.Object), want)
	}

	reads := map[string]map[string]read{"crd": {}, "widget": {}} // by resourceVersion
	// get reads the object after a write by who, which wrote the version
	// written: a later one (the CRD's status) is by someone else.
	get := func(kind string, gvr schema.GroupVersionResource, ns, name, who string, written *unstructured.Unstructured) {
		t.Helper()
		o, err := env.Dynamic(t).Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if o.GetResourceVersion() != written.GetResourceVersion() {
			who = ""
		}
		reads[kind][o.GetResourceVersion()] = read{o.Object, who}
	}
	crds := users[0].Dynamic.Resource(crdGVR)
	written, err := crds.Create(ctx, gadgetCRD(0), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	get("crd", crdGVR, "", "gadgets.states.example.com", users[0].UserAgent, written)
	testenv.Eventually(t, time.Minute, "the Gadget CRD to serve", func() bool {
		_, err := env.Dynamic(t).Resource(gadgetGVR).Namespace("states").List(ctx, metav1.ListOptions{})
		return err == nil
	})
	w := testWidget("w1", 0)
	w.Object["spec"].(map[string]any)["owner"] = "s3cret-0"
	if written, err = users[1].Dynamic.Resource(widgetGVR).Namespace("states").Create(ctx, w, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	get("widget", widgetGVR, "states", "w1", "bob", written)
	widgetKey := history.ObjectKey{Group: "example.com", Resource: "widgets", Namespace: "states", Name: "w1"}
	fields := 0
	for i := 1; i <= widgetWrites; i++ {
		// The users take turns by ten writes: the audit stream tells
		// apart the writes of two users to one object when the first's
		// change was attributed before the second's write (a window
		// holding both is ambiguous, and names no user).
		u := users[(i-1)/10%len(users)]
		if i%10 == 1 {
			settled(t, store, widgetKey, env, widgetGVR)
		}
		if i%8 == 0 && fields < crdChanges {
			// The CRD: one more field, or a description changed.
			fields++
			o, err := u.Dynamic.Resource(crdGVR).Get(ctx, "gadgets.states.example.com", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			o.Object["spec"] = gadgetCRD(fields).Object["spec"]
			if written, err = u.Dynamic.Resource(crdGVR).Update(ctx, o, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			get("crd", crdGVR, "", "gadgets.states.example.com", u.UserAgent, written)
		}
		if i%3 == 0 && fields < crdChanges {
			fields++
			patch := fmt.Sprintf(`{"spec":{"versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object","properties":{"spec":{"type":"object","properties":%s}}}}}]}}`,
				plainJSON(t, gadgetCRD(fields).Object["spec"].(map[string]any)["versions"].([]any)[0].(map[string]any)["schema"].(map[string]any)["openAPIV3Schema"].(map[string]any)["properties"].(map[string]any)["spec"].(map[string]any)["properties"]))
			if written, err = u.Dynamic.Resource(crdGVR).Patch(ctx, "gadgets.states.example.com", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			get("crd", crdGVR, "", "gadgets.states.example.com", u.UserAgent, written)
		}
		patch := fmt.Sprintf(`{"spec":{"size":%d,"tags":["t%d"]}}`, i, i%4)
		if i%3 == 0 {
			patch = fmt.Sprintf(`{"spec":{"size":%d,"owner":"s3cret-%d"}}`, i, i)
		}
		if written, err = u.Dynamic.Resource(widgetGVR).Namespace("states").Patch(ctx, "w1", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		get("widget", widgetGVR, "states", "w1", u.Username, written)
	}

	keys := map[string]history.ObjectKey{
		"crd":    {Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions", Name: "gadgets.states.example.com"},
		"widget": widgetKey,
	}
	gvrs := map[string]schema.GroupVersionResource{"crd": crdGVR, "widget": widgetGVR}
	for kind, key := range keys {
		settled(t, store, key, env, gvrs[kind])
		var states []history.State
		err := store.(history.StateStore).StatesOf(ctx, key, time.Time{}, history.MaxTime, func(s *history.State) error {
			states = append(states, *s)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		rnd := rand.New(rand.NewPCG(1, uint64(len(states))))
		checked := 0
		for i, s := range states {
			r, ok := reads[kind][s.ResourceVersion]
			if !ok {
				continue // a version no client read (the CRD's status, written by the apiserver)
			}
			checked++
			at := []time.Time{s.Time}
			if i+1 < len(states) {
				if gap := states[i+1].Time.Sub(s.Time); gap > 0 {
					at = append(at, s.Time.Add(time.Duration(rnd.Int64N(int64(gap)))))
				}
			}
			for _, at := range at {
				got, err := history.Rebuild(ctx, store, key, at)
				if err != nil {
					t.Fatalf("%s at %s: %v", kind, at, err)
				}
				if want := normalised(t, r.obj, kind == "widget"); canonical(t, got.Object) != want {
					t.Fatalf("%s rv %s at %s:\n got %s\nwant %s", kind, s.ResourceVersion, at, canonical(t, got.Object), want)
				}
				if who := got.Last.Who(); r.who != "" && who != r.who && (kind == "widget" || who != "") {
					t.Errorf("%s rv %s: the last change by %q, want %q", kind, s.ResourceVersion, got.Last.Who(), r.who)
				}
				if bytes.Contains(got.Object, []byte("s3cret")) {
					t.Errorf("%s rv %s: an owner in the rebuilt state: %s", kind, s.ResourceVersion, got.Object)
				}
			}
		}
		if checked != len(reads[kind]) {
			t.Errorf("%s: %d of the %d versions read are in the history", kind, checked, len(reads[kind]))
		}
		t.Logf("%s: %d states, %d rebuilt and compared", kind, len(states), checked)
	}

	// A diff between the CRD's third and its last version read: the
	// changes between, each with its user.
	var crdStates []history.State
	_ = store.(history.StateStore).StatesOf(ctx, keys["crd"], time.Time{}, history.MaxTime, func(s *history.State) error {
		if _, ok := reads["crd"][s.ResourceVersion]; ok {
			crdStates = append(crdStates, *s)
		}
		return nil
	})
	if len(crdStates) < 10 {
		t.Fatalf("%d CRD versions read in the history, want at least 10", len(crdStates))
	}
	from, to := crdStates[2], crdStates[len(crdStates)-1]
	d, err := history.DiffStates(ctx, store, keys["crd"], from.Time, to.Time)
	if err != nil {
		t.Fatal(err)
	}
	ours := 0
	for _, c := range d.Changes {
		if r, ok := reads["crd"][c.ResourceVersion]; ok {
			ours++
			if who := c.Who(); (r.who != "" && who != "" && who != r.who) || len(c.Ops) == 0 {
				t.Errorf("CRD change rv %s: by %q with %s, want by %q with operations", c.ResourceVersion, c.Who(), c.Ops, r.who)
			}
		}
	}
	if want := len(crdStates) - 3; ours != want {
		t.Errorf("the diff lists %d of our CRD changes, want %d", ours, want)
	}

	// No owner's value in the database's files.
	for _, f := range []string{"history.db", "history.db-wal"} {
		b, err := os.ReadFile(filepath.Join(stateDir, f))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte("s3cret")) {
			t.Errorf("%s holds an owner's value", f)
		}
	}
}

// settled waits until the history's last state of key is what a client
// reads now.
func settled(t *testing.T, store history.Store, key history.ObjectKey, env *testenv.Env, gvr schema.GroupVersionResource) {
	t.Helper()
	ctx := context.Background()
	testenv.EventuallyWhy(t, time.Minute, key.String()+"'s last state in the history", func() (bool, string) {
		now, err := env.Dynamic(t).Resource(gvr).Namespace(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		r, err := history.Rebuild(ctx, store, key, time.Now())
		if err != nil {
			return false, err.Error()
		}
		return r.Last.ResourceVersion == now.GetResourceVersion(), "last " + r.Last.ResourceVersion + ", now " + now.GetResourceVersion()
	})
}

// normalised is obj as the history keeps it: without managedFields, and
// with spec.owner redacted when redact.
func normalised(t *testing.T, obj map[string]any, redact bool) string {
	t.Helper()
	var c map[string]any
	if err := json.Unmarshal([]byte(plainJSON(t, obj)), &c); err != nil {
		t.Fatal(err)
	}
	delete(c["metadata"].(map[string]any), "managedFields")
	if spec, ok := c["spec"].(map[string]any); ok && redact {
		if _, ok := spec["owner"]; ok {
			spec["owner"] = "<redacted>"
		}
	}
	return plainJSON(t, c)
}

// canonical is the JSON b with its keys sorted and its numbers as
// encoding/json writes them.
func canonical(t *testing.T, b []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return plainJSON(t, v)
}

// plainJSON is v as JSON, keys sorted, without HTML escaping.
func plainJSON(t *testing.T, v any) string {
	t.Helper()
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// TestStatesAcrossRestart: the states of a Widget changed while
// fieldwatch runs, while it is stopped, and after it restarts on the same
// state directory rebuild to what a client read at each version
// fieldwatch saw: every version read while it ran, and, of those made
// while it was stopped, the last (which its restart finds); a Widget
// created while it was stopped has that first state.
func TestStatesAcrossRestart(t *testing.T) {
	plane := sharedAuditPlane(t)
	env := plane.env
	const ns = "states-restart"
	env.EnsureNamespace(t, ns)
	rulesSrc := strings.ReplaceAll(statesRules, "namespaces: [states]", "namespaces: ["+ns+"]")
	stateDir := t.TempDir()
	ctx := context.Background()
	widgets := env.Dynamic(t).Resource(widgetGVR).Namespace(ns)
	key := func(name string) history.ObjectKey {
		return history.ObjectKey{Group: "example.com", Resource: "widgets", Namespace: ns, Name: name}
	}
	reads := map[string]map[string]any{} // w1's, by resourceVersion
	var lastRead string
	write := func(i int) {
		t.Helper()
		o, err := widgets.Patch(ctx, "w1", types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"size":%d,"owner":"s3cret-%d"}}`, i, i)), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		reads[o.GetResourceVersion()], lastRead = o.Object, o.GetResourceVersion()
	}
	// check rebuilds, from the store of a running fieldwatch, every
	// version of w1 in want at the time it was recorded.
	check := func(t *testing.T, store history.Store, want map[string]bool) {
		t.Helper()
		settled(t, store, key("w1"), env, widgetGVR)
		found := map[string]bool{}
		err := store.(history.StateStore).StatesOf(ctx, key("w1"), time.Time{}, history.MaxTime, func(s *history.State) error {
			if r, ok := reads[s.ResourceVersion]; ok {
				got, err := history.Rebuild(ctx, store, key("w1"), s.Time)
				if err != nil {
					return err
				}
				if want := normalised(t, r, true); canonical(t, got.Object) != want {
					t.Errorf("rv %s:\n got %s\nwant %s", s.ResourceVersion, canonical(t, got.Object), want)
				}
				found[s.ResourceVersion] = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for rv := range want {
			if !found[rv] {
				t.Errorf("version %s of w1 is not in the history", rv)
			}
		}
	}
	want := map[string]bool{}
	t.Run("first run", func(t *testing.T) {
		fw := runFieldwatch(t, plane, rulesSrc, func(c *Config) { c.StateDir = stateDir })
		fw.warmUp(t, plane)
		o, err := widgets.Create(ctx, testWidget("w1", 0), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		reads[o.GetResourceVersion()] = o.Object
		want[o.GetResourceVersion()] = true
		for i := 1; i <= 5; i++ {
			write(i)
			want[lastRead] = true
		}
		check(t, fw.app.history.store, want)
	})
	// Stopped: three changes, of which the restart finds the last, and a
	// new Widget.
	for i := 6; i <= 8; i++ {
		write(i)
	}
	want[lastRead] = true
	w2, err := widgets.Create(ctx, testWidget("w2", 2), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("after the restart", func(t *testing.T) {
		fw := runFieldwatch(t, plane, rulesSrc, func(c *Config) { c.StateDir = stateDir })
		fw.warmUp(t, plane)
		store := fw.app.history.store
		settled(t, store, key("w1"), env, widgetGVR)
		for i := 9; i <= 13; i++ {
			write(i)
			want[lastRead] = true
		}
		check(t, store, want)
		var got history.Rebuilt
		testenv.EventuallyWhy(t, time.Minute, "w2's first state", func() (bool, string) {
			got, err = history.Rebuild(ctx, store, key("w2"), time.Now())
			return err == nil, fmt.Sprint(err)
		})
		if want := normalised(t, w2.Object, true); canonical(t, got.Object) != want {
			t.Errorf("w2:\n got %s\nwant %s", canonical(t, got.Object), want)
		}
	})
}
