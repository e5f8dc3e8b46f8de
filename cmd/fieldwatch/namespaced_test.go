package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
	fwrules "github.com/fieldwatch/fieldwatch/rules"
	"github.com/fieldwatch/fieldwatch/watcher"
)

// namespacedRules watch two namespaces: ConfigMaps in both (no
// match.namespaces), Widgets in one, and Sprockets, whose CRD the test
// creates while fieldwatch runs.
const namespacedRules = `rules:
  - name: config
    match: {resources: [{group: "", kind: ConfigMap}]}
    on: [update]
    actions: [{log: {}}]
  - name: widgets
    match: {resources: [{group: example.com, kind: Widget}], namespaces: [nsi-b]}
    on: [create]
    actions: [{log: {}}, {event: {reason: WidgetCreated}}]
  - name: sprockets
    match: {resources: [{group: nsi.example.org, kind: Sprocket}]}
    on: [create]
    actions: [{log: {}}]
`

// sprocketCRD is a namespaced CRD the cluster does not serve when
// fieldwatch starts.
const sprocketCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: sprockets.nsi.example.org}
spec:
  group: nsi.example.org
  names: {kind: Sprocket, plural: sprockets, singular: sprocket, listKind: SprocketList}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`

// TestNamespacedInstall applies what `fieldwatch rbac --namespaces` prints
// as the only permissions of a service account (Roles, no ClusterRole),
// checks by SelfSubjectAccessReview and by impersonated reads that the
// account can read nothing outside its namespaces, and runs `fieldwatch
// run --namespaces` as that account: changes in its namespaces fire,
// those elsewhere do not, a CRD created while it runs is followed by
// discovery alone, no request is forbidden, and a reload with a rule
// outside the namespaces is refused.
func TestNamespacedInstall(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	ctx := context.Background()
	if _, err := env.ApplyFiles(ctx, testenv.ApplyOptions{}, repo(t, "examples/crds/widgets.yaml")); err != nil {
		t.Fatal(err)
	}
	fw, a, b, out := namespace(t, env, "nsi-fw"), namespace(t, env, "nsi-a"), namespace(t, env, "nsi-b"), namespace(t, env, "nsi-out")
	admin := env.WriteKubeconfig(t)
	rules := writeFile(t, "rules.yaml", namespacedRules)

	var manifests, errOut bytes.Buffer
	cmd := exec.Command(binary, "rbac", "--rules", rules, "--namespaces", a+","+b, "--leader-elect",
		"--namespace", fw, "--service-account", "fw", "--name", "fw-nsi", "--kubeconfig", admin)
	cmd.Stdout, cmd.Stderr = &manifests, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("fieldwatch rbac --namespaces: %v\n%s", err, errOut.String())
	}
	for _, doc := range strings.Split(manifests.String(), "\n---\n")[1:] {
		var obj metav1.PartialObjectMetadata
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		if obj.Namespace == "" || !strings.HasPrefix(obj.Kind, "Role") {
			t.Errorf("the namespaced RBAC holds %s %s (namespace %q)", obj.Kind, obj.Name, obj.Namespace)
		}
	}
	if _, err := env.Apply(ctx, testenv.ApplyOptions{}, manifests.Bytes()); err != nil {
		t.Fatalf("apply the namespaced RBAC: %v\n%s", err, manifests.String())
	}
	cs := env.Clientset(t)
	if _, err := cs.CoreV1().ServiceAccounts(fw).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "fw"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sa := impersonating(t, admin, "system:serviceaccount:"+fw+":fw", "system:serviceaccounts", "system:serviceaccounts:"+fw, "system:authenticated")
	saConfig, err := clientcmd.BuildConfigFromFlags("", sa)
	if err != nil {
		t.Fatal(err)
	}
	saClient := kubernetes.NewForConfigOrDie(saConfig)
	checkAccess(t, saClient, []access{
		{a, "", "configmaps", "watch", true}, {b, "", "configmaps", "list", true},
		{b, "example.com", "widgets", "list", true}, {b, "events.k8s.io", "events", "create", true},
		{a, "nsi.example.org", "sprockets", "watch", true}, {fw, "coordination.k8s.io", "leases", "update", true},
		// Nothing outside the namespaces, nothing cluster-wide, no Secrets.
		{out, "", "configmaps", "list", false}, {"default", "", "configmaps", "list", false},
		{"kube-system", "", "configmaps", "list", false}, {"", "", "configmaps", "list", false},
		{a, "example.com", "widgets", "list", false}, {out, "events.k8s.io", "events", "create", false},
		{a, "", "secrets", "get", false}, {a, "", "configmaps", "patch", false},
		{"", "", "namespaces", "list", false}, {"", "", "nodes", "list", false},
		{"", "apiextensions.k8s.io", "customresourcedefinitions", "list", false},
		{"", "apiregistration.k8s.io", "apiservices", "list", false},
		{"", "rbac.authorization.k8s.io", "clusterroles", "list", false},
		{a, "coordination.k8s.io", "leases", "update", false},
	})
	// And the reads themselves are refused.
	saDyn := dynamic.NewForConfigOrDie(saConfig)
	for _, read := range []struct {
		gvr       schema.GroupVersionResource
		namespace string
	}{
		{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, out},
		{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, ""},
		{schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, ""},
		{schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}, ""},
	} {
		_, err := saDyn.Resource(read.gvr).Namespace(read.namespace).List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("list %s in %q as the service account: %v, want forbidden", read.gvr.Resource, read.namespace, err)
		}
	}

	p := startFieldwatch(t, sa, "--rules", rules, "--namespaces", a+","+b, "--discovery-interval", "2s",
		"--leader-elect", "--leader-elect-namespace", fw)
	for _, ns := range []string{a, b, out} {
		apply(t, env, fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: %s}\ndata: {v: '1'}\n", ns))
	}
	for _, ns := range []string{out, b, a} { // out first: a's payload comes after it would have
		if _, err := cs.CoreV1().ConfigMaps(ns).Patch(ctx, "c", types.MergePatchType, []byte(`{"data":{"v":"2"}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 30*time.Second, "the updates in a and b", func() bool {
		ps := p.payloads()
		return len(inNamespace(ps, a)) == 1 && len(inNamespace(ps, b)) == 1
	})
	apply(t, env, fmt.Sprintf("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w, namespace: %s}\nspec: {size: 1}\n", a))
	apply(t, env, fmt.Sprintf("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w, namespace: %s}\nspec: {size: 1}\n", b))
	testenv.Eventually(t, 30*time.Second, "the Widget's Event in b", func() bool {
		evs, err := cs.EventsV1().Events(b).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Reason == "WidgetCreated" && e.Regarding.Name == "w" {
				return true
			}
		}
		return false
	})

	// A CRD created now: without the right to list CRDs, the periodic
	// discovery finds it.
	apply(t, env, sprocketCRD)
	testenv.Eventually(t, 30*time.Second, "a Sprocket to be created", func() bool {
		_, err := env.Apply(ctx, testenv.ApplyOptions{}, fmt.Appendf(nil, "apiVersion: nsi.example.org/v1\nkind: Sprocket\nmetadata: {name: s, namespace: %s}\n", a))
		return err == nil
	})
	testenv.Eventually(t, 60*time.Second, "the Sprocket's payload", func() bool {
		for _, pl := range inNamespace(p.payloads(), a) {
			if pl["rule"] == "sprockets" {
				return true
			}
		}
		return false
	})
	for _, pl := range p.payloads() {
		if ns := pl["namespace"]; ns != a && ns != b || pl["rule"] == "widgets" && ns != b {
			t.Errorf("a payload about %s/%s (rule %s): outside the namespaces the rules watch", ns, pl["name"], pl["rule"])
		}
	}
	if strings.Contains(strings.ToLower(p.logs()), "forbidden") {
		t.Errorf("fieldwatch hit a forbidden request with the namespaced RBAC:\n%s", tail(p.logs(), 4096))
	}

	// A reload that names another namespace is refused; the rules stay.
	outside := strings.Replace(namespacedRules, "namespaces: [nsi-b]", "namespaces: [nsi-b, nsi-out]", 1)
	if err := os.WriteFile(rules, []byte(outside), 0o644); err != nil {
		t.Fatal(err)
	}
	// The failure is counted before it is logged: both are waited for.
	want := `rules[1].match.namespaces[1]: namespace \"nsi-out\" is not watched`
	testenv.EventuallyWhy(t, 30*time.Second, "the refused reload, its error logged", func() (bool, string) {
		return p.metric("fieldwatch_rules_reload_failures_total") == 1 && strings.Contains(p.logs(), want),
			fmt.Sprintf("%v reload failures; the log's tail:\n%s", p.metric("fieldwatch_rules_reload_failures_total"), tail(p.logs(), 2048))
	})
}

// access is one SelfSubjectAccessReview and its expected answer.
type access struct {
	namespace, group, resource, verb string
	want                             bool
}

// checkAccess asks the apiserver whether the client may do each access.
func checkAccess(t *testing.T, client kubernetes.Interface, accesses []access) {
	t.Helper()
	for _, ac := range accesses {
		review, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(context.Background(), &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ac.namespace, Group: ac.group, Resource: ac.resource, Verb: ac.verb,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if review.Status.Allowed != ac.want {
			t.Errorf("%s %s.%s in %q: allowed %v, want %v", ac.verb, ac.resource, ac.group, ac.namespace, review.Status.Allowed, ac.want)
		}
	}
}

// clusterThingCRD is a cluster-scoped CRD: only discovery tells.
const clusterThingCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: clusterthings.nsi.example.org}
spec:
  group: nsi.example.org
  names: {kind: ClusterThing, plural: clusterthings, singular: clusterthing, listKind: ClusterThingList}
  scope: Cluster
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`

// TestNamespacedRefusals: rules that reach outside a namespaced install
// stop `fieldwatch run --namespaces` at start, each entry named at its
// FILE:LINE:COL; `fieldwatch validate --namespaces` says the same of the
// built-in cluster-scoped resources, and run of a cluster-scoped custom
// resource too (discovery tells); `fieldwatch rbac --namespaces` refuses
// them alike.
func TestNamespacedRefusals(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	apply(t, env, clusterThingCRD)
	admin := env.WriteKubeconfig(t)
	rules := writeFile(t, "outside.yaml", `rules:
  - name: outside
    match:
      resources: [{group: "", kind: ConfigMap}]
      namespaces: [nsr-a, kube-system]
    actions: [{log: {}}]
  - name: cluster
    match:
      resources: [{group: "", kind: Namespace}, {group: nsi.example.org, kind: ClusterThing}]
    actions: [{log: {}}]
`)
	namespaceErr := rules + `:5:27: rules[0].match.namespaces[1]: namespace "kube-system" is not watched: fieldwatch runs namespaced (--namespaces nsr-a)`
	builtinErr := rules + `:9:19: rules[1].match.resources[0]: Namespace is cluster-scoped`
	customErr := rules + `:9:49: rules[1].match.resources[1]: ClusterThing (nsi.example.org) is cluster-scoped`

	run := func(args ...string) (int, string) {
		t.Helper()
		var stderr bytes.Buffer
		cmd := exec.Command(binary, args...)
		cmd.Stderr = &stderr
		err := cmd.Run()
		if err != nil && cmd.ProcessState == nil {
			t.Fatal(err)
		}
		return cmd.ProcessState.ExitCode(), stderr.String()
	}
	testenv.Eventually(t, 30*time.Second, "ClusterThing to be served", func() bool {
		resources, _, err := watcher.Discover(context.Background(), env.Config())
		for _, r := range resources {
			if r.Kind == "ClusterThing" {
				return err == nil
			}
		}
		return false
	})
	code, stderr := run("run", "--rules", rules, "--namespaces", "nsr-a", "--kubeconfig", admin, "--http-addr", "")
	// The log is JSON: the error's quotes are escaped.
	for _, want := range []string{namespaceErr, builtinErr, customErr} {
		if escaped := strings.ReplaceAll(want, `"`, `\"`); code != 1 || !strings.Contains(stderr, escaped) {
			t.Errorf("fieldwatch run --namespaces: exit %d, want 1 and %s in:\n%s", code, escaped, stderr)
		}
	}
	code, stderr = run("validate", "--namespaces", "nsr-a", rules)
	if code != 1 || !strings.Contains(stderr, namespaceErr) || !strings.Contains(stderr, builtinErr) || strings.Contains(stderr, "ClusterThing") {
		t.Errorf("fieldwatch validate --namespaces: exit %d, want 1 with the namespace and Namespace errors, not ClusterThing's (offline):\n%s", code, stderr)
	}
	code, stderr = run("rbac", "--rules", rules, "--namespaces", "nsr-a", "--kubeconfig", admin)
	if code != 1 || !strings.Contains(stderr, namespaceErr) || !strings.Contains(stderr, builtinErr) || !strings.Contains(stderr, customErr) {
		t.Errorf("fieldwatch rbac --namespaces: exit %d, want 1 with every error:\n%s", code, stderr)
	}
	if code, stderr = run("validate", rules); code != 0 {
		t.Errorf("without --namespaces the rules are valid: exit %d\n%s", code, stderr)
	}
}

