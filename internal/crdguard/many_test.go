package crdguard

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
	"github.com/fieldwatch/fieldwatch/watcher"
)

// manyCRDs are the CRDs with many Widgets the slow tests and the
// benchmarks share, made once per process by many.
var manyCRDs struct {
	mu   sync.Mutex
	made map[int]*manyWidgets
}

// manyWidgets is a Widget CRD with n objects (one in twenty red) and a
// watcher caching them whole.
type manyWidgets struct {
	crd *apiextensionsv1.CustomResourceDefinition
	w   *watcher.Watcher
	n   int
}

// many returns the Widget CRD with n objects, installing it and its
// objects on first use. Its watcher runs until the process ends.
func many(tb testing.TB, n int) *manyWidgets {
	tb.Helper()
	manyCRDs.mu.Lock()
	defer manyCRDs.mu.Unlock()
	if m := manyCRDs.made[n]; m != nil {
		return m
	}
	env := testenv.Shared(tb)
	group := fmt.Sprintf("many%d.guard.example.com", n)
	crd := widgetCRD(tb, group)
	if err := env.InstallCRD(crd); err != nil {
		tb.Fatal(err)
	}
	createWidgets(tb, env, group, "v1", n)
	// Not the test's: the watcher outlives it, for the benchmarks that
	// share the objects.
	w := widgetWatcher(tb, env, group)
	go func() { _ = w.Run(context.Background()) }()
	waitCached(tb, w, group, n)
	m := &manyWidgets{crd: crd, w: w, n: n}
	if manyCRDs.made == nil {
		manyCRDs.made = map[int]*manyWidgets{}
	}
	manyCRDs.made[n] = m
	return m
}

// narrowReview is the AdmissionRequest of an update of m's CRD that drops
// red from spec.color.
func (m *manyWidgets) narrowReview(tb testing.TB) *admissionv1.AdmissionRequest {
	tb.Helper()
	old := m.crd.DeepCopy()
	old.Status.StoredVersions = []string{"v1"}
	new := old.DeepCopy()
	narrowColor(new)
	return request(tb, admissionv1.Update, "", old, new)
}

// TestGuardManyObjects reviews a breaking change of a CRD with 50,000
// objects through the apiserver: the answer comes within the webhook's
// time (the apiserver fails the request otherwise) and is complete, or
// says it is not and how far it got (on a slow machine, or under the race
// detector); with a lower bound on the objects, it says where it stopped.
func TestGuardManyObjects(t *testing.T) {
	testenv.SkipShort(t, testenv.LoadTest) // 50,000 objects
	const n = 50000
	env := testenv.Shared(t)
	m := many(t, n)
	src := sources(t, env, m.w)
	srv := serveGuard(t, newGuard(t, Options{Mode: Warn, Source: src}))
	srv.register(t, env, m.crd.Name)
	seen := &warningsSeen{}
	dyn := warned(t, env, seen)
	ctx := context.Background()
	tests := []struct {
		name string
		max  int
		want func(warnings []string) string // "" when they are right
	}{
		{name: "every object", max: DefaultMaxObjects, want: func(w []string) string {
			complete := hasLine(w, "fieldwatch: enum-values-removed spec.color (v1): 2,500 objects rejected: ns0/w00000, ns0/w00020")
			incomplete := hasLine(w, "fieldwatch: check incomplete (counts are lower bounds): out of time after")
			if complete == incomplete {
				return "want the 2,500 red widgets, or a check that says it ran out of time"
			}
			return ""
		}},
		{name: "a lower bound", max: 10000, want: func(w []string) string {
			if !hasLine(w, "fieldwatch: check incomplete (counts are lower bounds): stopped at 10,000 of 50,000 objects (--crd-impact-max-objects)") ||
				!hasLine(w, "fieldwatch: enum-values-removed spec.color (v1): ") {
				return "want the check stopped at 10,000"
			}
			return ""
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv.guard.Store(newGuard(t, Options{Mode: Warn, Source: src, MaxObjects: tt.max}))
			seen.take()
			if err := editCRD(ctx, dyn, m.crd.Name, true, narrowColor); err != nil {
				t.Fatalf("the apiserver got no answer in time: %v", err)
			}
			got := seen.take()
			if why := tt.want(got); why != "" {
				t.Errorf("%s; warnings:\n  %s", why, strings.Join(got, "\n  "))
			}
		})
	}
}
