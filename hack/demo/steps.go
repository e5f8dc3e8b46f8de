package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// step is one scripted change and how many payloads it fires.
type step struct {
	what  string
	do    func() error
	fires int
}

// changes are the demo's steps, made by alice and bob (who work with
// widgets) and carol (who owns the Widget CRD), each as themselves.
func changes(ctx context.Context, c *cluster, root string) ([]step, error) {
	as := map[string]dynamic.Interface{}
	for _, user := range []string{"alice", "bob", "carol"} {
		d, err := c.as(ctx, user)
		if err != nil {
			return nil, err
		}
		as[user] = d
	}
	admin, err := dynamic.NewForConfig(c.env.Config())
	if err != nil {
		return nil, err
	}
	as["a controller"] = admin
	// apply is kubectl apply (server-side, field manager kubectl) as user.
	apply := func(user string, gvr schema.GroupVersionResource, manifest string) func() error {
		return func() error {
			var obj map[string]any
			if err := yaml.Unmarshal([]byte(manifest), &obj); err != nil {
				return err
			}
			u := &unstructured.Unstructured{Object: obj}
			data, err := u.MarshalJSON()
			if err != nil {
				return err
			}
			force := true
			_, err = as[user].Resource(gvr).Namespace(u.GetNamespace()).Patch(ctx, u.GetName(), types.ApplyPatchType, data,
				metav1.PatchOptions{FieldManager: "kubectl", Force: &force})
			return err
		}
	}
	// patch is kubectl patch --type=merge as user.
	patch := func(user, name, body string, sub ...string) func() error {
		return func() error {
			_, err := as[user].Resource(widgets).Namespace("default").Patch(ctx, name, types.MergePatchType, []byte(body),
				metav1.PatchOptions{FieldManager: "kubectl-patch"}, sub...)
			return err
		}
	}
	tightened, err := tightenedWidgets(root)
	if err != nil {
		return nil, err
	}
	gadgets := schema.GroupVersionResource{Group: "example.com", Version: "v1alpha1", Resource: "gadgets"}
	return []step{
		{"alice: kubectl apply: create widget default/demo (size 1, blue)",
			apply("alice", widgets, "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: demo, namespace: default}\nspec: {size: 1, color: blue}\n"), 1},
		{"alice: kubectl patch: demo's color blue -> red", patch("alice", "demo", `{"spec":{"color":"red"}}`), 1},
		{"bob: kubectl scale --replicas=3 widget/demo (the scale subresource)", patch("bob", "demo", `{"spec":{"replicas":3}}`, "scale"), 1},
		{"a controller sets demo's status (status churn is left out)", patch("a controller", "demo", `{"status":{"phase":"Ready","size":3}}`, "status"), 0},
		{"install a new CRD at runtime (examples/crds/gadgets.yaml); alice creates a gadget", func() error {
			if _, err := c.env.ApplyFiles(ctx, testenv.ApplyOptions{FieldManager: "kubectl"}, filepath.Join(root, "examples/crds/gadgets.yaml")); err != nil {
				return err
			}
			return apply("alice", gadgets, "apiVersion: example.com/v1alpha1\nkind: Gadget\nmetadata: {name: g1, namespace: default}\nspec: {mode: eco}\n")()
		}, 1},
		{"carol: kubectl apply the Widget CRD with spec.color an enum [green, blue] and spec.size at most 2 (crd-schema-changed and crd-breaking fire)",
			apply("carol", crds, tightened), 2},
		{"alice: kubectl delete widget default/demo", func() error {
			return as["alice"].Resource(widgets).Namespace("default").Delete(ctx, "demo", metav1.DeleteOptions{})
		}, 1},
	}, nil
}

// tightenedWidgets returns examples/crds/widgets.yaml with two breaking
// changes: spec.color gets an enum without red, spec.size a maximum of 2.
// shop-backend (size 4) and demo (red, size 3) no longer pass.
func tightenedWidgets(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "examples/crds/widgets.yaml"))
	if err != nil {
		return "", err
	}
	crd := string(b)
	for old, tight := range map[string]string{
		"size: {type: integer, minimum: 0}": "size: {type: integer, minimum: 0, maximum: 2}",
		"color: {type: string}":             "color: {type: string, enum: [green, blue]}",
	} {
		if !strings.Contains(crd, old) {
			return "", fmt.Errorf("examples/crds/widgets.yaml has no %q to tighten", old)
		}
		crd = strings.Replace(crd, old, tight, 1)
	}
	return crd, nil
}