// TestBuiltinClusterScoped holds rules.BuiltinClusterScoped, what
// `fieldwatch validate --namespaces` refuses offline, to what a real
// kube-apiserver serves: every built-in cluster-scoped resource it serves
// is in the table, and no namespaced one.
func TestBuiltinClusterScoped(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	resources, _, err := watcher.Discover(context.Background(), env.Config())
	if err != nil {
		t.Fatal(err)
	}
	table := map[[2]string]string{}
	for _, r := range fwrules.BuiltinClusterScoped {
		table[[2]string{r.Group, r.Resource}] = r.Kind
	}
	checked := 0
	for _, r := range resources {
		if r.Custom {
			continue
		}
		kind, listed := table[[2]string{r.Group, r.Resource}]
		switch {
		case !r.Namespaced && !listed:
			t.Errorf("%s is cluster-scoped and not in rules.BuiltinClusterScoped", r)
		case !r.Namespaced && kind != r.Kind:
			t.Errorf("%s: kind %s in rules.BuiltinClusterScoped, %s served", r, kind, r.Kind)
		case r.Namespaced && listed:
			t.Errorf("%s is namespaced but in rules.BuiltinClusterScoped", r)
		case !r.Namespaced:
			checked++
		}
	}
	if checked < 10 {
		t.Errorf("only %d built-in cluster-scoped resources served: discovery did not see the built-in groups", checked)
	}
}
