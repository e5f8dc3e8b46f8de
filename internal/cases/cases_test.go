package cases

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
	"github.com/fieldwatch/fieldwatch/rules"
)

// caseTime is the time of the cases that give none.
var caseTime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const casesRules = `rules:
  - name: resized
    match: {resources: [{group: example.com, kind: Widget}]}
    fields: [spec.size]
    actions: [{log: {}}]
  - name: recolored
    match: {resources: [{group: example.com, kind: Widget}]}
    fields: [spec.color]
    when: object.spec.color != 'black'
    actions: [{log: {}}]
`

const caseChange = `
    type: updated
    resource: {resource: widgets}
    oldObject: {apiVersion: example.com/v1, kind: Widget, metadata: {name: w, namespace: d, uid: u, resourceVersion: "1"}, spec: {size: 1, color: red}}
    object: {apiVersion: example.com/v1, kind: Widget, metadata: {name: w, namespace: d, uid: u, resourceVersion: "2"}, spec: {size: 2, color: red}}
`

func TestRun(t *testing.T) {
	set, err := rules.Parse("rules.yaml", []byte(casesRules))
	if err != nil {
		t.Fatal(err)
	}
	src := `cases:
  - name: pass
` + caseChange + `    expect:
      fire: [resized]
      changes:
        resized: [{op: replace, path: /spec/size, value: 2, oldValue: 1}]
  - name: wrong rules
` + caseChange + `    expect: {fire: [recolored]}
  - name: wrong changes
` + caseChange + `    expect:
      fire: [resized]
      changes:
        resized:
          - {op: replace, path: /spec/size, value: 3, oldValue: 1}
  - name: unknown rule
` + caseChange + `    expect: {fire: [resized, nope]}
  - name: expected error
    type: updated
    resource: {resource: widgets}
    oldObject: {apiVersion: example.com/v1, kind: Widget, metadata: {name: w}, spec: {color: red}}
    object: {apiVersion: example.com/v1, kind: Widget, metadata: {name: w}, spec: {}}
    expect: {fire: [], errors: ["no such key: color"]}
  - name: unexpected error
    type: updated
    resource: {resource: widgets}
    oldObject: {apiVersion: example.com/v1, kind: Widget, metadata: {name: w}, spec: {color: red}}
    object: {apiVersion: example.com/v1, kind: Widget, metadata: {name: w}, spec: {}}
    expect: {fire: []}
  - name: missing error
` + caseChange + `    expect: {fire: [resized], errors: [boom]}
`
	cases, err := Parse("cases.yaml", []byte(src), caseTime)
	if err != nil {
		t.Fatal(err)
	}
	if cases[0].Source != "cases.yaml:2:5" || cases[0].Change.Resource != (change.Resource{Group: "example.com", Version: "v1", Resource: "widgets", Kind: "Widget", Namespaced: true, Preferred: true}) {
		t.Errorf("case 0 = %+v", cases[0])
	}
	want := []struct {
		pass bool
		diff string
	}{
		{true, ""},
		{false, "fired [resized], expected [recolored]; did not fire: [recolored]; fired unexpectedly: [resized]"},
		{false, "rule resized: changes differ (- expected, + got):\n" +
			`- {"oldValue":1,"op":"replace","path":"/spec/size","value":3}` + "\n" +
			`+ {"oldValue":1,"op":"replace","path":"/spec/size","value":2}`},
		{false, "expect.fire: no rule named \"nope\"\nfired [resized], expected [resized nope]; did not fire: [nope]"},
		{true, ""},
		{false, "evaluation error: rule recolored: when: no such key: color"},
		{false, `no evaluation error contains "boom"`},
	}
	results := Run(set, cases)
	for i, r := range results {
		if r.Name != cases[i].Name || r.Pass != want[i].pass || r.Diff != want[i].diff {
			t.Errorf("case %q: pass %v, diff:\n%s\nwant pass %v, diff:\n%s", r.Name, r.Pass, r.Diff, want[i].pass, want[i].diff)
		}
	}
	if len(results[0].Firings) != 1 || !json.Valid(results[0].Firings[0]) {
		t.Errorf("firings = %s", results[0].Firings)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, src string
		want      []string
	}{
		{"no cases", "cases: []\n", []string{"c.yaml:1:8: cases: at least one case is required"}},
		{"unknown key", "cases:\n  - name: a\n    typ: created\n", []string{`c.yaml:3:5: cases[0].typ: unknown key "typ"`}},
		{"bad type", "cases:\n  - name: a\n    type: create\n    resource: {resource: x}\n    object: {apiVersion: v1, kind: X}\n    expect: {fire: []}\n",
			[]string{`c.yaml:3:11: cases[0].type: "create" is not a change type: use created, updated or deleted`}},
		{"missing object", "cases:\n  - name: a\n    type: updated\n    resource: {resource: x}\n    object: {apiVersion: v1, kind: X}\n    expect: {fire: []}\n",
			[]string{"cases[0].oldObject: required for this change type"}},
		{"extra object", "cases:\n  - name: a\n    type: created\n    resource: {resource: x}\n    object: {apiVersion: v1, kind: X}\n    oldObject: {}\n    expect: {fire: []}\n",
			[]string{"c.yaml:6:16: cases[0].oldObject: must be absent for this change type"}},
		{"object not a map", "cases:\n  - name: a\n    type: created\n    resource: {resource: x}\n    object: [1]\n    expect: {fire: []}\n",
			[]string{"c.yaml:5:13: cases[0].object: must be a mapping"}},
		{"no resource name", "cases:\n  - name: a\n    type: created\n    resource: {}\n    object: {apiVersion: v1, kind: X}\n    expect: {fire: []}\n",
			[]string{"cases[0].resource.resource: required"}},
		{"no kind", "cases:\n  - name: a\n    type: created\n    resource: {resource: x}\n    object: {}\n    expect: {fire: []}\n",
			[]string{"cases[0].resource: version and kind are required"}},
		{"no expect", "cases:\n  - name: a\n    type: created\n    resource: {resource: x}\n    object: {apiVersion: v1, kind: X}\n",
			[]string{"cases[0].expect: required"}},
		{"no fire", "cases:\n  - name: a\n    type: created\n    resource: {resource: x}\n    object: {apiVersion: v1, kind: X}\n    expect: {errors: []}\n",
			[]string{"cases[0].expect.fire: required"}},
		{"changes of a rule not fired", "cases:\n  - name: a\n    type: created\n    resource: {resource: x}\n    object: {apiVersion: v1, kind: X}\n    expect: {fire: [], changes: {r: []}}\n",
			[]string{`cases[0].expect.changes.r: changes of rule "r", which is not in expect.fire`}},
		{"bad time", "cases:\n  - name: a\n    type: created\n    time: yesterday\n    resource: {resource: x}\n    object: {apiVersion: v1, kind: X}\n    expect: {fire: []}\n",
			[]string{"cases[0].time: not an RFC 3339 time"}},
		{"objects for a Widget", "cases:\n  - name: a\n    type: created\n    resource: {resource: x}\n    object: {apiVersion: v1, kind: X}\n    objects: []\n    expect: {fire: []}\n",
			[]string{"c.yaml:6:14: cases[0].objects: objects are the custom resources for the impact of a CRD change: only for type updated of customresourcedefinitions"}},
		{"objects not a list", "cases:\n  - name: a\n" + crdCase + "    objects: {a: b}\n    expect: {fire: []}\n",
			[]string{"cases[0].objects: must be a list of objects"}},
		{"object not a mapping", "cases:\n  - name: a\n" + crdCase + "    objects: [{}, x]\n    expect: {fire: []}\n",
			[]string{"cases[0].objects[1]: must be a mapping (a custom resource)"}},
		{"crd of a rule not fired", "cases:\n  - name: a\n" + crdCase + "    expect: {fire: [], crd: {r: {breaking: 1}}}\n",
			[]string{`cases[0].expect.crd.r: crd of rule "r", which is not in expect.fire`}},
		{"crd not a mapping", "cases:\n  - name: a\n" + crdCase + "    expect: {fire: [r], crd: {r: [1]}}\n",
			[]string{"cases[0].expect.crd.r: must be a mapping"}},
		{"actor: bad match", actorCase("{user: {username: a}, match: maybe}"), []string{`cases[0].actor.match: "maybe" is not a match`}},
		{"bad observed", "cases:\n  - name: a\n    type: created\n    observed: list\n    resource: {resource: x}\n    object: {apiVersion: v1, kind: X}\n    expect: {fire: []}\n",
			[]string{`c.yaml:4:15: cases[0].observed: "list" is not a way a change is observed: use watch, relist, restart or takeover`}},
		{"actor: window without user", actorCase("{match: window}"), []string{"cases[0].actor.user: required when match is window"}},
		{"actor: ambiguous with a user", actorCase("{user: {username: a}, match: ambiguous, candidates: [a, b]}"), []string{"cases[0].actor.user: an ambiguous match names no user"}},
		{"actor: ambiguous alone", actorCase("{match: ambiguous, candidates: [a]}"), []string{"cases[0].actor.candidates: an ambiguous match has at least two candidates"}},
		{"actor: user without name", actorCase("{user: {groups: [g]}}"), []string{"cases[0].actor.user.username: required"}},
		{"actor: impersonated alone", actorCase("{impersonatedUser: {username: a}, match: none}"), []string{"cases[0].actor.match: none names no user"}},
		{"actor: unknown key", actorCase("{user: {username: a}, who: b}"), []string{`cases[0].actor.who: unknown key "who"`}},
		{"duplicate names", "cases:\n  - {name: a, type: created, resource: {resource: x}, object: {apiVersion: v1, kind: X}, expect: {fire: []}}\n  - {name: a, type: created, resource: {resource: x}, object: {apiVersion: v1, kind: X}, expect: {fire: []}}\n",
			[]string{`c.yaml:3:12: cases[1].name: duplicate case name "a"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("c.yaml", []byte(tt.src), caseTime)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("errors\n%v\ndo not contain %q", err, w)
				}
			}
		})
	}
	if _, err := Load("testdata/nope.yaml", caseTime); err == nil {
		t.Error("Load of a missing file succeeded")
	}
}

func TestLineDiff(t *testing.T) {
	got := LineDiff([]string{"a", "b", "c"}, []string{"a", "x", "c", "d"})
	want := "  a\n- b\n+ x\n  c\n+ d"
	if got != want {
		t.Errorf("LineDiff =\n%s\nwant\n%s", got, want)
	}
}

// crdCase is the change of a case: the Widget CRD's enum of spec.color
// narrowed to red.
const crdCase = `    type: updated
    resource: {resource: customresourcedefinitions}
    oldObject: &crd
      apiVersion: apiextensions.k8s.io/v1
      kind: CustomResourceDefinition
      metadata: {name: widgets.example.com}
      spec: &spec
        group: example.com
        names: {plural: widgets, kind: Widget}
        scope: Namespaced
        versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, properties: {spec: {type: object, properties: {color: {type: string, enum: [red, green]}}}}}}}]
    object:
      <<: *crd
      spec:
        <<: *spec
        versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, properties: {spec: {type: object, properties: {color: {type: string, enum: [red]}}}}}}}]
