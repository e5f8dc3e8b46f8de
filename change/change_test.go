package change

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestSelectorMatches(t *testing.T) {
	var (
		cm       = Resource{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespaced: true, Preferred: true}
		nodes    = Resource{Version: "v1", Resource: "nodes", Kind: "Node", Preferred: true}
		deploy   = Resource{Group: "apps", Version: "v1", Resource: "deployments", Kind: "Deployment", Namespaced: true, Preferred: true}
		widgetV1 = Resource{Group: "example.com", Version: "v1", Resource: "widgets", Kind: "Widget", Namespaced: true, Custom: true, Preferred: true}
		widgetV2 = Resource{Group: "example.com", Version: "v2", Resource: "widgets", Kind: "Widget", Namespaced: true, Custom: true}
		gadgets  = Resource{Group: "example.com", Version: "v1", Resource: "gadgets", Kind: "Gadget", Namespaced: true, Preferred: true}
		secrets  = Resource{Version: "v1", Resource: "secrets", Kind: "Secret", Namespaced: true, Preferred: true}
		// A custom resource may be called secrets: it is not a core Secret.
		otherSecrets = Resource{Group: "vault.example.com", Version: "v1", Resource: "secrets", Kind: "Secret", Namespaced: true, Custom: true, Preferred: true}
	)
	tests := []struct {
		name string
		sel  Selector
		res  Resource
		want bool
	}{
		{"group and kind", Selector{Group: "example.com", Kind: "Widget"}, widgetV1, true},
		{"version \"\" is the preferred version", Selector{Group: "example.com", Kind: "Widget"}, widgetV2, false},
		{"version", Selector{Group: "example.com", Version: "v1", Kind: "Widget"}, widgetV2, false},
		{"another version named", Selector{Group: "example.com", Version: "v2", Kind: "Widget"}, widgetV2, true},
		{"version star", Selector{Group: "example.com", Version: "*", Kind: "Widget"}, widgetV2, true},
		{"resource", Selector{Group: "example.com", Resource: "widgets"}, widgetV1, true},
		{"resource and kind disagree", Selector{Group: "example.com", Resource: "widgets", Kind: "Gadget"}, widgetV1, false},
		{"other kind", Selector{Group: "example.com", Kind: "Widget"}, gadgets, false},
		{"kind star", Selector{Group: "example.com", Kind: "*"}, gadgets, true},
		{"kind and resource empty", Selector{Group: "example.com"}, gadgets, true},
		{"core group", Selector{Group: "", Kind: "ConfigMap"}, cm, true},
		{"core group, resource only", Selector{Resource: "configmaps"}, cm, true},
		{"core group is not any group", Selector{Group: "", Kind: "Widget"}, widgetV1, false},
		{"core group is not apps", Selector{}, deploy, false},
		{"empty selector: the core group", Selector{}, nodes, true},
		{"other group", Selector{Group: "apps", Kind: "ConfigMap"}, cm, false},
		{"group star", Selector{Group: "*", Kind: "Deployment"}, deploy, true},
		{"everything", Selector{Group: "*", Kind: "*"}, nodes, true},
		{"everything, preferred only", Selector{Group: "*"}, widgetV2, false},
		{"custom only: CRD", Selector{Group: "*", Custom: true}, widgetV1, true},
		{"custom only: built-in", Selector{Group: "*", Custom: true}, cm, false},
		{"custom only: aggregated", Selector{Group: "example.com", Kind: "Gadget", Custom: true}, gadgets, false},
		{"kind is case-sensitive", Selector{Kind: "configmap"}, cm, false},
		{"no globs", Selector{Group: "*.com", Kind: "*"}, widgetV1, false},
		{"no globs in kinds", Selector{Group: "apps", Kind: "Deploy*"}, deploy, false},
		{"a wildcard never covers Secrets", Selector{Group: "*", Kind: "*"}, secrets, false},
		{"nor does the core group's", Selector{Group: ""}, secrets, false},
		{"Secrets named by kind", Selector{Group: "", Kind: "Secret"}, secrets, true},
		{"Secrets named by resource, any group", Selector{Group: "*", Resource: "secrets"}, secrets, true},
		{"another group's secrets are not core Secrets", Selector{Group: "*", Kind: "*"}, otherSecrets, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.sel.Matches(tt.res); got != tt.want {
				t.Errorf("%+v matches %s = %v, want %v", tt.sel, tt.res, got, tt.want)
			}
		})
	}
	if !Selected([]Selector{{Group: "apps"}, {Kind: "ConfigMap"}}, cm) || Selected([]Selector{{Group: "apps"}}, cm) || Selected(nil, cm) {
		t.Error("Selected is not an OR of Matches")
	}
}

