//go:build e2e

package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/kube"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/rbac"
	"github.com/fieldwatch/fieldwatch/rules"
)

// namespacedRules report every change to a Widget in the watched
// namespaces.
const namespacedRules = `rules:
  - name: widgets
    match: {resources: [{group: example.com, kind: Widget}]}
    on: [create, update, delete]
    actions: [{log: {}}]
`

// TestChartNamespaced installs the chart for a namespaced install
// (watchNamespaces, with the RBAC values `fieldwatch rbac --namespaces -o
// helm-values` prints) on the cluster. Its service account, impersonated,
// may read Widgets in the watched namespaces only: SelfSubjectAccessReviews
// and the reads themselves are refused in another namespace, cluster-wide
// and for anything else (Secrets, ConfigMaps, Nodes, CRDs). The pod, with
// only those rights, reports a Widget's changes in both watched
// namespaces and none in the other, and logs no refused request.
func TestChartNamespaced(t *testing.T) {
	ctx := context.Background()
	const (
		name    = "chartns"
		ns      = nsPrefix + "-tools"
		a, b    = nsPrefix + "-a", nsPrefix + "-b"
		outside = nsPrefix + "-out"
	)
	for _, n := range []string{ns, a, b, outside} {
		ensureNamespace(t, n)
	}
	rel := install{ns: ns, fullname: name + "-fieldwatch"}

	set, err := rules.Parse("rules.yaml", []byte(namespacedRules))
	if err != nil {
		t.Fatal(err)
	}
	opts := rbac.Options{
		Resources: []change.Resource{
			{Group: "example.com", Version: "v1", Resource: "widgets", Kind: "Widget", Namespaced: true, Custom: true, Preferred: true},
		},
		Namespaces: []string{a, b}, Namespace: ns, ServiceAccount: rel.fullname, LeaderElection: true,
	}
	perms, err := rbac.Compute(set, opts)
	if err != nil {
		t.Fatal(err)
	}
	out, err := perms.HelmValues(opts)
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]any{}
	if err := yaml.Unmarshal(out, &vals); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// One replica: what is checked is the account's rights, which the
	// replicas share.
	vals["replicas"] = 1
	vals["image"] = imageValues(c.image)
	vals["rules"] = map[string]any{"inline": namespacedRules}

	cfg, err := helmConfig(c.kubeconfig, ns)
	if err != nil {
		t.Fatal(err)
	}
	in := action.NewInstall(cfg)
	in.ReleaseName = name
	in.Namespace = ns
	in.ServerSideApply = true
	in.WaitStrategy = kube.StatusWatcherStrategy
	in.Timeout = rolloutTimeout
	start := time.Now()
	if _, err := in.Run(loadChart(t), vals); err != nil {
		rel.describePods(t)
		t.Fatalf("helm install --wait: %v", err)
	}
	t.Logf("helm install --wait (namespaced, one replica): %s", time.Since(start).Round(100*time.Millisecond))
	if _, err := c.cs.RbacV1().ClusterRoles().Get(ctx, rel.fullname, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a namespaced install made ClusterRole %s (%v)", rel.fullname, err)
	}
	pods := rel.pods(t)
	if len(pods) != 1 || !ready(&pods[0]) {
		t.Fatalf("want one ready pod, have %d", len(pods))
	}
	pod := pods[0].Name

	// The pod's service account, impersonated: the apiserver gives it the
	// groups of a service account, as to the pod's token.
	saConfig := rest.CopyConfig(c.cfg)
	saConfig.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + pods[0].Spec.ServiceAccountName}
	sa := kubernetes.NewForConfigOrDie(saConfig)
	for _, ac := range []struct {
		namespace, group, resource, verb string
		want                             bool
	}{
		{a, "example.com", "widgets", "watch", true}, {b, "example.com", "widgets", "list", true},
		{ns, "coordination.k8s.io", "leases", "update", true},
		{outside, "example.com", "widgets", "list", false}, {"default", "example.com", "widgets", "get", false},
		{"", "example.com", "widgets", "list", false}, {a, "example.com", "widgets", "update", false},
		{a, "", "secrets", "get", false}, {a, "", "configmaps", "list", false}, {ns, "", "secrets", "list", false},
		{outside, "", "pods", "list", false}, {"", "", "namespaces", "list", false}, {"", "", "nodes", "list", false},
		{"", "apiextensions.k8s.io", "customresourcedefinitions", "list", false},
		{"", "rbac.authorization.k8s.io", "clusterroles", "list", false},
	} {
		review, err := sa.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ac.namespace, Group: ac.group, Resource: ac.resource, Verb: ac.verb,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if review.Status.Allowed != ac.want {
			t.Errorf("the service account may %s %s.%s in %q: %v, want %v", ac.verb, ac.resource, ac.group, ac.namespace, review.Status.Allowed, ac.want)
		}
	}
	saDyn := dynamic.NewForConfigOrDie(saConfig)
	for _, r := range []struct {
		gvr schema.GroupVersionResource
		ns  string
	}{
		{widgetsGVR, outside}, {widgetsGVR, ""}, {schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, outside},
		{schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, a},
		{schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, ""},
		{crdsGVR, ""},
	} {
		if _, err := saDyn.Resource(r.gvr).Namespace(r.ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("list %s in %q as the service account: %v, want forbidden", r.gvr.Resource, r.ns, err)
		}
	}
	if _, err := saDyn.Resource(widgetsGVR).Namespace(a).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list widgets in %s as the service account: %v", a, err)
	}

	// A Widget in each namespace, the unwatched one first: the pod
	// reports those of a and b, and none of outside.
	uids := map[string]string{}
	for _, n := range []string{outside, a, b} {
		w, err := c.dyn.Resource(widgetsGVR).Namespace(n).Create(ctx, widget(n, "inside-or-not"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uids[n] = string(w.GetUID())
	}
	firedIn := func(n string) bool {
		return slices.ContainsFunc(rel.payloadsOf(t, pod), func(p payload) bool {
			return p.Rule == "widgets" && p.Type == "created" && p.UID == uids[n]
		})
	}
	if !poll(time.Minute, func() bool { return firedIn(a) && firedIn(b) }) {
		t.Errorf("the creations in %s (%v) and %s (%v) were not reported within a minute", a, firedIn(a), b, firedIn(b))
	}
	if firedIn(outside) {
		t.Errorf("the Widget in %s, which is not watched, was reported", outside)
	}
	if log := rel.log(t, pod); strings.Contains(strings.ToLower(log), "forbidden") {
		t.Errorf("the pod hit a refused request with the chart's namespaced RBAC:\n%s", log)
	}

	u := action.NewUninstall(cfg)
	u.WaitStrategy = kube.StatusWatcherStrategy
	u.Timeout = rolloutTimeout
	if _, err := u.Run(name); err != nil {
		t.Fatalf("helm uninstall --wait: %v", err)
	}
}
