package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
	fwrules "github.com/fieldwatch/fieldwatch/rules"
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
	t.Parallel()
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

// TestRBACEveryExample checks, for every example's rules, what `fieldwatch
// rbac` prints against the control plane (the example CRDs installed), and
// offline with the example CRDs given, by impersonation: applied as the only permissions of a service account,
// the account cannot read a Secret the rules do not name (nor any Secret
// cluster-wide), cannot patch what no patch action needs, and no rule
// grants "*".
func TestRBACEveryExample(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	ctx := context.Background()
	if _, err := env.ApplyFiles(ctx, testenv.ApplyOptions{}, repo(t, "examples/crds/widgets.yaml"), repo(t, "examples/crds/gadgets.yaml")); err != nil {
		t.Fatal(err)
	}
	admin := env.WriteKubeconfig(t)
	files, err := filepath.Glob(repo(t, "examples") + "/*/rules.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("examples: %v %v", files, err)
	}
	type run struct{ name, file, mode string }
	var runs []run
	for _, file := range files {
		example := filepath.Base(filepath.Dir(file))
		runs = append(runs, run{example, file, "online"}, run{example, file, "offline"})
	}
	for _, tc := range runs {
		file, example := tc.file, tc.name
		t.Run(example+"/"+tc.mode, func(t *testing.T) {
			// Each in its namespace, with its own ClusterRole name; the
			// namespaces the rules name are created if absent.
			t.Parallel()
			set, err := fwrules.Load(file)
			if err != nil {
				t.Fatal(err)
			}
			// Where the rules name Secrets (nil: everywhere), and whether
			// they patch.
			secretsIn, namesSecrets, patches := map[string]bool{}, false, false
			for _, r := range set.Rules() {
				for _, s := range r.Selectors {
					if s.NamesSecrets() {
						namesSecrets = true
						for _, ns := range r.Namespaces() {
							secretsIn[ns] = true
						}
					}
				}
				for _, a := range r.Actions {
					patches = patches || a.Patch != nil
				}
			}
			ns := namespace(t, env, "rbac-"+tc.mode+"-"+example)
			// The namespaces the example's rules name.
			var named []string
			for _, r := range set.Rules() {
				named = append(named, r.Namespaces()...)
			}
			for _, name := range named {
				_, err := env.Clientset(t).CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
				if err != nil && !apierrors.IsAlreadyExists(err) {
					t.Fatal(err)
				}
			}
			name := "fw-" + tc.mode + "-" + example
			args := []string{"rbac", "--rules", file, "--namespace", ns, "--service-account", "fw", "--name", name, "--kubeconfig", admin}
			if tc.mode == "offline" {
				args = append(args, "--offline", "--crds", repo(t, "examples/crds"))
			}
			var out, errOut bytes.Buffer
			cmd := exec.Command(binary, args...)
			cmd.Stdout, cmd.Stderr = &out, &errOut
			if err := cmd.Run(); err != nil {
				t.Fatalf("fieldwatch rbac: %v\n%s", err, errOut.String())
			}
			for _, doc := range strings.Split(out.String(), "\n---\n")[1:] {
				var role rbacv1.ClusterRole // a Role has the same rules
				if err := yaml.Unmarshal([]byte(doc), &role); err != nil {
					t.Fatal(err)
				}
				for _, r := range role.Rules {
					if slices.Contains(r.Resources, "*") {
						t.Errorf("%s %s grants %v on %v/%v", role.Kind, role.Name, r.Verbs, r.APIGroups, r.Resources)
					}
				}
			}
			if _, err := env.Apply(ctx, testenv.ApplyOptions{}, out.Bytes()); err != nil {
				t.Fatalf("apply the generated RBAC: %v\n%s", err, out.String())
			}
			if _, err := env.Clientset(t).CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "fw"}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			sa := impersonating(t, admin, "system:serviceaccount:"+ns+":fw", "system:serviceaccounts", "system:serviceaccounts:"+ns, "system:authenticated")
			saConfig, err := clientcmd.BuildConfigFromFlags("", sa)
			if err != nil {
				t.Fatal(err)
			}
			saClient := kubernetes.NewForConfigOrDie(saConfig)
			allowed := func(namespace, group, resource, verb string) bool {
				t.Helper()
				review, err := saClient.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
					Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
						Namespace: namespace, Group: group, Resource: resource, Verb: verb,
					}},
				}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				return review.Status.Allowed
			}
			for _, where := range []string{"default", ns, "kube-system", "production", ""} {
				want := namesSecrets && secretsIn[where]
				for _, verb := range []string{"get", "list"} {
					if got := allowed(where, "", "secrets", verb); got != want {
						t.Errorf("%s secrets in %q: allowed %v, want %v", verb, where, got, want)
					}
				}
			}
			for _, tc := range []struct{ namespace, group, resource string }{
				{"kube-system", "", "secrets"}, {"kube-system", "apps", "deployments"}, {"", "admissionregistration.k8s.io", "validatingwebhookconfigurations"},
				{"default", "", "configmaps"}, {"", "rbac.authorization.k8s.io", "clusterroles"},
			} {
				if allowed(tc.namespace, tc.group, tc.resource, "patch") {
					t.Errorf("patch %s.%s in %q is allowed", tc.resource, tc.group, tc.namespace)
				}
			}
			if !patches && allowed("default", "example.com", "widgets", "patch") {
				t.Errorf("patch widgets is allowed to rules without a patch action")
			}
		})
	}
}
