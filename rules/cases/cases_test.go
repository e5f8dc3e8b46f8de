package cases

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
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
