package rules

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/crd/diff"
)

const crdMatch = "    match: {resources: [{group: apiextensions.k8s.io, kind: CustomResourceDefinition}]}\n"

// crdWidgets returns the Widget CRD with spec.color's enum and whether
// spec.owner exists.
func crdWidgets(t testing.TB, rv string, enum string, owner bool) map[string]any {
	t.Helper()
	props := `"color":{"type":"string","enum":` + enum + `}`
	if owner {
		props += `,"owner":{"type":"string"}`
	}
	return obj(t, `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
		"metadata":{"name":"widgets.example.com","uid":"c1","resourceVersion":"`+rv+`"},
		"spec":{"group":"example.com","scope":"Namespaced","names":{"plural":"widgets","kind":"Widget"},
		  "versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object","properties":{
		    "spec":{"type":"object","properties":{`+props+`}}}}}}]},
		"status":{"storedVersions":["v1"]}}`)
}

func crdChange(t testing.TB, typ change.Type, old, new map[string]any) *Change {
	t.Helper()
	return &Change{Type: typ, Resource: crdResource, Old: old, New: new, Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

// payloadCRD returns the crd field of a payload, nil when absent.
func payloadCRD(t *testing.T, payload []byte) map[string]any {
	t.Helper()
	var p struct {
		CRD map[string]any `json:"crd"`
	}
	if err := json.Unmarshal(payload, &p); err != nil {
		t.Fatalf("payload %s: %v", payload, err)
	}
	return p.CRD
}

func TestCRDLoadErrors(t *testing.T) {
	cmMatch := "    match: {resources: [{group: '', resource: configmaps}]}\n"
	tests := []struct {
		name, src string
		want      string // a full error line or, without a position, a substring
	}{
		{"crd on a rule of ConfigMaps", rule(cmMatch + logAction + "    crd: {}\n"),
			"f.yaml:5:10: rules[0].crd: only rules that match CustomResourceDefinitions only have crd"},
		{"crd used by a rule of ConfigMaps", rule(cmMatch + logAction + "    when: crd.breaking > 0\n"),
			"f.yaml:5:11: rules[0].when: CEL: undeclared reference to 'crd' (crd is declared only in rules whose every match.resources entry selects CustomResourceDefinitions"},
		{"crd used by a rule of CRDs and ConfigMaps", rule("    match: {resources: [{group: apiextensions.k8s.io, kind: CustomResourceDefinition}, {group: '', resource: configmaps}]}\n" +
			logAction + "    when: \"crd.breaking > 0\"\n"), "f.yaml:5:12: rules[0].when: CEL: undeclared reference to 'crd'"},
		{"crd used by a rule of any group", rule("    match: {resources: [{group: '*', kind: CustomResourceDefinition}]}\n" + logAction + "    crd: {impact: true}\n"),
			"f.yaml:5:10: rules[0].crd: only rules that match"},
		{"crd used by a rule of v1beta1 CRDs", rule("    match: {resources: [{group: apiextensions.k8s.io, version: v1beta1, kind: CustomResourceDefinition}]}\n" + logAction + "    crd:\n"),
			"rules[0].crd: only rules that match"},
		{"impact not a bool", rule(crdMatch + logAction + "    crd: {impact: yes}\n"), `rules[0].crd.impact: must be true or false, not "yes"`},
		{"unknown crd key", rule(crdMatch + logAction + "    crd: {impacts: true}\n"), `f.yaml:5:11: rules[0].crd.impacts: unknown key "impacts"`},
		{"crd not a mapping", rule(crdMatch + logAction + "    crd: true\n"), "rules[0].crd: must be a mapping"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(tt.src))
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error:\n%v\nwant it to contain %q", err, tt.want)
			}
		})
	}
}

