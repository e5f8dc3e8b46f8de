package deploy

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// render renders a kustomization directory as `kubectl apply -k` does,
// with kustomize's API, and returns the YAML and the objects' kinds and
// names.
func render(t *testing.T, dir string) ([]byte, []string) {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize %s: %v", dir, err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range res.Resources() {
		names = append(names, r.GetKind()+" "+r.GetName())
	}
	slices.Sort(names)
	return out, names
}

// TestKustomize renders deploy/, deploy/audit/ and deploy/admission/ with kustomize (an
// overlay inside the directory of its base is refused, which is why the
// manifests are in base/): deploy/ gives the manifests of base/, and
// deploy/audit/ those plus its Service and NetworkPolicy with the
// receiver's flags patched in; the apiserver accepts both renderings.
func TestKustomize(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	deployYAML, deployObjs := render(t, ".")
	want := []string{
		"ClusterRole fieldwatch", "ClusterRoleBinding fieldwatch", "ClusterRoleBinding fieldwatch-auth-delegator", "ConfigMap fieldwatch-rules", "Namespace fieldwatch",
		"NetworkPolicy fieldwatch", "PodDisruptionBudget fieldwatch", "Role fieldwatch-leader-election",
		"RoleBinding fieldwatch-leader-election", "Service fieldwatch-metrics", "ServiceAccount fieldwatch", "StatefulSet fieldwatch",
	}
	if !slices.Equal(deployObjs, want) {
		t.Errorf("deploy/ renders %q, want %q", deployObjs, want)
	}
	auditYAML, auditObjs := render(t, "audit")
	want = slices.Sorted(slices.Values(append(slices.Clone(want), "Service fieldwatch-audit", "Service fieldwatch-audit-peers", "NetworkPolicy fieldwatch-audit")))
	if !slices.Equal(auditObjs, want) {
		t.Errorf("deploy/audit/ renders %q, want %q", auditObjs, want)
	}
	for _, flag := range []string{"--audit-webhook-addr=:8443", "--audit-webhook-client-name=kube-apiserver-audit", "secretName: fieldwatch-audit-tls"} {
		if !strings.Contains(string(auditYAML), flag) {
			t.Errorf("deploy/audit/'s StatefulSet lacks %s", flag)
		}
	}
	_, err := env.Clientset(t).CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fieldwatch"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	admissionYAML, admissionObjs := render(t, "admission")
	want = slices.Sorted(slices.Values(append(slices.Clone(deployObjs), "ValidatingWebhookConfiguration fieldwatch", "Service fieldwatch-admission",
		"Service fieldwatch-admission-peers", "NetworkPolicy fieldwatch-admission", "Secret fieldwatch-admission-tls",
		"Role fieldwatch-admission-certs", "RoleBinding fieldwatch-admission-certs")))
	if !slices.Equal(admissionObjs, want) {
		t.Errorf("deploy/admission/ renders %q, want %q", admissionObjs, want)
	}
	for _, flag := range []string{"--admission-addr=:9443", "--admission-cert-secret=fieldwatch/fieldwatch-admission-tls", "--admission-peers=fieldwatch-admission-peers:9443"} {
		if !strings.Contains(string(admissionYAML), flag) {
			t.Errorf("deploy/admission/'s StatefulSet lacks %s", flag)
		}
	}
	for dir, data := range map[string][]byte{"deploy/": deployYAML, "deploy/audit/": auditYAML, "deploy/admission/": admissionYAML} {
		if _, err := env.Apply(ctx, testenv.ApplyOptions{DryRun: true}, data); err != nil {
			t.Errorf("%s: the apiserver refuses the rendering: %v", dir, err)
		}
	}
}
