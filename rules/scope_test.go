package rules

import (
	"errors"
	"strings"
	"testing"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/fileerr"
)

const namespacedRules = `rules:
  - name: in-scope
    match:
      resources: [{group: "", kind: ConfigMap}]
      namespaces: [shop]
    actions: [{log: {}}]
  - name: every-watched-namespace
    match:
      resources: [{group: apps, kind: "*"}, {group: "*", kind: "*"}]
      custom: true
      excludeNamespaces: [kube-system]
    actions: [{log: {}}]
  - name: outside
    match:
      resources: [{group: "", kind: ConfigMap}]
      namespaces: [shop, kube-system]
    actions: [{log: {}}]
  - name: cluster-scoped
    match:
      resources:
        - {group: "", kind: Namespace}
        - {group: rbac.authorization.k8s.io, resource: clusterroles}
        - {group: example.com, kind: Cluster}
        - {group: example.com, kind: Widget}
    actions: [{log: {}}]
  - name: crd-changes
    match:
      resources: [{group: apiextensions.k8s.io, kind: CustomResourceDefinition}]
    crd: {impact: true}
    actions: [{log: {}}]
`

// TestCheckNamespaced: in a namespaced install, a namespace outside the
// watched ones and a selector of cluster-scoped resources are refused
// where they were written; wildcards and rules without namespaces are
// not. Offline only the built-in cluster-scoped resources are known;
// with discovery, custom ones too.
func TestCheckNamespaced(t *testing.T) {
	set, err := Parse("ns.yaml", []byte(namespacedRules))
	if err != nil {
		t.Fatal(err)
	}
	offline := []string{
		`ns.yaml:16:26: rules[2].match.namespaces[1]: namespace "kube-system" is not watched: fieldwatch runs namespaced (--namespaces shop,staging) and may read nothing outside those namespaces`,
		`ns.yaml:21:11: rules[3].match.resources[0]: Namespace is cluster-scoped: fieldwatch runs namespaced (--namespaces shop,staging) and watches namespaced resources only; reading it needs a ClusterRole, so run fieldwatch cluster-wide for this rule`,
		`ns.yaml:22:11: rules[3].match.resources[1]: clusterroles (rbac.authorization.k8s.io) is cluster-scoped`,
		`ns.yaml:28:19: rules[4].match.resources[0]: CustomResourceDefinition (apiextensions.k8s.io) is cluster-scoped`,
	}
	checkErrors(t, set.CheckNamespaced(Namespaced{Namespaces: []string{"shop", "staging"}}), offline)

	served := []change.Resource{
		{Group: "example.com", Version: "v1", Resource: "clusters", Kind: "Cluster", Custom: true, Preferred: true},
		{Group: "example.com", Version: "v1", Resource: "widgets", Kind: "Widget", Custom: true, Preferred: true, Namespaced: true},
		{Version: "v1", Resource: "namespaces", Kind: "Namespace", Preferred: true},
		{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Preferred: true, Namespaced: true},
	}
	online := append(offline[:2:2], offline[2],
		`ns.yaml:23:11: rules[3].match.resources[2]: Cluster (example.com) is cluster-scoped`,
		offline[3])
	checkErrors(t, set.CheckNamespaced(Namespaced{Namespaces: []string{"shop", "staging"}, Resources: served}), online)

	fine, err := Parse("fine.yaml", []byte(strings.Split(namespacedRules, "  - name: outside")[0]))
	if err != nil {
		t.Fatal(err)
	}
	if err := fine.CheckNamespaced(Namespaced{Namespaces: []string{"shop"}, Resources: served}); err != nil {
		t.Errorf("rules within the namespaces refused: %v", err)
	}
}

// checkErrors checks that err is a fileerr.List whose lines start with
// want, in order.
func checkErrors(t *testing.T, err error, want []string) {
	t.Helper()
	var list fileerr.List
	if !errors.As(err, &list) {
		t.Fatalf("error %v is not a fileerr.List", err)
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d errors, want %d:\n%s", len(lines), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("error %d:\n got %s\nwant %s...", i, lines[i], w)
		}
	}
}

// TestClusterScoped: discovery decides when it knows the resources; a
// named kind it does not serve falls back to the built-in table; a
// wildcard is cluster-scoped only when everything it matches is.
func TestClusterScoped(t *testing.T) {
	served := []change.Resource{
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles", Kind: "Role", Namespaced: true, Preferred: true},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles", Kind: "ClusterRole", Preferred: true},
		{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices", Kind: "APIService", Preferred: true},
	}
	tests := []struct {
		sel       change.Selector
		resources []change.Resource
		want      bool
	}{
		{change.Selector{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}, served, true},
		{change.Selector{Group: "rbac.authorization.k8s.io", Kind: "Role"}, served, false},
		{change.Selector{Group: "rbac.authorization.k8s.io", Kind: "*"}, served, false},
		{change.Selector{Group: "apiregistration.k8s.io", Kind: "*"}, served, true},
		{change.Selector{Group: "apiregistration.k8s.io", Kind: "*"}, nil, false},
		{change.Selector{Group: "storage.k8s.io", Kind: "StorageClass", Version: "v1"}, served, true}, // not served: the table
		{change.Selector{Group: "*", Kind: "Namespace"}, nil, true},
		{change.Selector{Group: "", Resource: "configmaps"}, nil, false},
		{change.Selector{Group: "example.com", Kind: "Widget"}, nil, false},
		{change.Selector{Group: "*", Kind: "*", Custom: true}, nil, false},
	}
	for _, tt := range tests {
		if got := ClusterScoped(tt.sel, tt.resources); got != tt.want {
			t.Errorf("ClusterScoped(%+v, %d resources) = %v, want %v", tt.sel, len(tt.resources), got, tt.want)
		}
	}
}