func TestCRDLoadValid(t *testing.T) {
	tests := []struct {
		name, body string
		mode       crdMode
	}{
		{"no crd", crdMatch + logAction, crdNone},
		{"crd alone", crdMatch + logAction + "    crd:\n", crdCompare},
		{"crd empty", crdMatch + logAction + "    crd: {}\n", crdCompare},
		{"impact", crdMatch + logAction + "    crd: {impact: true}\n", crdImpact},
		{"impact false", crdMatch + logAction + "    crd: {impact: false}\n", crdCompare},
		{"when reads crd", crdMatch + logAction + "    when: crd.breaking > 0\n", crdCompare},
		{"by resource name, every version", "    match: {resources: [{group: apiextensions.k8s.io, version: '*', resource: customresourcedefinitions}]}\n" + logAction + "    when: crd.safe > 0\n", crdCompare},
		{"a loop variable named crd", crdMatch + logAction + "    when: object.spec.versions.exists(crd, crd.served)\n", crdNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := Parse("f.yaml", []byte(rule(tt.body)))
			if err != nil {
				t.Fatal(err)
			}
			if got := set.Rule("r").crd; got != tt.mode {
				t.Errorf("crd mode %d, want %d", got, tt.mode)
			}
		})
	}
	// A loop variable named crd is no reference to crd elsewhere either.
	if _, err := Parse("f.yaml", []byte(rule(match+logAction+"    when: object.spec.items.exists(crd, crd > 1)\n"))); err != nil {
		t.Errorf("a loop variable named crd in a rule of Widgets: %v", err)
	}
}

