package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite golden files")

var widgets = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

// namespace creates a namespace for one test.
func namespace(t *testing.T, env *testenv.Env, name string) string {
	t.Helper()
	_, err := env.Clientset(t).CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	return name
}

// inNamespace keeps the payloads about objects of ns.
func inNamespace(ps []map[string]any, ns string) []map[string]any {
	var out []map[string]any
	for _, p := range ps {
		if p["namespace"] == ns {
			out = append(out, p)
		}
	}
	return out
}

// TestCRDAuditGolden runs the crd-audit example out of process against the
// control plane, makes a scripted sequence of changes, and compares the
// payloads with testdata/crd-audit.golden.json (time, uid and
// resourceVersion normalised).
func TestCRDAuditGolden(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	ctx := context.Background()
	if _, err := env.ApplyFiles(ctx, testenv.ApplyOptions{}, repo(t, "examples/crds/widgets.yaml")); err != nil {
		t.Fatal(err)
	}
	ns := namespace(t, env, "audit")
	apply(t, env, "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: existing, namespace: audit}\nspec: {size: 9}\n")
	p := startFieldwatch(t, env.WriteKubeconfig(t), "--rules", repo(t, "examples/crd-audit/rules.yaml"))

	w := env.Dynamic(t).Resource(widgets).Namespace(ns)
	patch := func(body string, sub ...string) {
		t.Helper()
		if _, err := w.Patch(ctx, "w1", types.MergePatchType, []byte(body), metav1.PatchOptions{FieldManager: "kubectl-patch"}, sub...); err != nil {
			t.Fatal(err)
		}
	}
	apply(t, env, "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1, namespace: audit}\nspec: {size: 1, color: blue}\n")
	p.waitPayloadsIn(ns, 1, 30*time.Second)
	patch(`{"spec":{"color":"red"}}`)
	p.waitPayloadsIn(ns, 2, 30*time.Second)
	patch(`{"spec":{"replicas":3}}`, "scale")
	p.waitPayloadsIn(ns, 3, 30*time.Second)
	patch(`{"status":{"phase":"Ready","size":3}}`, "status")
	if err := w.Delete(ctx, "w1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	got := p.waitPayloadsIn(ns, 4, 30*time.Second)
	// The status change fired nothing, so the delete is the fourth.
	p.stop()
	if n := len(inNamespace(p.payloads(), ns)); n != 4 {
		t.Errorf("%d payloads, want 4", n)
	}
	compareGolden(t, "testdata/crd-audit.golden.json", normalise(got))
}

// normalise replaces what differs from run to run: time, uids (numbered in
// order of appearance) and resource versions.
func normalise(ps []map[string]any) []map[string]any {
	uids := map[string]string{}
	for _, p := range ps {
		uid, _ := p["uid"].(string)
		if _, ok := uids[uid]; !ok {
			uids[uid] = fmt.Sprintf("uid-%d", len(uids)+1)
		}
		version := "RV"
		if strings.Contains(fmt.Sprint(p["id"]), "/deleted/") {
			version = "deleted"
		}
		p["time"] = "TIME"
		p["resourceVersion"] = "RV"
		p["id"] = strings.Join([]string{uids[uid], version, fmt.Sprint(p["rule"])}, "/")
		p["uid"] = uids[uid]
	}
	return ps
}

func compareGolden(t *testing.T, path string, v any) {
	t.Helper()
	got, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("payloads differ from %s (run with -update after checking):\n got: %s\nwant: %s", path, got, want)
	}
}
