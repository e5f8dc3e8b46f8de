package app

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/fieldwatch/fieldwatch/internal/crdguard"
	"github.com/fieldwatch/fieldwatch/internal/rbac"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
	"github.com/fieldwatch/fieldwatch/rules"
)

// guardSuffix ends the names of the CRDs of TestCRDGuardAdmission: its
// webhook configuration sends fieldwatch those only, so that the tests
// sharing the apiserver are not reviewed.
const guardSuffix = ".guard-it.example.com"

// warningsSeen keeps the warnings the apiserver sent a client (a
// rest.WarningHandler, as kubectl and Helm print them).
type warningsSeen struct {
	mu    sync.Mutex
	lines []string
}

func (w *warningsSeen) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lines = append(w.lines, text)
}

// take returns the warnings seen since the last take.
func (w *warningsSeen) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.lines
	w.lines = nil
	return out
}

// guardClient is a client acting as alice (cluster-admin) that records
// the warnings it gets.
func guardClient(t *testing.T, env *testenv.Env) (dynamic.ResourceInterface, *warningsSeen) {
	t.Helper()
	env.Impersonating(t, "alice") // binds alice to cluster-admin
	cfg := rest.CopyConfig(env.Config())
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "alice", Groups: []string{"fieldwatch:writers"}}
	seen := &warningsSeen{}
	cfg.WarningHandler = seen
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return dyn.Resource(crdguard.CRDResource), seen
}

// registerGuard registers, until the test ends, the configuration
// `fieldwatch rbac -o admission-webhook` makes for set with the CRD guard
// (the record webhook and the guard's), calling the endpoint at addr and
// confined to the CRDs named *guardSuffix, and waits until the apiserver
// calls the guard (dry runs of a label on the CRD probe).
func registerGuard(t *testing.T, env *testenv.Env, fw *fieldwatchRun, set *rules.Set, addr string, caPEM []byte, probe string) {
	t.Helper()
	out, err := rbac.AdmissionWebhook(set, rbac.Options{}, rbac.WebhookOptions{CRDGuard: true})
	if err != nil {
		t.Fatal(err)
	}
	var cfg admissionregistrationv1.ValidatingWebhookConfiguration
	if err := yaml.Unmarshal([]byte(strings.SplitN(string(out), "\n---\n", 2)[1]), &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Webhooks) != 2 {
		t.Fatalf("%d webhooks, want the record's and the guard's", len(cfg.Webhooks))
	}
	url := "https://" + addr + "/validate"
	cfg.Name = "fieldwatch-guard-it-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	for i := range cfg.Webhooks {
		h := &cfg.Webhooks[i]
		h.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM}
		h.MatchConditions = append(h.MatchConditions, admissionregistrationv1.MatchCondition{
			Name: "this-test", Expression: fmt.Sprintf("request.name.endsWith(%q)", guardSuffix)})
	}
	vwc := env.Clientset(t).AdmissionregistrationV1().ValidatingWebhookConfigurations()
	if _, err := vwc.Create(context.Background(), &cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = vwc.Delete(context.Background(), cfg.Name, metav1.DeleteOptions{}) })
	crds := env.Dynamic(t).Resource(crdguard.CRDResource)
	n := 0
	testenv.Eventually(t, time.Minute, "the apiserver to call fieldwatch's CRD guard", func() bool {
		n++
		u, err := crds.Get(context.Background(), probe, metav1.GetOptions{})
		if err != nil {
			return false
		}
		u.SetLabels(map[string]string{"probe": fmt.Sprint(n)})
		_, _ = crds.Update(context.Background(), u, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		return fw.metric(t, "fieldwatch_crd_guard_reviews_total") > 0
	})
}

// guardGadgets applies the CRD gadgets.<group> (color red or blue) and
// creates the gadgets of colors in ns; it returns the CRD's name.
func guardGadgets(t *testing.T, env *testenv.Env, group, ns string, colors ...string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := env.Apply(ctx, testenv.ApplyOptions{}, []byte(gadgetsCRD(group, "[red, blue]", false, false))); err != nil {
		t.Fatal(err)
	}
	gadgets := env.Dynamic(t).Resource(schema.GroupVersionResource{Group: group, Version: "v1", Resource: "gadgets"}).Namespace(ns)
	for i, color := range colors {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": group + "/v1", "kind": "Gadget",
			"metadata": map[string]any{"name": fmt.Sprintf("g%d", i)}, "spec": map[string]any{"color": color}}}
		var err error
		testenv.Eventually(t, 30*time.Second, "the Gadgets to be served", func() bool {
			_, err = gadgets.Create(ctx, u, metav1.CreateOptions{})
			return err == nil || apierrors.IsAlreadyExists(err)
		})
	}
	return "gadgets." + group
}