// TestCRDEval checks what rules on CRDs see of each change type, in the
// payload and in CEL, and that rules without crd keep their payload.
func TestCRDEval(t *testing.T) {
	src := "rules:\n" +
		"  - name: breaking\n" + crdMatch + logAction + "    when: crd.breaking > 0\n" +
		"  - name: enum\n" + crdMatch + logAction + "    when: crd.checks.exists(c, c.check == 'enum-values-removed')\n" +
		"  - name: compared\n" + crdMatch + logAction + "    crd: {}\n" +
		"  - name: impact\n" + crdMatch + logAction + "    crd: {impact: true}\n" +
		"  - name: plain\n" + crdMatch + logAction
	set, err := Parse("f.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	wide, narrow := crdWidgets(t, "1", `["red","green"]`, true), crdWidgets(t, "2", `["red"]`, true)
	wider := crdWidgets(t, "3", `["red","green","blue"]`, true)
	tests := []struct {
		name   string
		c      *Change
		fire   []string
		checks map[string][]string // rule -> check names in its payload's crd; absent: no crd
		impact map[string]string   // rule -> its crd's impactError
	}{
		{"breaking update", crdChange(t, change.Updated, wide, narrow), []string{"breaking", "enum", "compared", "impact", "plain"},
			map[string][]string{"breaking": {"enum-values-removed"}, "enum": {"enum-values-removed"}, "compared": {"enum-values-removed"}, "impact": {"enum-values-removed"}},
			map[string]string{"impact": errNoImpact.Error()}},
		{"safe update", crdChange(t, change.Updated, wide, wider), []string{"compared", "impact", "plain"},
			map[string][]string{"compared": {"enum-values-added"}, "impact": {"enum-values-added"}}, map[string]string{"impact": errNoImpact.Error()}},
		{"created", crdChange(t, change.Created, nil, wide), []string{"compared", "impact", "plain"},
			map[string][]string{"compared": {"crd-added"}, "impact": {"crd-added"}}, nil},
		{"deleted", crdChange(t, change.Deleted, wide, nil), []string{"breaking", "compared", "impact", "plain"},
			map[string][]string{"breaking": {"crd-removed"}, "compared": {"crd-removed"}, "impact": {"crd-removed"}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			firings, errs := set.Eval(tt.c)
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			var fired []string
			for _, f := range firings {
				fired = append(fired, f.Rule.Name)
				crd := payloadCRD(t, f.Payload)
				want, has := tt.checks[f.Rule.Name]
				if !has {
					if crd != nil || strings.Contains(string(f.Payload), `"crd"`) {
						t.Errorf("%s: payload has crd: %s", f.Rule.Name, f.Payload)
					}
					continue
				}
				var got []string
				for _, c := range crd["checks"].([]any) {
					got = append(got, c.(map[string]any)["check"].(string))
				}
				if !slices.Equal(got, want) || crd["crd"] != "widgets.example.com" {
					t.Errorf("%s: crd %v, want checks %v", f.Rule.Name, crd, want)
				}
				if e, _ := crd["impactError"].(string); e != tt.impact[f.Rule.Name] {
					t.Errorf("%s: impactError %q, want %q", f.Rule.Name, e, tt.impact[f.Rule.Name])
				}
				if i := strings.Index(string(f.Payload), `,"crd":{"crd":"widgets.example.com","checks":[`); i < 0 || strings.Contains(string(f.Payload[i:]), `,"object"`) {
					t.Errorf("%s: crd is not the payload's last key (includeObject is off): %s", f.Rule.Name, f.Payload)
				}
			}
			if !slices.Equal(fired, tt.fire) {
				t.Errorf("fired %v, want %v", fired, tt.fire)
			}
		})
	}
}

// TestCRDImpactGiven checks that the comparison the caller computed (with
// its impact) is what rules with impact get, and that the others get it
// without the impact.
func TestCRDImpactGiven(t *testing.T) {
	src := "rules:\n" +
		"  - name: impact\n" + crdMatch + logAction + "    crd: {impact: true}\n    when: crd.impact.exists(i, i.count == 2)\n" +
		"  - name: compared\n" + crdMatch + logAction + "    when: size(crd.impact) == 0 && crd.scanned == 0\n"
	set, err := Parse("f.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	c := crdChange(t, change.Updated, crdWidgets(t, "1", `["red","green"]`, true), crdWidgets(t, "2", `["red"]`, true))
	if !set.WantsCRDImpact(c) {
		t.Fatal("WantsCRDImpact = false")
	}
	res := &diff.Result{CRD: "widgets.example.com", Checks: []diff.Check{{Version: "v1", Check: "enum-values-removed", Severity: diff.Breaking}},
		Breaking: 1, Scanned: 5, Impact: []diff.Impact{{Check: "enum-values-removed", Effect: diff.Rejected, Count: 2,
			Objects: []diff.Hit{{Namespace: "a", Name: "x"}, {Namespace: "b", Name: "y"}}, Message: "rejected <when> re-created"}},
		ImpactError: "stopped after 5 objects"}
	c.CRD = res
	firings, errs := set.Eval(c)
	if len(errs) > 0 || len(firings) != 2 {
		t.Fatalf("Eval = %v, %v", firings, errs)
	}
	if !strings.Contains(string(firings[0].Payload), `"scanned":5,"impact":[{"check":"enum-values-removed","effect":"rejected","count":2,`+
		`"objects":[{"namespace":"a","name":"x","error":""},{"namespace":"b","name":"y","error":""}],"message":"rejected <when> re-created"}],"impactError":"stopped after 5 objects"}}`) {
		t.Errorf("impact payload: %s", firings[0].Payload)
	}
	if !strings.HasSuffix(string(firings[1].Payload), `"breaking":1,"unknown":0,"safe":0,"scanned":0,"impact":[]}}`) {
		t.Errorf("payload without impact: %s", firings[1].Payload)
	}
	if res.Scanned != 5 || len(res.Impact) != 1 {
		t.Errorf("Eval changed the caller's result: %+v", res)
	}
}

// TestCRDComparedOnce checks that rules reading crd share one comparison
// and one view per kind.
func TestCRDComparedOnce(t *testing.T) {
	src := "rules:\n"
	for _, name := range []string{"a", "b", "c"} {
		src += "  - name: " + name + "\n" + crdMatch + logAction + "    when: crd.breaking > 0\n"
	}
	set, err := Parse("f.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	c := crdChange(t, change.Updated, crdWidgets(t, "1", `["red","green"]`, true), crdWidgets(t, "2", `["red"]`, true))
	st := evalState{c: c}
	var views []*crdView
	for _, r := range set.Rules() {
		if _, fired, err := r.eval(&st); err != nil || !fired {
			t.Fatalf("rule %s: fired %v, %v", r.Name, fired, err)
		}
		views = append(views, st.crd.views[crdViewKey{}])
	}
	if impact := st.crd.views[crdViewKey{impact: true}]; views[0] == nil || views[0] != views[1] || views[1] != views[2] || impact != nil {
		t.Errorf("views %p, impact view %p: want one shared view", views, impact)
	}
}

func TestCRDEvalErrors(t *testing.T) {
	set, err := Parse("f.yaml", []byte(rule(crdMatch+logAction+"    crd: {}\n")))
	if err != nil {
		t.Fatal(err)
	}
	bad := obj(t, `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"x"},"spec":{"versions":"v1"}}`)
	good := crdWidgets(t, "1", `["red"]`, false)
	firings, errs := set.Eval(crdChange(t, change.Updated, bad, good))
	if len(firings) != 0 || len(errs) != 1 || !strings.Contains(errs[0].Error(), "rule r: crd: old object: decode CustomResourceDefinition") {
		t.Errorf("Eval = %v, %v", firings, errs)
	}
}

// TestCRDProjectionAndSelectors checks what rules with crd ask of the
// watcher: the CRD's spec and storedVersions, and for the impact the
// custom resources, whole, in every namespace.
func TestCRDProjectionAndSelectors(t *testing.T) {
	widgets := change.Resource{Group: "example.com", Version: "v1", Resource: "widgets", Kind: "Widget", Namespaced: true, Custom: true, Preferred: true}
	gadgets := change.Resource{Group: "other.io", Version: "v1", Resource: "gadgets", Kind: "Gadget", Namespaced: true, Custom: true, Preferred: true}
	builtin := change.Resource{Group: "apps", Version: "v1", Resource: "deployments", Kind: "Deployment", Namespaced: true, Preferred: true}
	widgetRule := "  - name: w\n    match: {resources: [{group: example.com, kind: Widget}], namespaces: [shop]}\n    fields: [spec.size]\n" + logAction
	tests := []struct {
		name      string
		src       string
		crdProj   string
		selectors []change.Selector
		proj      map[change.Resource]string // resource -> projection
		ns        []string                   // namespaces of widgets
	}{
		{"fields only", "rules:\n  - name: r\n" + crdMatch + "    fields: [spec.versions]\n" + logAction + widgetRule,
			"spec.versions", nil, map[change.Resource]string{widgets: "spec.size", gadgets: ""}, []string{"shop"}},
		{"fields and crd", "rules:\n  - name: r\n" + crdMatch + "    fields: [spec.versions]\n    crd: {}\n" + logAction + widgetRule,
			"spec,status.storedVersions", nil, map[change.Resource]string{widgets: "spec.size"}, []string{"shop"}},
		{"when reads crd", "rules:\n  - name: r\n" + crdMatch + "    fields: [metadata.labels]\n    when: crd.breaking > 0\n" + logAction,
			"metadata.labels,spec,status.storedVersions", nil, nil, nil},
		{"impact, every CRD", "rules:\n  - name: r\n" + crdMatch + "    fields: [spec]\n    crd: {impact: true}\n" + logAction + widgetRule,
			"spec,status.storedVersions", []change.Selector{{Group: "*", Resource: "*", Custom: true}},
			map[change.Resource]string{widgets: "full", gadgets: "full", builtin: ""}, nil},
		{"impact, CRDs named", "rules:\n  - name: r\n    match: {resources: [{group: apiextensions.k8s.io, kind: CustomResourceDefinition}], names: [widgets.example.com]}\n" +
			"    fields: [spec]\n    crd: {impact: true}\n" + logAction + widgetRule,
			"spec,status.storedVersions", []change.Selector{{Group: "example.com", Resource: "widgets", Custom: true}},
			map[change.Resource]string{widgets: "full", gadgets: ""}, nil},
		{"impact, CRDs by glob", "rules:\n  - name: r\n    match: {resources: [{group: apiextensions.k8s.io, kind: CustomResourceDefinition}], names: ['*.other.io']}\n" +
			"    crd: {impact: true}\n" + logAction + widgetRule,
			"full", []change.Selector{{Group: "*", Resource: "*", Custom: true}},
			map[change.Resource]string{widgets: "spec.size", gadgets: "full"}, []string{"shop"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := Parse("f.yaml", []byte(tt.src))
			if err != nil {
				t.Fatal(err)
			}
			if got := set.Projection(crdResource).String(); got != tt.crdProj {
				t.Errorf("CRD projection %q, want %q", got, tt.crdProj)
			}
			var extra []change.Selector
			for _, s := range set.Selectors() {
				if !slices.ContainsFunc(set.Rules(), func(r *Rule) bool { return slices.Contains(r.Selectors, s) }) {
					extra = append(extra, s)
				}
			}
			if !reflect.DeepEqual(extra, tt.selectors) {
				t.Errorf("selectors for the impact %+v, want %+v", extra, tt.selectors)
			}
			for res, want := range tt.proj {
				if got := set.Projection(res).String(); got != want {
					t.Errorf("projection of %s %q, want %q", res, got, want)
				}
			}
			if got := set.Namespaces(widgets); !slices.Equal(got, tt.ns) {
				t.Errorf("namespaces of widgets %v, want %v", got, tt.ns)
			}
		})
	}
}

func TestWantsCRDImpact(t *testing.T) {
	src := "rules:\n" +
		"  - name: named\n    match: {resources: [{group: apiextensions.k8s.io, kind: CustomResourceDefinition}], names: [widgets.example.com]}\n" +
		"    crd: {impact: true}\n    fields: [spec.versions]\n" + logAction +
		"  - name: no-impact\n" + crdMatch + "    crd: {}\n" + logAction
	set, err := Parse("f.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	wide, narrow := crdWidgets(t, "1", `["red","green"]`, true), crdWidgets(t, "2", `["red"]`, true)
	labelled := crdWidgets(t, "2", `["red","green"]`, true)
	labelled["metadata"].(map[string]any)["labels"] = map[string]any{"a": "b"}
	other := crdWidgets(t, "2", `["red"]`, true)
	other["metadata"].(map[string]any)["name"] = "gadgets.example.com"
	otherOld := crdWidgets(t, "1", `["red","green"]`, true)
	otherOld["metadata"].(map[string]any)["name"] = "gadgets.example.com"
	tests := []struct {
		name string
		c    *Change
		want bool
	}{
		{"update of a CRD named", crdChange(t, change.Updated, wide, narrow), true},
		{"created", crdChange(t, change.Created, nil, narrow), false},
		{"deleted", crdChange(t, change.Deleted, wide, nil), false},
		{"another CRD", crdChange(t, change.Updated, otherOld, other), false},
		{"the field triggers do not fire", crdChange(t, change.Updated, wide, labelled), false},
		{"not a CRD", &Change{Type: change.Updated, Resource: widgetsV1, New: narrow, Old: wide}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := set.WantsCRDImpact(tt.c); got != tt.want {
				t.Errorf("WantsCRDImpact = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestCRDPayloadKeys checks where crd goes among the payload's keys.
func TestCRDPayloadKeys(t *testing.T) {
	set, err := Parse("f.yaml", []byte(rule(crdMatch+logAction+"    crd: {}\n    includeObject: true\n")))
	if err != nil {
		t.Fatal(err)
	}
	old, new := crdWidgets(t, "1", `["red","green"]`, true), crdWidgets(t, "2", `["red"]`, true)
	new["metadata"].(map[string]any)["managedFields"] = []any{map[string]any{"manager": "kubectl", "operation": "Apply", "time": "2026-01-01T00:00:00Z"}}
	firings, errs := set.Eval(crdChange(t, change.Updated, old, new))
	if len(firings) != 1 || len(errs) > 0 {
		t.Fatalf("Eval = %v, %v", firings, errs)
	}
	want := []string{"id", "time", "rule", "type", "resource", "namespace", "name", "uid", "resourceVersion", "changes", "actor", "crd", "object", "oldObject"}
	if got := topKeys(t, firings[0].Payload); !slices.Equal(got, want) {
		t.Errorf("payload keys %v, want %v", got, want)
	}
}

// TestCRDPolicy runs one CRD update through rules whose crd blocks carry
// policies: fieldwatch's checks map and crdify's configuration, beside
// the default; and refuses a policy with an unknown check where it is.
func TestCRDPolicy(t *testing.T) {
	src := "rules:\n" +
		"  - name: default\n" + crdMatch + logAction + "    crd: {}\n" +
		"  - name: relaxed\n" + crdMatch + logAction + "    crd: {policy: {checks: {enum-values-removed: safe}}}\n" +
		"  - name: ignored\n" + crdMatch + logAction + "    crd: {policy: {checks: {enum-values-removed: ignore}}}\n" +
		"  - name: crdify\n" + crdMatch + logAction + "    crd: {policy: {validations: [{name: enum, enforcement: Warn}]}}\n"
	set, err := Parse("f.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	c := crdChange(t, change.Updated, crdWidgets(t, "1", `["red","green"]`, false), crdWidgets(t, "2", `["red"]`, false))
	firings, errs := set.Eval(c)
	if len(errs) > 0 || len(firings) != 4 {
		t.Fatalf("Eval = %v, %v", firings, errs)
	}
	want := map[string]string{
		"default": `"checks":[{"version":"v1","path":"/properties/spec/properties/color/enum","field":"spec.color","check":"enum-values-removed","old":["green"],"severity":"breaking"`,
		"relaxed": `"severity":"safe"`,
		"ignored": `"checks":[],"breaking":0,"unknown":0,"safe":0`,
		"crdify":  `"check":"enum-values-removed","old":["green"],"severity":"safe"`,
	}
	for _, f := range firings {
		if !strings.Contains(string(f.Payload), want[f.Rule.Name]) {
			t.Errorf("rule %s payload %s does not have %s", f.Rule.Name, f.Payload, want[f.Rule.Name])
		}
	}

	_, err = Parse("f.yaml", []byte(rule(crdMatch+logAction+"    crd:\n      policy:\n        checks: {enum-value-removed: safe}\n")))
	if err == nil || !strings.Contains(err.Error(), "f.yaml:7:38: rules[0].crd.policy.checks.enum-value-removed: unknown check") {
		t.Errorf("unknown check: %v", err)
	}
}
