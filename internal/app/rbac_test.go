package app

import (
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

func TestRBAC(t *testing.T) {
	tests := []struct {
		name       string
		rules      string
		discovered []change.Resource
		want       []string
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
		name: "offline, a wildcard stays a wildcard",
		rules: `rules:
  - name: audit
    match: {resources: [{group: "*", kind: "*"}], custom: true}
    actions: [{log: {}}]
`,
		want: []string{
			"*/*:get,list,watch",
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
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := rules.Parse("rules.yaml", []byte(tt.rules))
			if err != nil {
				t.Fatal(err)
			}
			out, err := RBAC(set, RBACOptions{Resources: tt.discovered})
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
