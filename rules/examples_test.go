package rules_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fieldwatch/fieldwatch/internal/cases"
	"github.com/fieldwatch/fieldwatch/rules"
)

// TestExamplesLoad loads every example rules file, those added later
// included, and runs the cases file beside it when there is one.
func TestExamplesLoad(t *testing.T) {
	files, err := filepath.Glob("../examples/*/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no example rules files found")
	}
	for _, file := range files {
		t.Run(filepath.Base(filepath.Dir(file)), func(t *testing.T) {
			set, err := rules.Load(file)
			if err != nil {
				t.Fatalf("load:\n%v", err)
			}
			casesFile := filepath.Join(filepath.Dir(file), "cases.yaml")
			if _, err := os.Stat(casesFile); err != nil {
				return
			}
			cs, err := cases.Load(casesFile, caseTime)
			if err != nil {
				t.Fatalf("load cases:\n%v", err)
			}
			for _, r := range cases.Run(set, cs) {
				if !r.Pass {
					t.Errorf("case %q (%s) failed:\n%s\nfired:\n%s", r.Name, r.Source, r.Diff, r.Firings)
				}
			}
		})
	}
}