`

// TestRunCRD checks cases of CRD changes: the objects they give are
// scanned for the rules that ask for the impact, and expect.crd compares
// the keys it gives.
func TestRunCRD(t *testing.T) {
	set, err := rules.Parse("rules.yaml", []byte(`rules:
  - name: impact
    match: {resources: [{group: apiextensions.k8s.io, kind: CustomResourceDefinition}]}
    crd: {impact: true}
    actions: [{log: {}}]
  - name: plain
    match: {resources: [{group: apiextensions.k8s.io, kind: CustomResourceDefinition}]}
    actions: [{log: {}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	objects := "    objects:\n      - {apiVersion: example.com/v1, kind: Widget, metadata: {namespace: a, name: w1}, spec: {color: green}}\n" +
		"      - {apiVersion: example.com/v1, kind: Widget, metadata: {namespace: a, name: w2}, spec: {color: red}}\n"
	src := "cases:\n" +
		"  - name: pass\n" + crdCase + objects + `    expect:
      fire: [impact, plain]
      crd:
        impact:
          breaking: 1
          checks: [{check: enum-values-removed, field: spec.color, old: [green]}]
          scanned: 2
          impact: [{check: enum-values-removed, count: 1, objects: [{namespace: a, name: w1}]}]
` + "  - name: no objects\n" + crdCase + `    expect:
      fire: [impact, plain]
      crd: {impact: {scanned: 0, impact: []}}
` + "  - name: wrong\n" + crdCase + objects + `    expect:
      fire: [impact, plain]
      crd: {impact: {scanned: 1, checks: [{check: enum-values-removed}, {check: field-removed}]}, plain: {breaking: 1}}
`
	cases, err := Parse("cases.yaml", []byte(src), caseTime)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		pass bool
		diff string
	}{
		{true, ""},
		{true, ""},
		{false, "rule impact: crd differs (- expected, + got, keys not expected left out):\n" +
			"  checks:\n" +
			`-   {"check":"enum-values-removed"}` + "\n" +
			`-   {"check":"field-removed"}` + "\n" +
			"- scanned: 1\n" +
			`+   {"check":"enum-values-removed","field":"spec.color","message":"spec.color no longer accepts \"green\"","old":["green"],"path":"/properties/spec/properties/color/enum","severity":"breaking","version":"v1"}` + "\n" +
			"+ scanned: 2\n" +
			"rule plain: the payload has no crd (the rule has no crd key and its when does not read crd)"},
	}
	for i, r := range Run(set, cases) {
		if r.Pass != want[i].pass || r.Diff != want[i].diff {
			t.Errorf("case %q: pass %v, diff:\n%s\nwant pass %v, diff:\n%s", r.Name, r.Pass, r.Diff, want[i].pass, want[i].diff)
		}
	}
}

