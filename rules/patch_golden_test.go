package rules_test

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/fieldwatch/fieldwatch/internal/cases"
	"github.com/fieldwatch/fieldwatch/rules"
)

// TestChangesApplyToOld checks, for every payload of every golden case
// (testdata/golden) and of every example's cases, that its changes are a
// JSON Patch from the old object to the new one, modulo what the rule
// leaves out by design (rules.CheckChanges says how each part is
// handled).
func TestChangesApplyToOld(t *testing.T) {
	suites := [][2]string{{"testdata/golden/rules.yaml", "testdata/golden/cases.yaml"}}
	examples, err := filepath.Glob("../examples/*/rules.yaml")
	if err != nil || len(examples) == 0 {
		t.Fatalf("no examples found (%v)", err)
	}
	for _, r := range examples {
		suites = append(suites, [2]string{r, filepath.Join(filepath.Dir(r), "cases.yaml")})
	}
	payloads := 0
	for _, s := range suites {
		set, err := rules.Load(s[0])
		if err != nil {
			t.Fatal(err)
		}
		cs, err := cases.Load(s[1], caseTime)
		if err != nil {
			t.Fatal(err)
		}
		for i, res := range cases.Run(set, cs) {
			for _, f := range res.Firings {
				var p struct {
					Rule    string `json:"rule"`
					Changes []any  `json:"changes"`
				}
				if err := json.Unmarshal(f, &p); err != nil {
					t.Fatalf("%s: %s: %v", s[1], res.Name, err)
				}
				payloads++
				if err := rules.CheckChanges(set, p.Rule, &cs[i].Change, p.Changes); err != nil {
					t.Errorf("%s: case %q: %v", s[1], res.Name, err)
				}
			}
		}
	}
	if payloads < 20 {
		t.Errorf("only %d payloads checked: the cases did not load as expected", payloads)
	}
}