// narrowed returns the CRD name, got by crds, with its color enum cut to
// [blue] and the annotations given.
func narrowed(t *testing.T, crds dynamic.ResourceInterface, name string, annotations map[string]string) *unstructured.Unstructured {
	t.Helper()
	u, err := crds.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old, err := json.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	cut := strings.Replace(string(old), `"enum":["red","blue"]`, `"enum":["blue"]`, 1)
	if cut == string(old) {
		t.Fatalf("no enum [red, blue] in %s", old)
	}
	out := &unstructured.Unstructured{}
	if err := json.Unmarshal([]byte(cut), &out.Object); err != nil {
		t.Fatal(err)
	}
	if len(annotations) > 0 {
		a := out.GetAnnotations()
		if a == nil {
			a = map[string]string{}
		}
		for k, v := range annotations {
			a[k] = v
		}
		out.SetAnnotations(a)
	}
	return out
}

// annotate sets the annotation k: v on the CRD name.
func annotate(t *testing.T, crds dynamic.ResourceInterface, name, k, v string) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, k, v)
	if _, err := crds.Patch(context.Background(), name, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("annotate %s: %v", name, err)
	}
}

// crdPayload waits for the payload of rule crds on the CRD uid that keep
// accepts.
func crdPayload(t *testing.T, fw *fieldwatchRun, uid string, keep func(p map[string]any) bool) map[string]any {
	t.Helper()
	ps := fw.out.waitFor(t, 30*time.Second, 1, func(p map[string]any) bool { return p["uid"] == uid && keep(p) })
	return ps[0].p
}

