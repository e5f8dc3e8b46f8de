package rules

import (
	"fmt"
	"runtime"
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/fieldwatch/fieldwatch/change"
)

var (
	widgetsV1      = change.Resource{Group: "example.com", Version: "v1", Resource: "widgets", Kind: "Widget", Namespaced: true, Custom: true, Preferred: true}
	widgetsV2      = change.Resource{Group: "example.com", Version: "v2", Resource: "widgets", Kind: "Widget", Namespaced: true, Custom: true, Preferred: true}
	widgetsV2other = change.Resource{Group: "example.com", Version: "v2", Resource: "widgets", Kind: "Widget", Namespaced: true, Custom: true}
	gadgets        = change.Resource{Group: "example.com", Version: "v1", Resource: "gadgets", Kind: "Gadget", Namespaced: true, Preferred: true}
	pods           = change.Resource{Group: "", Version: "v1", Resource: "pods", Kind: "Pod", Namespaced: true, Preferred: true}
	nodes          = change.Resource{Group: "", Version: "v1", Resource: "nodes", Kind: "Node", Preferred: true}
)

// TestRuleMatches checks that a rule watches what any of its selectors
// selects, as its match.resources read.
func TestRuleMatches(t *testing.T) {
	tests := []struct {
		name string
		sel  change.Selector
		res  change.Resource
		want bool
	}{
		{"group and kind", change.Selector{Group: "example.com", Kind: "Widget"}, widgetsV1, true},
		{"any version by default", change.Selector{Group: "example.com", Kind: "Widget"}, widgetsV2, true},
		{"version", change.Selector{Group: "example.com", Version: "v1", Kind: "Widget"}, widgetsV2, false},
		{"version star", change.Selector{Group: "example.com", Version: "*", Kind: "Widget"}, widgetsV2, true},
		{"preferred version", change.Selector{Group: "example.com", Kind: "Widget"}, widgetsV1, true},
		{"not the preferred version", change.Selector{Group: "example.com", Kind: "Widget"}, widgetsV2other, false},
		{"star and another version", change.Selector{Group: "example.com", Version: "*", Kind: "Widget"}, widgetsV2other, true},
		{"resource", change.Selector{Group: "example.com", Resource: "widgets"}, widgetsV1, true},
		{"resource and kind", change.Selector{Group: "example.com", Resource: "widgets", Kind: "Gadget"}, widgetsV1, false},
		{"other kind", change.Selector{Group: "example.com", Kind: "Widget"}, gadgets, false},
		{"kind star", change.Selector{Group: "example.com", Kind: "*"}, gadgets, true},
		{"core group", change.Selector{Group: "", Kind: "Pod"}, pods, true},
		{"core group is not any group", change.Selector{Group: "", Kind: "Widget"}, widgetsV1, false},
		{"other group", change.Selector{Group: "apps", Kind: "Pod"}, pods, false},
		{"group star", change.Selector{Group: "*", Kind: "Pod"}, pods, true},
		{"everything", change.Selector{Group: "*", Kind: "*"}, nodes, true},
		{"custom only: CRD", change.Selector{Group: "*", Kind: "*", Custom: true}, widgetsV1, true},
		{"custom only: built-in", change.Selector{Group: "*", Kind: "*", Custom: true}, pods, false},
		{"custom only: aggregated", change.Selector{Group: "example.com", Kind: "Gadget", Custom: true}, gadgets, false},
		{"kind is case-sensitive", change.Selector{Group: "", Kind: "pod"}, pods, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.sel.Matches(tt.res); got != tt.want {
				t.Errorf("%+v.Matches(%+v) = %v, want %v", tt.sel, tt.res, got, tt.want)
			}
			r := &Rule{Selectors: []change.Selector{{Group: "none", Kind: "None"}, tt.sel}}
			if got := r.Matches(tt.res); got != tt.want {
				t.Errorf("Rule.Matches = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestObjectFilter(t *testing.T) {
	widget := func(ns, name string, lbls map[string]any) map[string]any {
		meta := map[string]any{"name": name}
		if ns != "" {
			meta["namespace"] = ns
		}
		if lbls != nil {
			meta["labels"] = lbls
		}
		return map[string]any{"metadata": meta}
	}
	shop := map[string]any{"app": "shop", "tier": "web"}
	sel := func(s string) labels.Selector {
		l, err := labels.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	tests := []struct {
		name   string
		filter objectFilter
		change Change
		want   bool
	}{
		{"no filter", objectFilter{}, Change{Type: change.Created, New: widget("a", "w", nil)}, true},
		{"namespace in", objectFilter{namespaces: []string{"a", "b"}}, Change{Type: change.Created, New: widget("b", "w", nil)}, true},
		{"namespace out", objectFilter{namespaces: []string{"a"}}, Change{Type: change.Created, New: widget("b", "w", nil)}, false},
		{"cluster-scoped with namespaces", objectFilter{namespaces: []string{"a"}}, Change{Type: change.Created, New: widget("", "n", nil)}, false},
		{"excluded", objectFilter{excludeNamespaces: []string{"kube-system"}}, Change{Type: change.Created, New: widget("kube-system", "w", nil)}, false},
		{"not excluded", objectFilter{excludeNamespaces: []string{"kube-system"}}, Change{Type: change.Created, New: widget("a", "w", nil)}, true},
		{"cluster-scoped not excluded", objectFilter{excludeNamespaces: []string{"kube-system"}}, Change{Type: change.Created, New: widget("", "n", nil)}, true},
		{"name glob", objectFilter{names: []string{"web-*"}}, Change{Type: change.Created, New: widget("a", "web-1", nil)}, true},
		{"name glob miss", objectFilter{names: []string{"web-*"}}, Change{Type: change.Created, New: widget("a", "api-1", nil)}, false},
		{"second name glob", objectFilter{names: []string{"web-*", "api-?"}}, Change{Type: change.Created, New: widget("a", "api-1", nil)}, true},
		{"exact name", objectFilter{names: []string{"w"}}, Change{Type: change.Created, New: widget("a", "w", nil)}, true},
		{"labels", objectFilter{labels: sel("app=shop")}, Change{Type: change.Created, New: widget("a", "w", shop)}, true},
		{"labels set-based", objectFilter{labels: sel("tier in (web,api),!legacy")}, Change{Type: change.Created, New: widget("a", "w", shop)}, true},
		{"labels miss", objectFilter{labels: sel("app=other")}, Change{Type: change.Created, New: widget("a", "w", shop)}, false},
		{"no labels", objectFilter{labels: sel("app=shop")}, Change{Type: change.Created, New: widget("a", "w", nil)}, false},
		{"label exists", objectFilter{labels: sel("app")}, Change{Type: change.Created, New: widget("a", "w", shop)}, true},
		{"label must not exist", objectFilter{labels: sel("!app")}, Change{Type: change.Created, New: widget("a", "w", nil)}, true},
		{"update: label removed", objectFilter{labels: sel("app=shop")}, Change{Type: change.Updated, Old: widget("a", "w", shop), New: widget("a", "w", nil)}, true},
		{"update: label added", objectFilter{labels: sel("app=shop")}, Change{Type: change.Updated, Old: widget("a", "w", nil), New: widget("a", "w", shop)}, true},
		{"update: neither", objectFilter{labels: sel("app=shop")}, Change{Type: change.Updated, Old: widget("a", "w", nil), New: widget("a", "w", nil)}, false},
		{"delete: final state", objectFilter{labels: sel("app=shop")}, Change{Type: change.Deleted, Old: widget("a", "w", shop)}, true},
		{"delete: negation sees the final state", objectFilter{labels: sel("!app")}, Change{Type: change.Deleted, Old: widget("a", "w", shop)}, false},
		{"create: negation", objectFilter{labels: sel("!app")}, Change{Type: change.Created, New: widget("a", "w", shop)}, false},
		{"non-string label value", objectFilter{labels: sel("n=1")}, Change{Type: change.Created, New: widget("a", "w", map[string]any{"n": int64(1)})}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			meta := tt.change.meta()
			if got := tt.filter.matches(&tt.change, metaString(meta, "namespace"), metaString(meta, "name")); got != tt.want {
				t.Errorf("matches = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSelectorsAndRulesFor(t *testing.T) {
	set, err := Parse("f.yaml", []byte(`rules:
  - name: a
    match: {resources: [{group: example.com, kind: Widget}, {group: "", resource: pods}]}
    actions: [{log: {}}]
  - name: b
    match: {resources: [{group: example.com, kind: Widget}], custom: true}
    actions: [{log: {}}]
  - name: c
    match: {resources: [{group: "", resource: pods}]}
    actions: [{log: {}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []change.Selector{
		{Group: "example.com", Kind: "Widget"},
		{Group: "", Resource: "pods"},
		{Group: "example.com", Kind: "Widget", Custom: true},
	}
	if got := set.Selectors(); len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("Selectors = %+v, want %+v", got, want)
	}
	names := func(rs []*Rule) (out []string) {
		for _, r := range rs {
			out = append(out, r.Name)
		}
		return out
	}
	for _, tt := range []struct {
		res  change.Resource
		want string
	}{{widgetsV1, "[a b]"}, {pods, "[a c]"}, {nodes, "[]"}, {gadgets, "[]"}} {
		for range 2 { // the second time from the cache
			if got := names(set.RulesFor(tt.res)); fmtList(got) != tt.want {
				t.Errorf("RulesFor(%s) = %v, want %s", tt.res.Resource, got, tt.want)
			}
		}
	}
}

func fmtList(l []string) string {
	out := "["
	for i, s := range l {
		if i > 0 {
			out += " "
		}
		out += s
	}
	return out + "]"
}

// TestRulesForLinear: what RulesFor allocates grows linearly with the
// resources it has seen, as discovery adds them one by one at start
// (3,000 CRDs): a cache that copied itself for each new resource
// allocated nine times as much for three times the resources.
func TestRulesForLinear(t *testing.T) {
	set, err := Parse("f.yaml", []byte(`rules:
  - name: all
    match: {resources: [{group: "*", kind: "*"}], custom: true}
    actions: [{log: {}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	allocated := func(from, to int) uint64 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for i := from; i < to; i++ {
			res := change.Resource{Group: fmt.Sprintf("g%d.example.com", i), Version: "v1", Resource: "things", Kind: "Thing", Namespaced: true, Custom: true, Preferred: true}
			if got := set.RulesFor(res); len(got) != 1 {
				t.Fatalf("RulesFor(%s): %d rules, want 1", res.Group, len(got))
			}
		}
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	first := allocated(0, 1000)
	next := allocated(1000, 4000) // three times as many, on top of them
	t.Logf("1,000 resources: %d bytes; the next 3,000: %d bytes (%.1fx)", first, next, float64(next)/float64(first))
	if next > 4*first {
		t.Errorf("the next 3,000 resources allocated %.1fx what the first 1,000 did, want about 3x (linear)", float64(next)/float64(first))
	}
}
