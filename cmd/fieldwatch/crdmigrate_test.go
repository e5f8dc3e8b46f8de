package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// gizmoCRD is a Gizmo CRD of group serving versions (the first one in
// storage); status.storedVersions follows what the apiserver stored.
func gizmoCRD(group string, storage string, versions ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gizmos.%[1]s}
spec:
  group: %[1]s
  scope: Namespaced
  names: {plural: gizmos, singular: gizmo, kind: Gizmo, listKind: GizmoList}
  versions:
`, group)
	for _, v := range versions {
		fmt.Fprintf(&b, "    - {name: %s, served: true, storage: %v, schema: {openAPIV3Schema: {type: object, properties: {spec: {type: object, properties: {size: {type: integer}}}}}}}\n", v, v == storage)
	}
	return b.String()
}

// TestCRDMigrate switches a CRD's storage version with objects stored at
// the old one: crd-diff --cluster says which objects removing the old
// version strands, crd-migrate rewrites them and cuts
// status.storedVersions, and a second run has nothing to do.
func TestCRDMigrate(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	ctx := context.Background()
	const group = "migrate.crdmigrate.example.com"
	apply(t, env, gizmoCRD(group, "v1alpha1", "v1alpha1", "v1"))
	env.EnsureNamespace(t, "crd-migrate")
	gizmos := env.Dynamic(t).Resource(schema.GroupVersionResource{Group: group, Version: "v1alpha1", Resource: "gizmos"}).Namespace("crd-migrate")
	for i := range 6 {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": group + "/v1alpha1", "kind": "Gizmo",
			"metadata": map[string]any{"name": fmt.Sprintf("g%d", i)}, "spec": map[string]any{"size": int64(i)}}}
		if _, err := gizmos.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	apply(t, env, gizmoCRD(group, "v1", "v1alpha1", "v1"))
	kubeconfig := env.WriteKubeconfig(t)
	dropped := writeFile(t, "v1-only.yaml", gizmoCRD(group, "v1", "v1"))

	// Every object may still be stored at v1alpha1.
	code, stdout, stderr := runCLI(t, "crd-diff", "--cluster", dropped, "--kubeconfig", kubeconfig)
	if code != 1 || !strings.Contains(stdout, "impact stored-version-removed (v1alpha1): 6 object(s) unmigrated") ||
		!strings.Contains(stdout, "crd-migrate/g0: may be stored at v1alpha1") {
		t.Fatalf("crd-diff --cluster: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}

	code, stdout, stderr = runCLI(t, "crd-migrate", "gizmos."+group, "--kubeconfig", kubeconfig, "--settle", "1ms", "--page-size", "4")
	if code != 0 || !strings.Contains(stdout, "6 objects gone through, 6 rewritten at v1, 0 deleted meanwhile; status.storedVersions is now [v1]") {
		t.Fatalf("crd-migrate: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	crd, err := env.Dynamic(t).Resource(crdResource).Get(ctx, "gizmos."+group, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if stored, _, _ := unstructured.NestedStringSlice(crd.Object, "status", "storedVersions"); strings.Join(stored, ",") != "v1" {
		t.Errorf("status.storedVersions %v", stored)
	}
	if !strings.Contains(crd.GetAnnotations()["fieldwatch.io/migrated"], `"version":"v1"`) {
		t.Errorf("annotations %v", crd.GetAnnotations())
	}

	runCLICases(t, []cliCase{
		{name: "again", args: []string{"crd-migrate", "gizmos." + group, "--kubeconfig", kubeconfig},
			stdout: `status.storedVersions is \[v1\]: every object is stored at v1, nothing to do`},
		{name: "forced: nothing rewritten", args: []string{"crd-migrate", "gizmos." + group, "--kubeconfig", kubeconfig, "--settle", "1ms", "--force"},
			stdout: `6 objects gone through, 0 rewritten at v1`},
		{name: "no such CRD", args: []string{"crd-migrate", "nothing." + group, "--kubeconfig", kubeconfig}, code: 2,
			stderr: `get CustomResourceDefinition nothing.migrate.crdmigrate.example.com: .*not found`},
		{name: "no CRD named", args: []string{"crd-migrate", "--kubeconfig", kubeconfig}, code: 2, stderr: "want one CRD name"},
	})

	// Removing v1alpha1 strands nothing stored any more.
	code, stdout, _ = runCLI(t, "crd-diff", "--cluster", dropped, "--kubeconfig", kubeconfig)
	if code != 1 || strings.Contains(stdout, "stored-version-removed") || !strings.Contains(stdout, "served-version-removed") {
		t.Errorf("crd-diff --cluster after the migration: exit %d\n%s", code, stdout)
	}
}