// TestRunRendersTemplates: a case fails when a template of a rule that
// fired fails or is stopped at a limit, as delivery would.
func TestRunRendersTemplates(t *testing.T) {
	set, err := rules.Parse("rules.yaml", []byte(`rules:
  - name: resized
    match: {resources: [{group: example.com, kind: Widget}]}
    fields: [spec.size]
    actions:
      - log: {}
      - webhook: {url: "http://127.0.0.1:1/", template: '{"n": {{json .name}}}'}
      - event: {reason: Looping, note: '{{range 1000000000}}x{{end}}'}
`))
	if err != nil {
		t.Fatal(err)
	}
	cases, err := Parse("cases.yaml", []byte("cases:\n  - name: loops\n"+caseChange+"    expect: {fire: [resized]}\n"), caseTime)
	if err != nil {
		t.Fatal(err)
	}
	r := Run(set, cases)[0]
	if r.Pass || !strings.HasPrefix(r.Diff, "rule resized: actions[2].event.note: template rules[0].actions[2].event.note: stopped: ") || strings.Contains(r.Diff, "webhook") {
		t.Errorf("pass %v, diff:\n%s\nwant the event note stopped, the webhook template fine", r.Pass, r.Diff)
	}
}

// actorCase is a valid case but for its actor, given as YAML flow.
func actorCase(actor string) string {
	return "cases:\n  - name: a\n    type: created\n    resource: {resource: x}\n    object: {apiVersion: v1, kind: X}\n    actor: " + actor + "\n    expect: {fire: []}\n"
}

