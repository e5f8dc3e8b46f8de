package charts

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/rbac"
	"github.com/fieldwatch/fieldwatch/rules"
)

// rbacRules need Roles in a namespace, a ClusterRole, Events and patches.
const rbacRules = `rules:
  - name: config
    match: {resources: [{group: "", kind: ConfigMap}], namespaces: [shop]}
    on: [update]
    actions: [{log: {}}, {event: {reason: ConfigChanged}}]
  - name: widgets
    match: {resources: [{group: example.com, kind: Widget}]}
    actions: [{patch: {merge: {metadata: {annotations: {seen: "yes"}}}}}]
`

// served is what discovery says of the rules' resources.
var served = []change.Resource{
	{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespaced: true, Preferred: true},
	{Group: "example.com", Version: "v1", Resource: "widgets", Kind: "Widget", Namespaced: true, Custom: true, Preferred: true},
}

// helmValues returns what `fieldwatch rbac -o helm-values` prints for
// ruleText with opts, decoded, and the manifests `fieldwatch rbac` prints.
func helmValues(t *testing.T, ruleText string, opts rbac.Options) (map[string]any, []*unstructured.Unstructured) {
	t.Helper()
	set, err := rules.Parse("rules.yaml", []byte(ruleText))
	if err != nil {
		t.Fatal(err)
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
	vals["rules"] = map[string]any{"inline": ruleText}
	manifests, err := perms.Manifests(opts)
	if err != nil {
		t.Fatal(err)
	}
	return vals, objects(t, string(manifests))
}

// policyRules reads the rules of a ClusterRole or Role.
func policyRules(t *testing.T, obj *unstructured.Unstructured) []rbacv1.PolicyRule {
	t.Helper()
	var role rbacv1.ClusterRole // a Role has the same rules
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &role); err != nil {
		t.Fatal(err)
	}
	return role.Rules
}

// TestRBACFromHelmValues: the values `fieldwatch rbac -o helm-values`
// prints make the chart render the RBAC `fieldwatch rbac` prints for the
// same rules: the same ClusterRole rules, a Role with the same rules in
// each namespace, each bound to the chart's service account; in a
// namespaced install no ClusterRole, or with readCRDs one that only reads
// CRDs.
func TestRBACFromHelmValues(t *testing.T) {
	for _, opts := range []rbac.Options{
		{Resources: served, Namespace: releaseNamespace, LeaderElection: true, HistoryAPI: true, AdmissionCerts: true, CRDGuard: true},
		{Resources: served, Namespace: releaseNamespace, LeaderElection: true, Namespaces: []string{"shop", "staging"}},
		{Resources: served, Namespace: releaseNamespace, LeaderElection: true, Namespaces: []string{"shop", "staging"}, ReadCRDs: true},
	} {
		name := "cluster-wide"
		if opts.Namespaces != nil {
			name = "namespaced " + strings.Join(opts.Namespaces, ",")
			if opts.ReadCRDs {
				name += " reading CRDs"
			}
		}
		t.Run(name, func(t *testing.T) {
			vals, want := helmValues(t, rbacRules, opts)
			got := objects(t, mustRender(t, vals).manifest)
			var wantRBAC, gotRBAC []string
			for _, o := range want {
				wantRBAC = append(wantRBAC, key(o))
			}
			for _, o := range got {
				if strings.HasPrefix(o.GetKind(), "ClusterRole") || strings.HasPrefix(o.GetKind(), "Role") {
					gotRBAC = append(gotRBAC, key(o))
				}
			}
			if !reflect.DeepEqual(sorted(wantRBAC), sorted(gotRBAC)) {
				t.Fatalf("the chart renders %v, fieldwatch rbac prints %v", gotRBAC, wantRBAC)
			}
			for _, w := range want {
				g := find(got, w.GetKind(), w.GetNamespace(), w.GetName())
				switch w.GetKind() {
				case "ClusterRole", "Role":
					if !reflect.DeepEqual(policyRules(t, w), policyRules(t, g)) {
						t.Errorf("%s: the chart's rules %v, fieldwatch rbac's %v", key(w), policyRules(t, g), policyRules(t, w))
					}
				default:
					for _, field := range []string{"roleRef", "subjects"} {
						if !reflect.DeepEqual(w.Object[field], g.Object[field]) {
							t.Errorf("%s: the chart's %s %v, fieldwatch rbac's %v", key(w), field, g.Object[field], w.Object[field])
						}
					}
				}
			}
		})
	}
}

// sorted returns s sorted.
func sorted(s []string) []string { return slices.Sorted(slices.Values(s)) }
