package app

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/crd/diff"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
	"github.com/fieldwatch/fieldwatch/rules"
	"github.com/fieldwatch/fieldwatch/watcher"
)

var crdRes = change.Resource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions", Kind: "CustomResourceDefinition", Preferred: true}

// gadgetsCRD is the Gadget CRD of group at v1 and v2 (v2 served when
// two), with spec.color's enum and, with owner, spec.owner.
func gadgetsCRD(group, enum string, owner, two bool) string {
	props := "color: {type: string, enum: " + enum + "}, size: {type: integer}"
	if owner {
		props += ", owner: {type: string}"
	}
	version := func(name string, served, storage bool) string {
		return fmt.Sprintf("    - {name: %s, served: %v, storage: %v, schema: {openAPIV3Schema: {type: object, properties: {spec: {type: object, properties: {%s}}}}}}\n",
			name, served, storage, props)
	}
	return fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.%[1]s}
spec:
  group: %[1]s
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget, listKind: GadgetList}
  versions:
`, group) + version("v1", true, true) + version("v2", two, false)
}

// TestCRDImpactList runs the impact scan of the pipeline where the
// watcher's cache cannot give the objects (here, no watcher): it lists
// them from the apiserver after the change, finds what the remaining
// schema rejects, says that the objects setting a removed field cannot be
// found, and stops at its bounds or on a failed list with an impactError
// and what it found so far.
func TestCRDImpactList(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	const group = "list.impact.example.com"
	ns := "crd-impact-list"
	env.EnsureNamespace(t, ns)
	apply := func(manifest string) map[string]any {
		t.Helper()
		objs, err := env.Apply(ctx, testenv.ApplyOptions{FieldManager: "kubectl"}, []byte(manifest))
		if err != nil {
			t.Fatal(err)
		}
		return objs[0].Object
	}
	oldCRD := apply(gadgetsCRD(group, "[red, green, blue]", true, true))
	var objs strings.Builder
	for i, color := range []string{"red", "green", "blue", "green", "red"} {
		fmt.Fprintf(&objs, "---\napiVersion: %s/v1\nkind: Gadget\nmetadata: {name: g%d, namespace: %s}\nspec: {color: %s, owner: o%d}\n", group, i, ns, color, i)
	}
	apply(objs.String())
	// A field removed, an enum narrowed, v2 no longer served.
	newCRD := apply(gadgetsCRD(group, "[red, blue]", false, false))
	safeCRD := apply(gadgetsCRD(group, "[red, blue, white]", false, false))

	dyn := env.Dynamic(t)
	broken, err := dynamic.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		old, new   map[string]any
		dyn        dynamic.Interface
		maxObjects int
		timeout    time.Duration
		scanned    int
		impact     []string // check effect count samples error-prefix
		impactErr  string   // prefix
		failure    string   // the failure reason counted
	}{
		{name: "listed after the change", old: oldCRD, new: newCRD, dyn: dyn, maxObjects: 100, timeout: time.Minute, scanned: 5, impact: []string{
			"served-version-removed unserved 0 [] the objects were listed from the apiserver after the change (not cached before it: not watching): the apiserver serves them at the versions it still serves",
			"enum-values-removed rejected 2 [g1 g3] ",
			"field-removed pruned 0 [] the objects were listed from the apiserver after the change (not cached before it: not watching): the apiserver prunes spec.owner from every read",
		}},
		{name: "object limit", old: oldCRD, new: newCRD, dyn: dyn, maxObjects: 2, timeout: time.Minute, scanned: 2,
			impactErr: "stopped after 2 objects (--crd-impact-max-objects): the counts are lower bounds", failure: "limit"},
		{name: "time limit", old: oldCRD, new: newCRD, dyn: dyn, maxObjects: 100, timeout: time.Nanosecond, scanned: 0,
			impactErr: "stopped after 1ns (--crd-impact-timeout), 0 objects read: the counts are lower bounds", failure: "timeout"},
		{name: "list fails", old: oldCRD, new: newCRD, dyn: broken, maxObjects: 100, timeout: time.Minute, scanned: 0,
			impactErr: "list gadgets.v1." + group + ": ", failure: "error"},
		{name: "a safe change scans nothing", old: newCRD, new: safeCRD, dyn: broken, maxObjects: 100, timeout: time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &app{cfg: Config{CRDImpactMaxObjects: tt.maxObjects, CRDImpactTimeout: tt.timeout}, log: slog.New(slog.DiscardHandler),
				metrics: newMetrics(prometheus.NewRegistry()), dyn: tt.dyn}
			now := time.Now()
			rc := &rules.Change{Type: change.Updated, Resource: crdRes, Old: tt.old, New: tt.new, Time: now}
			a.crdImpact(ctx, &watcher.Change{Type: change.Updated, Resource: crdRes, Time: now}, rc)
			res := rc.CRD
			if res == nil {
				t.Fatal("no comparison")
			}
			if res.Scanned != tt.scanned || !strings.HasPrefix(res.ImpactError, tt.impactErr) || (tt.impactErr == "") != (res.ImpactError == "") {
				t.Errorf("scanned %d, impactError %q; want %d, %q", res.Scanned, res.ImpactError, tt.scanned, tt.impactErr)
			}
			if tt.impact != nil {
				var got []string
				for _, im := range res.Impact {
					var names []string
					for _, h := range im.Objects {
						names = append(names, h.Name)
					}
					got = append(got, fmt.Sprintf("%s %s %d %v %s", im.Check, im.Effect, im.Count, names, im.Error))
				}
				for i := range got {
					if i >= len(tt.impact) || !strings.HasPrefix(got[i], tt.impact[i]) {
						t.Errorf("impact:\n  %s\nwant (prefixes):\n  %s", strings.Join(got, "\n  "), strings.Join(tt.impact, "\n  "))
						break
					}
				}
			}
			scans := testutil.ToFloat64(a.metrics.impactScans.WithLabelValues("list"))
			if want := map[bool]float64{true: 0, false: 1}[res.Breaking == 0]; scans != want {
				t.Errorf("list scans %v, want %v", scans, want)
			}
			if got := testutil.ToFloat64(a.metrics.impactObjects); got != float64(tt.scanned) {
				t.Errorf("objects scanned metric %v, want %d", got, tt.scanned)
			}
			for _, reason := range []string{"limit", "timeout", "error"} {
				want := map[bool]float64{true: 1, false: 0}[reason == tt.failure]
				if got := testutil.ToFloat64(a.metrics.impactFailures.WithLabelValues(reason)); got != want {
					t.Errorf("failures{reason=%s} = %v, want %v", reason, got, want)
				}
			}
		})
	}
}

func TestListVersion(t *testing.T) {
	crd := func(served ...string) map[string]any {
		var versions []any
		for _, v := range []string{"v1alpha1", "v1beta1", "v1", "v2"} {
			versions = append(versions, map[string]any{"name": v, "served": slices.Contains(served, v), "storage": v == "v1"})
		}
		return map[string]any{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "spec": map[string]any{"versions": versions}}
	}
	tests := []struct {
		old, new []string
		want     string
	}{
		{[]string{"v1", "v1beta1"}, []string{"v1", "v1beta1"}, "v1"},
		{[]string{"v1", "v1beta1"}, []string{"v1beta1", "v1alpha1"}, "v1beta1"},
		{[]string{"v1beta1"}, []string{"v1beta1", "v2"}, "v1beta1"},
		{[]string{"v1"}, nil, ""},
	}
	for _, tt := range tests {
		old, err := diff.FromMap(crd(tt.old...))
		if err != nil {
			t.Fatal(err)
		}
		new, err := diff.FromMap(crd(tt.new...))
		if err != nil {
			t.Fatal(err)
		}
		if got := listVersion(old, new); got != tt.want {
			t.Errorf("listVersion(%v -> %v) = %q, want %q", tt.old, tt.new, got, tt.want)
		}
	}
}

// TestCRDImpactCache runs the impact scan of the pipeline from the
// watcher's cache: one filled before the change still has the field the
// change removes; one filled after it (a fieldwatch started after the
// change) does not, and the scan lists the objects instead and says the
// removal's impact cannot be computed.
func TestCRDImpactCache(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	const group = "cache.impact.example.com"
	ns := "crd-impact-cache"
	env.EnsureNamespace(t, ns)
	apply := func(manifest string) map[string]any {
		t.Helper()
		objs, err := env.Apply(ctx, testenv.ApplyOptions{FieldManager: "kubectl"}, []byte(manifest))
		if err != nil {
			t.Fatal(err)
		}
		return objs[0].Object
	}
	oldCRD := apply(gadgetsCRD(group, "[red, green, blue]", true, false))
	var objs strings.Builder
	for i, spec := range []string{"{color: red, owner: a}", "{color: green}", "{color: blue, owner: b}", "{color: red}"} {
		fmt.Fprintf(&objs, "---\napiVersion: %s/v1\nkind: Gadget\nmetadata: {name: g%d, namespace: %s}\nspec: %s\n", group, i, ns, spec)
	}
	apply(objs.String())
	startWatcher := func() *watcher.Watcher {
		t.Helper()
		w, err := watcher.New(env.Config(), watcher.Config{
			Selectors:  []change.Selector{{Group: group, Resource: "gadgets"}},
			Projection: func(change.Resource) change.Projection { return change.Projection{Full: true} },
			Handler:    watcher.HandlerFunc(func(context.Context, *watcher.Change) error { return nil }),
			Logger:     slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = w.Run(ctx)
		}()
		t.Cleanup(func() { cancel(); <-done })
		testenv.Eventually(t, time.Minute, "the watcher to cache the gadgets", func() bool { return w.Synced() && w.CachedObjects() == 4 })
		return w
	}
	before := startWatcher()
	newCRD := apply(gadgetsCRD(group, "[red, blue]", false, false))
	scan := func(w *watcher.Watcher) (*app, *diff.Result) {
		a := &app{cfg: Config{CRDImpactMaxObjects: 100, CRDImpactTimeout: time.Minute}, log: slog.New(slog.DiscardHandler),
			metrics: newMetrics(prometheus.NewRegistry()), dyn: env.Dynamic(t)}
		a.watcher.Store(w)
		now := time.Now()
		rc := &rules.Change{Type: change.Updated, Resource: crdRes, Old: oldCRD, New: newCRD, Time: now}
		a.crdImpact(ctx, &watcher.Change{Type: change.Updated, Resource: crdRes, Time: now}, rc)
		return a, rc.CRD
	}
	summary := func(res *diff.Result) []string {
		var out []string
		for _, im := range res.Impact {
			var names []string
			for _, h := range im.Objects {
				names = append(names, h.Name)
			}
			out = append(out, fmt.Sprintf("%s %s %d %v", im.Check, im.Effect, im.Count, names))
		}
		return out
	}

	// At once, before the apiserver drops the informer's watch.
	a, res := scan(before)
	if got, want := summary(res), []string{"enum-values-removed rejected 1 [g1]", "field-removed pruned 2 [g0 g2]"}; !slices.Equal(got, want) || res.Scanned != 4 {
		t.Errorf("from the cache filled before the change: scanned %d, impact %q, want %q", res.Scanned, got, want)
	}
	for _, im := range res.Impact {
		if im.Error != "" {
			t.Errorf("%s: error %q", im.Check, im.Error)
		}
	}
	if n := testutil.ToFloat64(a.metrics.impactScans.WithLabelValues("cache")); n != 1 {
		t.Errorf("cache scans %v, want 1", n)
	}

	after := startWatcher()
	a, res = scan(after)
	if got, want := summary(res), []string{"enum-values-removed rejected 1 [g1]", "field-removed pruned 0 []"}; !slices.Equal(got, want) || res.Scanned != 4 {
		t.Errorf("from a cache filled after the change: scanned %d, impact %q, want %q", res.Scanned, got, want)
	}
	if e := res.Impact[len(res.Impact)-1].Error; !strings.Contains(e, "not cached before it: the cache was filled from a list at resourceVersion") ||
		!strings.Contains(e, "the apiserver prunes spec.owner from every read after the change") {
		t.Errorf("field-removed error %q", e)
	}
	if n := testutil.ToFloat64(a.metrics.impactScans.WithLabelValues("list")); n != 1 {
		t.Errorf("list scans %v, want 1", n)
	}
}
