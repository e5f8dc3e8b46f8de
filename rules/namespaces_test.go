package rules

import (
	"reflect"
	"testing"
)

func TestNamespaces(t *testing.T) {
	set, err := Parse("ns.yaml", []byte(`rules:
  - name: a
    match: {resources: [{group: "", kind: ConfigMap}], namespaces: [prod, kube-system]}
    actions: [{log: {}}]
  - name: b
    match: {resources: [{group: "", kind: ConfigMap}, {group: "", kind: Secret}], namespaces: [prod, staging]}
    actions: [{log: {}}]
  - name: c
    match: {resources: [{group: "", kind: Secret}]}
    actions: [{log: {}}]
  - name: d
    match: {resources: [{group: apps, kind: Deployment}], excludeNamespaces: [kube-system]}
    actions: [{log: {}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		res  Resource
		want []string
	}{
		{Resource{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespaced: true}, []string{"kube-system", "prod", "staging"}},
		{Resource{Version: "v1", Resource: "secrets", Kind: "Secret", Namespaced: true}, nil},                        // c watches all
		{Resource{Group: "apps", Version: "v1", Resource: "deployments", Kind: "Deployment", Namespaced: true}, nil}, // exclusion needs every namespace
		{Resource{Version: "v1", Resource: "pods", Kind: "Pod", Namespaced: true}, nil},                              // no rule
	}
	for _, tt := range tests {
		if got := set.Namespaces(tt.res); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: %v, want %v", tt.res.Resource, got, tt.want)
		}
	}
	if got := set.Rule("a").Namespaces(); !reflect.DeepEqual(got, []string{"prod", "kube-system"}) {
		t.Errorf("rule a: %v", got)
	}
}