func TestResourceNames(t *testing.T) {
	tests := []struct {
		res             Resource
		str, apiVersion string
	}{
		{Resource{Version: "v1", Resource: "configmaps"}, "configmaps.v1", "v1"},
		{Resource{Group: "example.com", Version: "v1beta1", Resource: "widgets"}, "widgets.v1beta1.example.com", "example.com/v1beta1"},
	}
	for _, tt := range tests {
		if got := tt.res.String(); got != tt.str {
			t.Errorf("%+v.String() = %q, want %q", tt.res, got, tt.str)
		}
		if got := tt.res.APIVersion(); got != tt.apiVersion {
			t.Errorf("%+v.APIVersion() = %q, want %q", tt.res, got, tt.apiVersion)
		}
	}
}

func TestProjection(t *testing.T) {
	size, spec, status := []string{"spec", "size"}, []string{"spec"}, []string{"status", "phase"}
	p := Projection{Paths: [][]string{status, size, size}}
	if !p.Equal(Projection{Paths: [][]string{size, status}}) || p.Equal(Projection{Paths: [][]string{size}}) || p.Equal(Projection{Full: true}) {
		t.Error("Equal does not compare path sets")
	}
	if got := p.Union(Projection{Paths: [][]string{spec}}).Minimal(); !reflect.DeepEqual(got, Projection{Paths: [][]string{spec, status}}) {
		t.Errorf("Union.Minimal = %+v", got)
	}
	if got := p.Union(Projection{Full: true}); !got.Full {
		t.Errorf("Union with full = %+v", got)
	}
	if got := (Projection{}).Minimal(); got.Full || got.Paths != nil {
		t.Errorf("empty Minimal = %+v", got)
	}
	if got, want := p.Minimal().String(), "spec.size,status.phase"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	if got := (Projection{Full: true}).String(); got != "full" {
		t.Errorf("String = %q", got)
	}
}

// TestFieldsHash pins the digest: the restart baseline stores it, and an
// object stored by one version of fieldwatch is compared by the next.
func TestFieldsHash(t *testing.T) {
	size := map[string]any{"f:spec": map[string]any{"f:size": map[string]any{}}}
	color := map[string]any{"f:spec": map[string]any{"f:color": map[string]any{}}}
	if got, want := FieldsHash(size), "01dd22de4fada247"; got != want {
		t.Errorf("FieldsHash(size) = %s, want %s", got, want)
	}
	if FieldsHash(size) == FieldsHash(color) {
		t.Error("different field sets hash alike")
	}
	if got := FieldsHash(func() {}); got != "" {
		t.Errorf("FieldsHash of something that is not JSON = %q", got)
	}
}

func TestProjectionHashed(t *testing.T) {
	data, env := []string{"data", AnyKey}, []string{"spec", "env", AnyKey, "value"}
	p := Projection{Paths: [][]string{{"spec"}}, Hashed: [][]string{env, data, data}}
	if p.Equal(Projection{Paths: [][]string{{"spec"}}}) || !p.Equal(Projection{Paths: [][]string{{"spec"}}, Hashed: [][]string{data, env}}) {
		t.Error("Equal does not compare Hashed as a set")
	}
	got := p.Union(Projection{Full: true, Hashed: [][]string{{"spec", "env"}}}).Minimal()
	if !got.Full || got.Paths != nil || !reflect.DeepEqual(got.Hashed, [][]string{data, {"spec", "env"}}) {
		t.Errorf("Union then Minimal = %+v", got)
	}
	if s := p.Minimal().String(); s != "spec hashed data.*,spec.env.*.value" {
		t.Errorf("String = %q", s)
	}
	raw, _ := json.Marshal(Projection{Paths: [][]string{{"a"}}})
	if string(raw) != `{"Full":false,"Paths":[["a"]]}` {
		t.Errorf("a projection without Hashed encodes as %s, not as before", raw)
	}
}
