package examples_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/fieldmetrics"
	"github.com/fieldwatch/fieldwatch/internal/cases"
	"github.com/fieldwatch/fieldwatch/rules"
)

// TestMetricsExamples loads every CustomResourceStateMetrics file of
// examples/metrics and runs the offline cases beside it; every file must
// have cases, and every case must say which series it expects.
func TestMetricsExamples(t *testing.T) {
	files, err := filepath.Glob("metrics/*.crs.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples/metrics/*.crs.yaml: %v", err)
	}
	none, err := rules.Compile(rules.File{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			ms, err := fieldmetrics.Load(f)
			if err != nil {
				t.Fatalf("load:\n%v", err)
			}
			cs, err := cases.Load(strings.TrimSuffix(f, ".crs.yaml")+".cases.yaml", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			if err != nil {
				t.Fatalf("cases:\n%v", err)
			}
			for i, r := range cases.RunMetrics(none, ms, cs) {
				if cs[i].Expect.Series == nil {
					t.Errorf("%s: no expect.series", r.Name)
				}
				if !r.Pass {
					t.Errorf("%s (%s):\n%s", r.Name, r.Source, r.Diff)
				}
			}
		})
	}
}
