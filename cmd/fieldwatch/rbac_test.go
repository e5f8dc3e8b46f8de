package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

const rbacRules = `rules:
  - name: cm-changed
    match:
      resources: [{group: "", kind: ConfigMap}]
      namespaces: [rbac-e2e]
    on: [update]
    actions:
      - log: {}
      - event: {reason: ConfigChanged}
  - name: widget-stamp
    match:
      resources: [{group: example.com, kind: Widget}]
      namespaces: [rbac-e2e]
    on: [create]
    actions:
      - patch: {merge: {metadata: {annotations: {audited: "yes"}}}}
`

// TestRBACLeastPrivilege applies what `fieldwatch rbac` prints as the only
// permissions of a service account, runs fieldwatch as that account
// (impersonated), and checks that the rules work and nothing else is
// allowed.
func TestRBACLeastPrivilege(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	if _, err := env.ApplyFiles(ctx, testenv.ApplyOptions{}, repo(t, "examples/crds/widgets.yaml")); err != nil {
		t.Fatal(err)
	}
	ns := namespace(t, env, "rbac-e2e")
	admin := env.WriteKubeconfig(t)
	rules := writeFile(t, "rules.yaml", rbacRules)

	var out, errOut bytes.Buffer
	cmd := exec.Command(binary, "rbac", "--rules", rules, "--kubeconfig", admin, "--namespace", ns, "--service-account", "fw", "--name", "fw-e2e")
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("fieldwatch rbac: %v\n%s", err, errOut.String())
	}
	if _, err := env.Apply(ctx, testenv.ApplyOptions{}, out.Bytes()); err != nil {
		t.Fatalf("apply the generated RBAC: %v\n%s", err, out.String())
	}
	cs := env.Clientset(t)
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "fw"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sa := impersonating(t, admin, "system:serviceaccount:"+ns+":fw", "system:serviceaccounts", "system:serviceaccounts:"+ns, "system:authenticated")

	// What the rules need is allowed, and nothing else.
	saConfig, err := clientcmd.BuildConfigFromFlags("", sa)
	if err != nil {
		t.Fatal(err)
	}
	saClient := kubernetes.NewForConfigOrDie(saConfig)
	for _, tc := range []struct {
		group, resource, sub, verb string
		want                       bool
		namespace                  string // default: the rules' namespace
	}{
		{"", "configmaps", "", "watch", true, ""},
		{"", "configmaps", "", "list", true, ""},
		{"example.com", "widgets", "", "patch", true, ""},
		{"events.k8s.io", "events", "", "create", true, ""},
		{"apiextensions.k8s.io", "customresourcedefinitions", "", "watch", true, ""},
		{"apiregistration.k8s.io", "apiservices", "", "watch", true, ""},
		{"apiregistration.k8s.io", "apiservices", "", "update", false, ""},
		{"", "configmaps", "", "patch", false, ""},
		{"", "configmaps", "", "delete", false, ""},
		{"", "secrets", "", "list", false, ""},
		{"", "pods", "", "list", false, ""},
		{"example.com", "widgets", "", "delete", false, ""},
		{"example.com", "widgets", "status", "patch", false, ""},
		{"apiextensions.k8s.io", "customresourcedefinitions", "", "delete", false, ""},
		{"rbac.authorization.k8s.io", "clusterroles", "", "escalate", false, ""},
		// The rules name their namespace: nothing is granted elsewhere.
		{"", "configmaps", "", "list", false, "default"},
		{"example.com", "widgets", "", "patch", false, "default"},
		{"events.k8s.io", "events", "", "create", false, "default"},
	} {
		if tc.namespace == "" {
			tc.namespace = ns
		}
		review, err := saClient.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: tc.namespace, Group: tc.group, Resource: tc.resource, Subresource: tc.sub, Verb: tc.verb,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if review.Status.Allowed != tc.want {
			t.Errorf("%s %s.%s/%s in %s: allowed %v, want %v", tc.verb, tc.resource, tc.group, tc.sub, tc.namespace, review.Status.Allowed, tc.want)
		}
	}

	p := startFieldwatch(t, sa, "--rules", rules)
	apply(t, env, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: rbac-e2e}\ndata: {v: '1'}\n")
	if _, err := cs.CoreV1().ConfigMaps(ns).Patch(ctx, "c", types.MergePatchType, []byte(`{"data":{"v":"2"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	p.waitPayloads(1, 30*time.Second)
	testenv.Eventually(t, 30*time.Second, "the Event", func() bool {
		evs, err := cs.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Reason == "ConfigChanged" && e.Regarding.Name == "c" {
				return true
			}
		}
		return false
	})
	apply(t, env, "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w, namespace: rbac-e2e}\nspec: {size: 1}\n")
	testenv.Eventually(t, 30*time.Second, "the patch", func() bool {
		w, err := env.Dynamic(t).Resource(widgets).Namespace(ns).Get(ctx, "w", metav1.GetOptions{})
		return err == nil && w.GetAnnotations()["audited"] == "yes"
	})
	if strings.Contains(strings.ToLower(p.logs()), "forbidden") {
		t.Errorf("fieldwatch hit a forbidden request with the generated RBAC:\n%s", tail(p.logs(), 2048))
	}
}

// impersonating writes a copy of the admin kubeconfig that acts as user
// with groups.
func impersonating(t *testing.T, admin, user string, groups ...string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(admin)
	if err != nil {
		t.Fatal(err)
	}
	for _, auth := range cfg.AuthInfos {
		auth.Impersonate = user
		auth.ImpersonateGroups = groups
	}
	path := filepath.Join(t.TempDir(), "kubeconfig-"+strings.ReplaceAll(user, ":", "-"))
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	return path
}
