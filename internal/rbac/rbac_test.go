package rbac

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/rules"
)

func res(group, version, resource, kind string, custom bool) change.Resource {
	return change.Resource{Group: group, Version: version, Resource: resource,
		Kind: kind, Custom: custom, Preferred: true, Namespaced: true}
}

var discovered = []change.Resource{
	res("", "v1", "configmaps", "ConfigMap", false),
	res("", "v1", "secrets", "Secret", false),
	res("apps", "v1", "deployments", "Deployment", false),
	res("example.com", "v1", "widgets", "Widget", true),
	res("example.com", "v1alpha1", "gadgets", "Gadget", true),
	res("other.io", "v2", "things", "Thing", true),
	clusterWide(res("", "v1", "nodes", "Node", false)),
}

func clusterWide(r change.Resource) change.Resource {
	r.Namespaced = false
	return r
}

// grantsOf renders the ClusterRole's rules as "group/resource:verbs" lines
// and each Role's as "namespace: group/resource:verbs"; it checks that
// every Role has its RoleBinding.
func grantsOf(t *testing.T, out []byte) []string {
	t.Helper()
	var lines []string
	bound := map[string]bool{}
	var roles []string
	for _, doc := range strings.Split(string(out), "\n---\n")[1:] {
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name, Namespace string
			} `json:"metadata"`
			Rules []rbacv1.PolicyRule `json:"rules"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		prefix := ""
		switch obj.Kind {
		case "Role":
			prefix = obj.Metadata.Namespace + ": "
			roles = append(roles, obj.Metadata.Namespace+"/"+obj.Metadata.Name)
		case "RoleBinding":
			bound[obj.Metadata.Namespace+"/"+obj.Metadata.Name] = true
			continue
		case "ClusterRole":
		default:
			continue
		}
		for _, r := range obj.Rules {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					lines = append(lines, prefix+g+"/"+res+":"+strings.Join(r.Verbs, ","))
				}
			}
		}
	}
	for _, r := range roles {
		if !bound[r] {
			t.Errorf("Role %s has no RoleBinding", r)
		}
	}
	return lines
}

func TestGenerate(t *testing.T) {
	tests := []struct {
		name       string
		rules      string
		discovered []change.Resource
		crds       []change.Resource
		wildPatch  bool
		namespaces []string // a namespaced install
		readCRDs   bool
		want       []string
		err        string // the error, instead of grants
	}{{
		name: "kinds resolve through discovery; event and patch actions add their verbs",
		rules: `rules:
  - name: r
    match: {resources: [{group: "", kind: ConfigMap}, {group: apps, kind: Deployment}]}
    actions: [{event: {reason: X}}, {patch: {merge: {metadata: {labels: {a: b}}}}}]
`,
		discovered: discovered,
		want: []string{
			"/configmaps:get,list,patch,watch",
			"apiextensions.k8s.io/customresourcedefinitions:get,list,watch",
			"apiregistration.k8s.io/apiservices:get,list,watch",
			"apps/deployments:get,list,patch,watch",
			"events.k8s.io/events:create",
		},
	}, {
		name: "every custom resource: the ones served now, not secrets",
		rules: `rules:
  - name: audit
    match: {resources: [{group: "*", kind: "*"}], custom: true}
    actions: [{log: {}}]
`,
		discovered: discovered,
		want: []string{
			"apiextensions.k8s.io/customresourcedefinitions:get,list,watch",
			"apiregistration.k8s.io/apiservices:get,list,watch",
			"example.com/gadgets:get,list,watch",
			"example.com/widgets:get,list,watch",
			"other.io/things:get,list,watch",
		},
	}, {
		name: "rules restricted to namespaces are granted there only, cluster-scoped kinds cluster-wide",
		rules: `rules:
  - name: prod-config
    match: {resources: [{group: "", kind: ConfigMap}], namespaces: [prod, staging]}
    actions: [{event: {reason: X}}, {patch: {merge: {metadata: {labels: {a: b}}}}}]
  - name: nodes
    match: {resources: [{group: "", kind: Node}], namespaces: [prod]}
    actions: [{log: {}}]
  - name: secrets
    match: {resources: [{group: "", kind: Secret}]}
    actions: [{log: {}}]
`,
		discovered: discovered,
		want: []string{
			"/nodes:get,list,watch",
			"/secrets:get,list,watch",
			"apiextensions.k8s.io/customresourcedefinitions:get,list,watch",
			"apiregistration.k8s.io/apiservices:get,list,watch",
			"prod: /configmaps:get,list,patch,watch",
			"prod: events.k8s.io/events:create",
			"staging: /configmaps:get,list,patch,watch",
			"staging: events.k8s.io/events:create",
		},
	}, {
		name: "the impact of CRD changes: the custom resources of the CRDs named, in every namespace",
		rules: `rules:
  - name: breaking
    match:
      resources: [{group: apiextensions.k8s.io, kind: CustomResourceDefinition}]
      names: [widgets.example.com, things.other.io]
    crd: {impact: true}
    actions: [{log: {}}]
  - name: widgets
    match: {resources: [{group: example.com, kind: Widget}], namespaces: [prod]}
    actions: [{log: {}}]
`,
		discovered: discovered,
		want: []string{
			"apiextensions.k8s.io/customresourcedefinitions:get,list,watch",
			"apiregistration.k8s.io/apiservices:get,list,watch",
			"example.com/widgets:get,list,watch",
			"other.io/things:get,list,watch",
			"prod: example.com/widgets:get,list,watch",
		},
	}, {
		name: "the impact of every CRD change: every custom resource served now",
		rules: `rules:
  - name: breaking
    match: {resources: [{group: apiextensions.k8s.io, kind: CustomResourceDefinition}]}
    crd: {impact: true}
    actions: [{log: {}}]
`,
		discovered: discovered,
		want: []string{
			"apiextensions.k8s.io/customresourcedefinitions:get,list,watch",
			"apiregistration.k8s.io/apiservices:get,list,watch",
			"example.com/gadgets:get,list,watch",
			"example.com/widgets:get,list,watch",
			"other.io/things:get,list,watch",
		},
	}, {
		name: "offline, every custom resource is refused without CRDs",
		rules: `rules:
  - name: audit
    match: {resources: [{group: "*", kind: "*"}], custom: true}
    actions: [{log: {}}]
`,
		err: `rule audit (rules.yaml:2:5): selects every custom resource of every group: offline, fieldwatch does not know them, and "*" would grant every resource, Secrets included; run ` + "`fieldwatch rbac`" + ` against the cluster, or give the CRDs with --crds FILE`,
	}, {
		name: "offline, every custom resource: those of the CRDs given",
		rules: `rules:
  - name: audit
    match: {resources: [{group: "*", kind: "*"}], custom: true}
    actions: [{log: {}}]
`,
		crds: []change.Resource{res("example.com", "v1", "widgets", "Widget", true), clusterWide(res("other.io", "v2", "things", "Thing", true))},
		want: []string{
			"apiextensions.k8s.io/customresourcedefinitions:get,list,watch",
			"apiregistration.k8s.io/apiservices:get,list,watch",
			"example.com/widgets:get,list,watch",
			"other.io/things:get,list,watch",
		},
	}, {
		name: "every resource: what is served, Secrets only where a rule names them",
		rules: `rules:
  - name: all
    match: {resources: [{group: "*", kind: "*"}]}
    actions: [{log: {}}]
  - name: core
    match: {resources: [{group: "", kind: "*"}], namespaces: [a]}
    actions: [{log: {}}]
  - name: named
    match: {resources: [{group: "", kind: Secret}], namespaces: [b]}
    actions: [{log: {}}]
`,
		discovered: discovered,
		want: []string{
			"/configmaps:get,list,watch",
			"/nodes:get,list,watch",
			"apiextensions.k8s.io/customresourcedefinitions:get,list,watch",
			"apiregistration.k8s.io/apiservices:get,list,watch",
			"apps/deployments:get,list,watch",
			"example.com/gadgets:get,list,watch",
			"example.com/widgets:get,list,watch",
			"other.io/things:get,list,watch",
			"a: /configmaps:get,list,watch",
			"b: /secrets:get,list,watch",
		},
	}, {
		name: "offline, every resource of the core group is refused",
		rules: `rules:
  - name: core
    match: {resources: [{group: "", kind: "*"}]}
    actions: [{log: {}}]
`,
		err: `rule core (rules.yaml:2:5): selects every resource of the core group: offline, "*" would grant Secrets too; run ` + "`fieldwatch rbac`" + ` against the cluster`,
	}, {
		name: "offline, every kind of another group stays a wildcard",
		rules: `rules:
  - name: apps
    match: {resources: [{group: apps, kind: "*"}]}
    actions: [{log: {}}]
`,
		want: []string{
			"apiextensions.k8s.io/customresourcedefinitions:get,list,watch",
			"apiregistration.k8s.io/apiservices:get,list,watch",
			"apps/*:get,list,watch",
		},
	}, {
		name: "a patch action with a wildcard selector is refused",
		rules: `rules:
  - name: stamp
    match: {resources: [{group: "*", kind: "*"}]}
    actions: [{patch: {merge: {metadata: {labels: {seen: "yes"}}}}}]
`,
		discovered: discovered,
		err:        "rule stamp (rules.yaml:2:5) has a patch action and a wildcard selector: it would be granted patch on every resource it matches (kube-system Deployments, webhook configurations, ...); name its resources, or pass --allow-wildcard-patch to grant that",
	}, {
		name: "a patch action with a wildcard selector, allowed: every resource matched, not Secrets",
		rules: `rules:
  - name: stamp
    match: {resources: [{group: "", kind: "*"}]}
    actions: [{patch: {merge: {metadata: {labels: {seen: "yes"}}}}}]
`,
		discovered: discovered,
		wildPatch:  true,
		want: []string{
			"/configmaps:get,list,patch,watch",
			"/nodes:get,list,patch,watch",
			"apiextensions.k8s.io/customresourcedefinitions:get,list,watch",
			"apiregistration.k8s.io/apiservices:get,list,watch",
		},
	}, {
		name: "offline, kinds become plurals; status patches name the subresource",
		rules: `rules:
  - name: r
    match: {resources: [{group: example.com, kind: Widget}]}
    actions: [{patch: {subresource: status, merge: {status: {seen: true}}}}]
`,
		want: []string{
			"apiextensions.k8s.io/customresourcedefinitions:get,list,watch",
			"apiregistration.k8s.io/apiservices:get,list,watch",
			"example.com/widgets:get,list,watch",
			"example.com/widgets/status:patch",
		},
	}, {
		name: "namespaced: Roles only, a rule without namespaces in every watched one, wildcards their namespaced resources",
		rules: `rules:
  - name: config
    match: {resources: [{group: "", kind: ConfigMap}]}
    actions: [{event: {reason: X}}]
  - name: widgets
    match: {resources: [{group: example.com, kind: Widget}], namespaces: [b]}
    actions: [{patch: {merge: {metadata: {labels: {a: b}}}}}]
  - name: every-custom
    match: {resources: [{group: "*", kind: "*"}], custom: true}
    actions: [{log: {}}]
`,
		discovered: discovered,
		namespaces: []string{"a", "b"},
		want: []string{
			"a: /configmaps:get,list,watch",
			"a: events.k8s.io/events:create",
			"a: example.com/gadgets:get,list,watch",
			"a: example.com/widgets:get,list,watch",
			"a: other.io/things:get,list,watch",
			"b: /configmaps:get,list,watch",
			"b: events.k8s.io/events:create",
			"b: example.com/widgets:get,list,patch,watch",
			"b: example.com/gadgets:get,list,watch",
			"b: other.io/things:get,list,watch",
		},
	}, {
		name: "namespaced with --read-crds: a ClusterRole that reads CRDs, nothing else cluster-wide",
		rules: `rules:
  - name: config
    match: {resources: [{group: "", kind: ConfigMap}]}
    actions: [{log: {}}]
`,
		discovered: discovered,
		namespaces: []string{"a"},
		readCRDs:   true,
		want: []string{
			"apiextensions.k8s.io/customresourcedefinitions:get,list,watch",
			"a: /configmaps:get,list,watch",
		},
	}, {
		name: "namespaced: a namespace outside and a cluster-scoped kind are refused where they are written",
		rules: `rules:
  - name: nodes
    match: {resources: [{group: "", kind: Node}], namespaces: [a, kube-system]}
    actions: [{log: {}}]
`,
		discovered: discovered,
		namespaces: []string{"a"},
		err: "rules.yaml:3:25: rules[0].match.resources[0]: Node is cluster-scoped: fieldwatch runs namespaced (--namespaces a) and watches namespaced resources only; reading it needs a ClusterRole, so run fieldwatch cluster-wide for this rule\n" +
			`rules.yaml:3:67: rules[0].match.namespaces[1]: namespace "kube-system" is not watched: fieldwatch runs namespaced (--namespaces a) and may read nothing outside those namespaces`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := rules.Parse("rules.yaml", []byte(tt.rules))
			if err != nil {
				t.Fatal(err)
			}
			out, err := Generate(set, Options{Resources: tt.discovered, CRDs: tt.crds, AllowWildcardPatch: tt.wildPatch, Namespaces: tt.namespaces, ReadCRDs: tt.readCRDs})
			if tt.err != "" {
				if err == nil || err.Error() != tt.err {
					t.Errorf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := grantsOf(t, out)
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("grants:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// TestHelmValues: -o helm-values holds the same rules as the manifests,
// as the chart's values; a namespaced install's also its namespaces, no
// cluster rules (the chart makes the CRD read of readCRDs itself).
func TestHelmValues(t *testing.T) {
	set, err := rules.Parse("rules.yaml", []byte(`rules:
  - name: config
    match: {resources: [{group: "", kind: ConfigMap}], namespaces: [a]}
    actions: [{log: {}}]
  - name: widgets
    match: {resources: [{group: example.com, kind: Widget}]}
    actions: [{log: {}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, opts := range []Options{
		{Resources: discovered},
		{Resources: discovered, Namespaces: []string{"a", "b"}, ReadCRDs: true, HistoryAPI: true},
	} {
		p, err := Compute(set, opts)
		if err != nil {
			t.Fatal(err)
		}
		out, err := p.HelmValues(opts)
		if err != nil {
			t.Fatal(err)
		}
		var v helmValues
		if err := yaml.UnmarshalStrict(out, &v); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		wantCluster := p.Cluster
		if opts.Namespaces != nil {
			wantCluster = []rbacv1.PolicyRule{}
			if len(p.Cluster) != 1 || p.Cluster[0].Resources[0] != "customresourcedefinitions" {
				t.Errorf("namespaced with ReadCRDs: cluster rules %v, want the CRD read only", p.Cluster)
			}
		}
		if !reflect.DeepEqual(v.RBAC.ClusterRules, wantCluster) || !reflect.DeepEqual(v.RBAC.NamespaceRules, p.Namespaced) ||
			!slices.Equal(v.WatchNamespaces, opts.Namespaces) || v.RBAC.ReadCRDs != opts.ReadCRDs || v.RBAC.HistoryAPI != opts.HistoryAPI {
			t.Errorf("namespaces %v: values\n%s\ndo not hold the permissions %+v", opts.Namespaces, out, p)
		}
		if len(v.RBAC.NamespaceRules["a"]) == 0 {
			t.Errorf("namespaces %v: no Role in a:\n%s", opts.Namespaces, out)
		}
	}
}

// TestMetricsGrants: the resources of the metrics from fields are granted
// get, list and watch everywhere, or in each namespace of a namespaced
// install.
func TestMetricsGrants(t *testing.T) {
	none, err := rules.Compile(rules.File{})
	if err != nil {
		t.Fatal(err)
	}
	certs := change.Selector{Group: "cert-manager.io", Version: "*", Kind: "Certificate", Custom: true}
	has := func(rs []rbacv1.PolicyRule) bool {
		for _, r := range rs {
			if slices.Contains(r.APIGroups, "cert-manager.io") && slices.Contains(r.Resources, "certificates") &&
				slices.Equal(r.Verbs, []string{"get", "list", "watch"}) {
				return true
			}
		}
		return false
	}
	p, err := Compute(none, Options{Metrics: []change.Selector{certs}})
	if err != nil {
		t.Fatal(err)
	}
	if !has(p.Cluster) {
		t.Errorf("cluster-wide: certificates not granted: %+v", p.Cluster)
	}
	p, err = Compute(none, Options{Metrics: []change.Selector{certs}, Namespaces: []string{"a", "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if has(p.Cluster) || !has(p.Namespaced["a"]) || !has(p.Namespaced["b"]) {
		t.Errorf("namespaced: cluster %+v, roles %+v", p.Cluster, p.Namespaced)
	}
	if _, err := Compute(none, Options{Metrics: []change.Selector{{Group: "example.com", Version: "*", Custom: true}}}); err != nil {
		t.Errorf("every kind of one group, offline: %v", err)
	}
}
