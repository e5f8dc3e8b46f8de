package app

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// TestReadinessIsTheStarts: a replica is ready once what it found at its
// start has synced, and a resource found later does not take it out of
// readiness while it lists, however long that takes: here a CRD whose
// preferred version the apiserver cannot serve (its conversion webhook is
// unreachable), so that its list fails for as long as the test looks.
// /readyz answers 200 and names the resource that is syncing.
func TestReadinessIsTheStarts(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	if err := writeTestFile(rulesFile, "rules:\n  - name: stuck\n    match: {resources: [{group: stuck.example.org, kind: Stuck}]}\n    actions: [{log: {}}]\n"); err != nil {
		t.Fatal(err)
	}
	var logs testenv.SyncBuffer
	base := serveApp(t, Config{
		RulesFiles: []string{rulesFile}, Rest: env.Config(), DiscoveryInterval: time.Second,
		Stdout: io.Discard, Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	testenv.Eventually(t, time.Minute, "/readyz before the CRD", func() bool { code, _ := readyz(base); return code == http.StatusOK })

	// v1 stores the objects; v2, once served, is preferred and needs a
	// conversion the webhook on a port nothing listens on never gives. It
	// is served once the object exists: a list before that is empty and
	// needs no conversion.
	gvr := schema.GroupVersionResource{Group: "stuck.example.org", Version: "v1", Resource: "stucks"}
	preserve := true
	schemaOf := &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: &preserve}}
	unreachable := "https://127.0.0.1:1/convert"
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "stucks.stuck.example.org"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: gvr.Group, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "stucks", Kind: "Stuck", ListKind: "StuckList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				{Name: "v1", Served: true, Storage: true, Schema: schemaOf},
				{Name: "v2", Served: false, Schema: schemaOf},
			},
			Conversion: &apiextensionsv1.CustomResourceConversion{
				Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{
					ClientConfig:             &apiextensionsv1.WebhookClientConfig{URL: &unreachable},
					ConversionReviewVersions: []string{"v1"},
				},
			},
		},
	}
	ns := "readiness"
	env.EnsureNamespace(t, ns)
	crds := env.Dynamic(t).Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	defer func() {
		// The object first: the CRD's finalizer then has nothing to
		// delete. Its deletion is awaited, so that no other test starts
		// on a resource that cannot sync.
		_ = env.Dynamic(t).Resource(gvr).Namespace(ns).Delete(ctx, "one", metav1.DeleteOptions{})
		if err := crds.Delete(ctx, crd.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete the CRD: %v", err)
		}
		testenv.Eventually(t, time.Minute, "the CRD gone", func() bool {
			_, err := crds.Get(ctx, crd.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		})
	}()
	if err := env.InstallCRD(crd); err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "stuck.example.org/v1", "kind": "Stuck",
		"metadata": map[string]any{"name": "one"}, "spec": map[string]any{"n": int64(1)}}}
	if _, err := env.Dynamic(t).Resource(gvr).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	served, err := crds.Get(ctx, crd.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	versions, _, _ := unstructured.NestedSlice(served.Object, "spec", "versions")
	versions[1].(map[string]any)["served"] = true
	if err := unstructured.SetNestedSlice(served.Object, versions, "spec", "versions"); err != nil {
		t.Fatal(err)
	}
	if _, err := crds.Update(ctx, served, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	v2 := env.Dynamic(t).Resource(schema.GroupVersionResource{Group: gvr.Group, Version: "v2", Resource: gvr.Resource})
	var listErr error
	testenv.Eventually(t, time.Minute, "v2 served", func() bool {
		_, listErr = v2.List(ctx, metav1.ListOptions{})
		return listErr == nil || !apierrors.IsNotFound(listErr)
	})
	if listErr == nil {
		t.Fatal("listing v2 succeeded: the conversion webhook is reachable, and the resource would sync")
	}

	// The watcher found the resource and cannot list it: /readyz names it
	// in the same answer that says the replica is ready.
	var code int
	var body string
	if !testenv.Poll(time.Minute, func() bool {
		code, body = readyz(base)
		return strings.Contains(body, "stucks.v2.stuck.example.org")
	}) {
		t.Fatalf("/readyz did not name stucks.v2.stuck.example.org as syncing within a minute; it answers %d %q; the log:\n%s", code, body, logs.String())
	}
	if code != http.StatusOK || !strings.Contains(body, "1 resources found since the start are syncing") {
		t.Errorf("/readyz while a resource found after the start syncs = %d %q, want 200 naming it", code, body)
	}
}

// readyz returns /readyz's status code and body.
func readyz(base string) (int, string) {
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		return 0, ""
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, string(b)
}
