package rules

import (
	"reflect"
	"testing"

	"github.com/fieldwatch/fieldwatch/change"
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
		res  change.Resource
		want []string
	}{
		{change.Resource{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespaced: true, Preferred: true}, []string{"kube-system", "prod", "staging"}},
		{change.Resource{Version: "v1", Resource: "secrets", Kind: "Secret", Namespaced: true, Preferred: true}, nil},                        // c watches all
		{change.Resource{Group: "apps", Version: "v1", Resource: "deployments", Kind: "Deployment", Namespaced: true, Preferred: true}, nil}, // exclusion needs every namespace
		{change.Resource{Version: "v1", Resource: "pods", Kind: "Pod", Namespaced: true, Preferred: true}, nil},                              // no rule
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