// TestRunStopsCostlyRules: a case whose rule would match a regex of
// 10,003 instructions against 1 MiB (3 minutes of RE2 before) fails
// quickly, with the cost limit in its evaluation error; a case expecting
// that error passes.
func TestRunStopsCostlyRules(t *testing.T) {
	testenv.SkipShort(t, testenv.LoadTest)
	set, err := rules.Parse("rules.yaml", []byte(`rules:
  - name: costly
    match: {resources: [{group: "", kind: ConfigMap}]}
    when: object.data.v.matches('`+strings.Repeat("a{1000}", 10)+`b')
    actions: [{log: {}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	object := `{apiVersion: v1, kind: ConfigMap, metadata: {name: c, namespace: d, uid: u, resourceVersion: "1"}, data: {v: ` + strings.Repeat("a", 1<<20) + `}}`
	cases, err := Parse("cases.yaml", []byte(`cases:
  - name: no error expected
    type: created
    resource: {resource: configmaps}
    object: `+object+`
    expect: {fire: []}
  - name: the cost limit expected
    type: created
    resource: {resource: configmaps}
    object: `+object+`
    expect: {fire: [], errors: [cost limit exceeded]}
`), caseTime)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan []Result, 1)
	go func() { done <- Run(set, cases) }()
	var results []Result
	select {
	case results = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the cases still run after 30s")
	}
	const want = "evaluation error: rule costly: when: cost limit exceeded: matches would cost 262249858 units (a pattern of 10003 instructions against 1048576 bytes), more than the limit of 1000000"
	if r := results[0]; r.Pass || r.Diff != want {
		t.Errorf("case %q: pass %v, diff:\n%s\nwant:\n%s", r.Name, r.Pass, r.Diff, want)
	}
	if r := results[1]; !r.Pass {
		t.Errorf("case %q failed:\n%s", r.Name, r.Diff)
	}
}

// TestRunActions: expect.actions checks which actions an action's when
// routes a firing to.
func TestRunActions(t *testing.T) {
	set, err := rules.Parse("rules.yaml", []byte(`rules:
  - name: resized
    match: {resources: [{group: example.com, kind: Widget}]}
    fields: [spec.size]
    actions:
      - log: {}
      - log: {}
        when: meta.namespace == 'shop'
      - log: {}
        when: meta.namespace == 'd'
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		want string
		pass bool
	}{{"[0, 2]", true}, {"[0, 1]", false}} {
		cases, err := Parse("cases.yaml", []byte("cases:\n  - name: routed\n"+caseChange+"    expect: {fire: [resized], actions: {resized: "+tt.want+"}}\n"), caseTime)
		if err != nil {
			t.Fatal(err)
		}
		r := Run(set, cases)[0]
		if r.Pass != tt.pass || (!tt.pass && !strings.Contains(r.Diff, "rule resized: actions [0 2] get the firing, expected [0 1]")) {
			t.Errorf("expect.actions %s: pass %v, diff %q", tt.want, r.Pass, r.Diff)
		}
	}
	if _, err := Parse("cases.yaml", []byte("cases:\n  - name: x\n"+caseChange+"    expect: {fire: [], actions: {other: [0]}}\n"), caseTime); err == nil ||
		!strings.Contains(err.Error(), `expect.actions.other: actions of rule "other", which is not in expect.fire`) {
		t.Errorf("actions of a rule that does not fire: %v", err)
	}
}