// TestCRDGuardAdmission: fieldwatch's own /validate, over TLS, called by
// the apiserver through the configuration `fieldwatch rbac -o
// admission-webhook` makes with the CRD guard, answers CRD changes with
// the guard and still attributes them. In deny mode a narrowing that
// strands objects is refused with the objects named, goes through with
// the annotation, and its payload records who overrode the guard and
// why; the deletion of a CRD with objects is refused until the stored
// CRD carries the annotation, and that deletion's payload records it
// too; a CRD without objects is deleted at once. In warn mode the same
// changes go through with warnings, read back through client-go's
// WarningHandler, and payloads name their writer (source admission) and
// carry no guard.
func TestCRDGuardAdmission(t *testing.T) {
	plane := sharedAuditPlane(t)
	env := plane.env
	const ns = "crd-guard-it"
	env.EnsureNamespace(t, ns)
	ruleText := `rules:
  - name: crds
    match: {resources: [{group: apiextensions.k8s.io, kind: CustomResourceDefinition}]}
    actions: [{log: {}}]
`
	set, err := rules.Parse("rules.yaml", []byte(ruleText))
	if err != nil {
		t.Fatal(err)
	}
	start := func(t *testing.T, mode crdguard.Mode, probe string) *fieldwatchRun {
		tls := newAdmissionTLS(t)
		addr := make(chan string, 1)
		fw := runFieldwatch(t, plane, ruleText, func(cfg *Config) {
			withAdmission(tls, addr, false)(cfg)
			cfg.CRDGuard = CRDGuardConfig{Mode: mode}
		})
		registerGuard(t, env, fw, set, <-addr, tls.caPEM, probe)
		return fw
	}
	// isAlice: an exact attribution from admission to alice.
	isAlice := func(t *testing.T, what string, p map[string]any, verb string) {
		t.Helper()
		if a := actorOf(p); a["source"] != "admission" || a["match"] != "exact" || effectiveUser(p) != "alice" || a["verb"] != verb {
			t.Errorf("%s: actor %v, want alice's %s from admission, exact", what, a, verb)
		}
	}

	t.Run("deny", func(t *testing.T) {
		ctx := context.Background()
		name := guardGadgets(t, env, "deny"+guardSuffix, ns, "red", "blue", "red")
		empty := guardGadgets(t, env, "empty-deny"+guardSuffix, ns)
		fw := start(t, crdguard.Deny, name)
		crds, seen := guardClient(t, env)

		// A narrowing that strands two objects: refused, the objects named.
		_, err := crds.Update(ctx, narrowed(t, crds, name, nil), metav1.UpdateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "enum-values-removed spec.color (v1): 2 objects rejected: crd-guard-it/g0, crd-guard-it/g2") ||
			!strings.Contains(err.Error(), crdguard.AllowAnnotation) {
			t.Fatalf("the narrowing: %v; want a 422 Invalid naming the objects and the annotation", err)
		}
		seen.take()

		// With the annotation: through, with the reason repeated, and
		// the payload says who overrode the guard and why.
		up, err := crds.Update(ctx, narrowed(t, crds, name, map[string]string{crdguard.AllowAnnotation: "colors retired"}), metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("the annotated narrowing: %v", err)
		}
		if w := seen.take(); !slices.ContainsFunc(w, func(s string) bool {
			return strings.Contains(s, "allowed by fieldwatch.io/allow-breaking: colors retired")
		}) {
			t.Errorf("warnings %q: want the reason repeated", w)
		}
		p := crdPayload(t, fw, string(up.GetUID()), func(p map[string]any) bool { return p["resourceVersion"] == up.GetResourceVersion() })
		isAlice(t, "the annotated narrowing", p, "update")
		g, _ := p["guard"].(map[string]any)
		if g == nil || g["overridden"] != true || g["reason"] != "colors retired" || g["user"] != "alice" || g["operation"] != "UPDATE" ||
			fmt.Sprint(g["checks"]) != "[enum-values-removed]" || g["objects"] != 2.0 || g["requestUID"] == "" {
			t.Errorf("the annotated narrowing's guard %v", g)
		}

		// The deletion of a CRD with objects: refused until the stored
		// CRD carries the annotation (which stays until removed); then
		// its payload records it.
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:null}}}`, crdguard.AllowAnnotation)
		if _, err := crds.Patch(ctx, name, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		err = crds.Delete(ctx, name, metav1.DeleteOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "deletes 3 Gadgets") {
			t.Fatalf("deleting %s with 3 objects: %v; want a 422 Invalid with the count", name, err)
		}
		annotate(t, crds, name, crdguard.AllowAnnotation, "retired")
		if err := crds.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("deleting the annotated %s: %v", name, err)
		}
		p = crdPayload(t, fw, string(up.GetUID()), func(p map[string]any) bool {
			g, _ := p["guard"].(map[string]any)
			return g != nil && g["operation"] == "DELETE"
		})
		isAlice(t, "the annotated deletion", p, "delete")
		if p["type"] != "updated" {
			t.Errorf("the annotated deletion's guard is on a change of type %v, want the update that starts it", p["type"])
		}
		if g, _ := p["guard"].(map[string]any); g["reason"] != "retired" || fmt.Sprint(g["checks"]) != "[crd-removed]" || g["objects"] != 3.0 {
			t.Errorf("the annotated deletion's guard %v", g)
		}

		// A CRD without objects: deleted at once, without a word.
		seen.take()
		if err := crds.Delete(ctx, empty, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("deleting %s without objects: %v", empty, err)
		}
		if w := seen.take(); len(w) > 0 {
			t.Errorf("deleting a CRD without objects: warnings %q", w)
		}
	})

	t.Run("warn", func(t *testing.T) {
		ctx := context.Background()
		name := guardGadgets(t, env, "warn"+guardSuffix, ns, "red", "blue", "red")
		fw := start(t, crdguard.Warn, name)
		crds, seen := guardClient(t, env)

		// A change that breaks nothing: no warning.
		annotate(t, crds, name, "example.com/owner", "team-a")
		if w := seen.take(); len(w) > 0 {
			t.Errorf("a safe change: warnings %q", w)
		}
		up, err := crds.Update(ctx, narrowed(t, crds, name, nil), metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("the narrowing in warn mode: %v", err)
		}
		want := "fieldwatch: enum-values-removed spec.color (v1): 2 objects rejected: crd-guard-it/g0, crd-guard-it/g2"
		if w := seen.take(); !slices.Contains(w, want) {
			t.Errorf("warnings %q, want %q", w, want)
		}
		p := crdPayload(t, fw, string(up.GetUID()), func(p map[string]any) bool { return p["resourceVersion"] == up.GetResourceVersion() })
		isAlice(t, "the narrowing", p, "update")
		if p["guard"] != nil {
			t.Errorf("a warned change's payload has a guard: %v", p["guard"])
		}
		if err := crds.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("deleting %s in warn mode: %v", name, err)
		}
		if w := seen.take(); !slices.ContainsFunc(w, func(s string) bool { return strings.Contains(s, "deleting CRD "+name+" deletes 3 Gadgets") }) {
			t.Errorf("deleting a CRD with objects: warnings %q", w)
		}
		p = crdPayload(t, fw, string(up.GetUID()), func(p map[string]any) bool { return actorOf(p)["verb"] == "delete" })
		isAlice(t, "the deletion", p, "delete")
	})
}
