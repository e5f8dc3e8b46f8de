package examples_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// TestCRDDefinitions runs examples/crd-definitions while the Gizmo CRD of
// its objects.yaml (renamed, so that it is the test's own) goes through
// what the rules warn about and what they do not: a version stops being
// served, schemas change, a version is added, an unserved one removed, a
// served one removed, and the CRD is deleted. The apiserver also writes
// the CRD's status meanwhile, which must stay quiet.
//
// The steps that must fire wait for their firing, so that the changes
// around them are not merged with them; a quiet step is shown quiet by a
// later firing of the same rule (each rule's log writes in order).
func TestCRDDefinitions(t *testing.T) {
	env := testenv.Shared(t)
	dyn := env.Dynamic(t).Resource(crdResource)
	ctx := context.Background()
	fw := startFieldwatch(t, "crd-definitions/rules.yaml")

	data, err := os.ReadFile("crd-definitions/objects.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const group = "crd-definitions.example.com"
	name := "gizmos." + group
	var uid types.UID
	// Taken from the queue before it changes: a change merged with its
	// creation would be a creation, which these rules ignore.
	fw.step(t, "apply the Gizmo CRD", func() error {
		objs, err := env.Apply(ctx, testenv.ApplyOptions{FieldManager: "kubectl"}, bytes.ReplaceAll(data, []byte("example.com"), []byte(group)))
		if err == nil {
			uid = objs[0].GetUID()
		}
		return err
	})
	t.Cleanup(func() { _ = dyn.Delete(context.Background(), name, metav1.DeleteOptions{}) })

	patch := func(what, ops string) {
		t.Helper()
		if _, err := dyn.Patch(ctx, name, types.JSONPatchType, []byte(ops), metav1.PatchOptions{FieldManager: "kubectl-patch"}); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// waitFirings waits for n firings of rule for the CRD and returns them.
	waitFirings := func(rule string, n int) []payload {
		t.Helper()
		waitFor(t, fmt.Sprintf("%d firings of %s", n, rule), func() (bool, string) {
			return len(fw.firings(t, rule, "", name)) >= n, fw.stdout.String()
		})
		return fw.firings(t, rule, "", name)
	}
	addProperty := func(prop string) string {
		return `[{"op": "add", "path": "/spec/versions/1/schema/openAPIV3Schema/properties/spec/properties/` + prop + `", "value": {"type": "string"}}]`
	}

	patch("stop serving v1alpha1", `[{"op": "replace", "path": "/spec/versions/0/served", "value": false}]`)
	waitFirings("crd-version-unserved", 1)
	patch("v1 gains spec.color", addProperty("color"))
	waitFirings("crd-schema-changed", 1)
	patch("add a served v2 (quiet)", `[{"op": "add", "path": "/spec/versions/-", "value":
		{"name": "v2", "served": true, "storage": false, "schema": {"openAPIV3Schema": {"type": "object"}}}}]`)
	patch("remove the unserved v1alpha1 (quiet)", `[{"op": "remove", "path": "/spec/versions/0"}]`)
	// v1 is now versions[0].
	patch("v1 gains spec.shape", `[{"op": "add", "path": "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/shape", "value": {"type": "string"}}]`)
	waitFirings("crd-schema-changed", 2)
	patch("remove the served v2", `[{"op": "remove", "path": "/spec/versions/1"}]`)
	unserved := waitFirings("crd-version-unserved", 2)
	if err := dyn.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete the CRD: %v", err)
	}
	deleted := waitFirings("crd-deleted", 1)

	if len(unserved) != 2 {
		t.Errorf("crd-version-unserved fired %d times, want 2 (v1alpha1 unserved, v2 removed):\n%s", len(unserved), fw.stdout.String())
	} else {
		checkChanges(t, unserved[0], `[{"op":"replace","path":"/spec/versions/0/served","value":false,"oldValue":true}]`)
		if c := mustJSON(t, unserved[1].Changes); !strings.Contains(c, `"op":"remove","path":"/spec/versions/1"`) || !strings.Contains(c, `"name":"v2"`) {
			t.Errorf("removing v2: changes %s", c)
		}
		if a := unserved[0].Actor; a == nil || a.Manager != "kubectl-patch" {
			t.Errorf("actor = %+v, want kubectl-patch", a)
		}
	}
	schema := fw.firings(t, "crd-schema-changed", "", name)
	if len(schema) != 2 {
		t.Errorf("crd-schema-changed fired %d times, want 2 (color, shape):\n%s", len(schema), fw.stdout.String())
	} else {
		checkChanges(t, schema[0], `[{"op":"add","path":"/spec/versions/1/schema/openAPIV3Schema/properties/spec/properties/color","value":{"type":"string"}}]`)
		if c := mustJSON(t, schema[1].Changes); !strings.Contains(c, "shape") {
			t.Errorf("spec.shape added: changes %s", c)
		}
	}
	if p := deleted[0]; p.Type != "deleted" || p.UID != string(uid) || p.Namespace != "" || len(p.Changes) != 0 {
		t.Errorf("deletion payload: %s", p.raw)
	}
	for _, p := range fw.payloads(t) {
		if p.Resource.Resource != "customresourcedefinitions" {
			t.Errorf("not a CRD: %s", p.raw)
		}
	}

	// Warnings, in the default namespace (the CRD has none).
	for _, reason := range []string{"CRDVersionUnserved", "CRDSchemaChanged", "CRDDeleted"} {
		ev := waitEvent(t, metav1.NamespaceDefault, uid, reason)
		if ev.Type != corev1.EventTypeWarning || !strings.HasPrefix(ev.Note, name) || ev.Regarding.Kind != "CustomResourceDefinition" {
			b, _ := json.Marshal(ev)
			t.Errorf("%s Event: %s", reason, b)
		}
	}
}
