package crdguard

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// hasLine reports whether one of lines starts with want.
func hasLine(lines []string, want string) bool {
	return slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, want) })
}

// TestGuardAtAdmission runs the guard behind a webhook the apiserver
// calls, objects from the watcher's cache: what kubectl and client-go get
// back for safe and breaking updates and deletions, in warn and deny mode.
func TestGuardAtAdmission(t *testing.T) {
	env := testenv.Shared(t) // skips the unit tier
	ctx := context.Background()
	const group = "admission.guard.example.com"
	crd := installWidgets(t, env, group)
	createWidgets(t, env, group, "v1", 40) // w00000 and w00020 are red
	w := watchWidgets(t, env, group, 40)
	src := sources(t, env, w)
	srv := serveGuard(t, newGuard(t, Options{Mode: Warn, Source: src}))
	srv.register(t, env, crd.Name)
	seen := &warningsSeen{}
	dyn := warned(t, env, seen)

	warn, deny := newGuard(t, Options{Mode: Warn, Source: src}), newGuard(t, Options{Mode: Deny, Source: src})
	addField := func(c *apiextensionsv1.CustomResourceDefinition) {
		spec := c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
		spec.Properties["size"] = apiextensionsv1.JSONSchemaProps{Type: "integer"}
		c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
	}
	allow := func(c *apiextensionsv1.CustomResourceDefinition) {
		narrowColor(c)
		c.Annotations = map[string]string{AllowAnnotation: "red goes, PLAT-7"}
	}
	const narrowed = "fieldwatch: enum-values-removed spec.color (v1): 2 objects rejected: ns0/w00000, ns0/w00020"
	tests := []struct {
		name     string
		guard    *Guard
		edit     func(*apiextensionsv1.CustomResourceDefinition)
		del      bool
		refused  string   // in the refusal's message; "" when allowed
		warnings []string // lines starting so, in any order
	}{
		{name: "safe update, deny", guard: deny, edit: addField},
		{name: "narrowed enum, warn", guard: warn, edit: narrowColor, warnings: []string{narrowed}},
		{name: "narrowed enum, deny", guard: deny, edit: narrowColor, refused: "enum-values-removed spec.color (v1): 2 objects rejected: ns0/w00000, ns0/w00020"},
		{name: "narrowed enum, deny, annotated", guard: deny, edit: allow,
			warnings: []string{narrowed, "fieldwatch: allowed by fieldwatch.io/allow-breaking: red goes, PLAT-7"}},
		{name: "delete, warn", guard: warn, del: true,
			warnings: []string{"fieldwatch: deleting CRD widgets.admission.guard.example.com deletes 40 Widgets in 4 namespaces",
				"fieldwatch:   ns0: 10 Widgets: w00000, w00004, w00008, w00012, w00016 +5"}},
		{name: "delete, deny", guard: deny, del: true, refused: "would delete 40 Widgets with it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv.guard.Store(tt.guard)
			seen.take()
			var err error
			if tt.del {
				err = dyn.Resource(CRDResource).Delete(ctx, crd.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
			} else {
				err = editCRD(ctx, dyn, crd.Name, true, tt.edit)
			}
			got := seen.take()
			switch {
			case tt.refused == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.refused != "" && (!apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tt.refused)):
				t.Fatalf("error %v, want an Invalid error saying %q", err, tt.refused)
			}
			if len(got) != len(tt.warnings) && !tt.del {
				t.Errorf("warnings %q, want %q", got, tt.warnings)
			}
			for _, w := range tt.warnings {
				if !hasLine(got, w) {
					t.Errorf("warnings %q lack %q", got, w)
				}
			}
		})
	}

	// A breaking change applied in warn mode, then the CRD, its objects
	// gone, deleted in deny mode.
	srv.guard.Store(warn)
	if err := editCRD(ctx, dyn, crd.Name, false, narrowColor); err != nil {
		t.Fatal(err)
	}
	if got := seen.take(); !hasLine(got, narrowed) {
		t.Errorf("warnings of the applied change %q", got)
	}
	for i := range 4 {
		if err := env.Dynamic(t).Resource(listResource(crd, crd)).Namespace(fmt.Sprintf("ns%d", i)).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, time.Minute, "the cache to hold no widget", func() bool {
		snap, err := w.Cached(listResource(crd, crd).GroupResource())
		return err == nil && len(snap.Objects) == 0
	})
	srv.guard.Store(deny)
	if err := dyn.Resource(CRDResource).Delete(ctx, crd.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting a CRD without objects: %v", err)
	}
	if got := seen.take(); len(got) > 0 {
		t.Errorf("warnings deleting a CRD without objects: %q", got)
	}
}

// TestGuardListsUncached reviews a CRD whose objects fieldwatch does not
// cache: they are listed on demand, in pages.
func TestGuardListsUncached(t *testing.T) {
	env := testenv.Shared(t) // skips the unit tier
	ctx := context.Background()
	const group = "uncached.guard.example.com"
	crd := installWidgets(t, env, group)
	createWidgets(t, env, group, "v1", 1200) // 60 red
	g := newGuard(t, Options{Mode: Deny, Source: sources(t, env, nil)})
	srv := serveGuard(t, g)
	srv.register(t, env, crd.Name)
	seen := &warningsSeen{}
	dyn := warned(t, env, seen)
	err := editCRD(ctx, dyn, crd.Name, true, narrowColor)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "enum-values-removed spec.color (v1): 60 objects rejected: ns0/w00000, ns0/w00020") {
		t.Fatalf("got %v", err)
	}
	if n := testutil.ToFloat64(g.metrics.objects.WithLabelValues("list")); n != 1200 {
		t.Errorf("%v objects listed, want 1200", n)
	}
}
