package app

import (
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/fieldwatch/fieldwatch/rules"
	"github.com/fieldwatch/fieldwatch/watcher"
)

func res(group, version, resource, kind string, custom bool) watcher.Resource {
	return watcher.Resource{GroupVersionResource: schema.GroupVersionResource{Group: group, Version: version, Resource: resource},
		Kind: kind, Custom: custom, Preferred: true, Namespaced: true}
}

var discovered = []watcher.Resource{
	res("", "v1", "configmaps", "ConfigMap", false),
	res("", "v1", "secrets", "Secret", false),
	res("apps", "v1", "deployments", "Deployment", false),
	res("example.com", "v1", "widgets", "Widget", true),
	res("example.com", "v1alpha1", "gadgets", "Gadget", true),
	res("other.io", "v2", "things", "Thing", true),
}

// grantsOf renders the ClusterRole's rules as "group/resource:verbs" lines.
func grantsOf(t *testing.T, out []byte) []string {
	t.Helper()
	docs := strings.Split(string(out), "\n---\n")
	var role rbacv1.ClusterRole
	if err := yaml.Unmarshal([]byte(docs[1]), &role); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, r := range role.Rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				lines = append(lines, g+"/"+res+":"+strings.Join(r.Verbs, ","))
			}
		}
	}
	return lines
}

func TestRBAC(t *testing.T) {
	tests := []struct {
		name       string
		rules      string
		discovered []watcher.Resource
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
