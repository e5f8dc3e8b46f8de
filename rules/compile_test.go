package rules

import (
	"errors"
	"strings"
	"testing"

	"github.com/fieldwatch/fieldwatch/fileerr"
)

// TestCompile compiles rules written as plain structs: errors carry their
// field paths and no file position.
func TestCompile(t *testing.T) {
	core, null := "", any(nil)
	one := any(1)
	valid := RuleSpec{
		Name:   "resized",
		Match:  &MatchSpec{Resources: []SelectorSpec{{Group: &core, Kind: "ConfigMap"}}},
		Fields: []FieldSpec{{Path: "data.size", From: &null, To: &one}},
		When:   "object.data.size > 0",
		Actions: []Action{
			{Webhook: &WebhookAction{URL: "http://x", Template: &Template{src: `{"r": {{json .rule}}}`}}},
			{Event: &EventAction{Reason: "Resized", Note: &Template{src: "{{.name}}"}}},
		},
	}
	set, err := Compile(File{Rules: []RuleSpec{valid}})
	if err != nil {
		t.Fatal(err)
	}
	r := set.Rule("resized")
	if r == nil || r.Source != "rules[0]" || len(r.fields) != 1 || !r.fields[0].hasFrom || r.fields[0].from != nil || r.when == nil {
		t.Fatalf("rule = %+v", r)
	}
	if out, err := r.Actions[0].Webhook.Template.Render([]byte(`{"rule":"x"}`)); err != nil || string(out) != `{"r": "x"}` {
		t.Errorf("compiled template renders %s, %v", out, err)
	}
	if _, err := valid.Actions[0].Webhook.Template.Render([]byte(`{}`)); err == nil {
		t.Error("Compile changed its input: the spec's template is compiled")
	}

	bad := valid
	bad.Fields = []FieldSpec{{Path: "a..b"}}
	bad.When = "object.x +"
	bad.Actions = []Action{{Webhook: &WebhookAction{URL: "ftp://x", Template: &Template{src: "{{"}}}}
	_, err = Compile(File{Rules: []RuleSpec{valid, bad}})
	var list fileerr.List
	if !errors.As(err, &list) {
		t.Fatalf("error %v is not a fileerr.List", err)
	}
	want := []string{
		`rules[1].fields[0].path: invalid path "a..b"`,
		"rules[1].when: CEL: Syntax error",
		"(at line 1, column 11 of the expression)",
		"rules[1].actions[0].webhook.template: invalid template",
		`rules[1].actions[0].webhook.url: must be an absolute http or https URL, not scheme "ftp" with host "x"`,
		`rules[1].name: duplicate rule name "resized" (first defined at rules[0])`,
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("errors\n%v\ndo not contain %q", err, w)
		}
	}
	for _, line := range strings.Split(err.Error(), "\n") {
		if !strings.HasPrefix(line, "rules[1].") {
			t.Errorf("error %q does not start with its field path", line)
		}
	}
}
