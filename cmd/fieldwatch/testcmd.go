package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/fieldwatch/fieldwatch/fieldmetrics"
	"github.com/fieldwatch/fieldwatch/internal/cases"
	"github.com/fieldwatch/fieldwatch/rules"
)

// caseTime is the time of the changes of cases that give none, so that
// payloads are reproducible.
var caseTime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func testCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fieldwatch test", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var ruleFiles files
	fs.Var(&ruleFiles, "rules", "rules file (repeat for several). Required, unless --metrics-config is given")
	metricsConfig := fs.String("metrics-config", "", "a kube-state-metrics CustomResourceStateMetrics file: show (and check) the series each case's objects give, with those of the rules files' metrics sections")
	quiet := fs.Bool("q", false, "print only failures")
	fs.Usage = func() {
		_, _ = fmt.Fprintln(stderr, "usage: fieldwatch test [--rules FILE] [--metrics-config FILE] CASES...\n\nEvaluates each case (a change: old and new objects) against the rules offline,\nprints what fired as JSON lines and the series of the metrics from fields\nthe objects give, and exits 1 when an expectation fails.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if (len(ruleFiles) == 0 && *metricsConfig == "") || fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	code, done := untilDone(ctx, func() int { return runCases(ruleFiles, *metricsConfig, fs.Args(), *quiet, stdout, stderr) })
	if !done {
		_, _ = fmt.Fprintln(stderr, "fieldwatch test: interrupted")
		return 1
	}
	return code
}

// runCases loads the rules and runs every case of the cases files,
// printing the results; it returns the exit code.
func runCases(ruleFiles []string, metricsConfig string, caseFiles []string, quiet bool, stdout, stderr io.Writer) int {
	set, err := rules.Compile(rules.File{})
	if len(ruleFiles) > 0 {
		set, err = rules.Load(ruleFiles...)
	}
	if err != nil {
		_, _ = fmt.Fprintln(stderr, err)
		return 1
	}
	ms, err := fieldmetrics.Load(metricsConfig, ruleFiles...)
	if err != nil {
		_, _ = fmt.Fprintln(stderr, err)
		return 1
	}
	failed, total := 0, 0
	for _, path := range caseFiles {
		cs, err := cases.Load(path, caseTime)
		if err != nil {
			_, _ = fmt.Fprintln(stderr, err)
			return 1
		}
		for _, r := range cases.RunMetrics(set, ms, cs) {
			total++
			if !r.Pass {
				failed++
			}
			if quiet && r.Pass {
				continue
			}
			printResult(stdout, r)
		}
	}
	_, _ = fmt.Fprintf(stdout, "%d of %d cases passed\n", total-failed, total)
	if failed > 0 {
		return 1
	}
	return 0
}

// printResult prints one case: a header line, then each firing's payload
// as one JSON line, then what failed.
func printResult(w io.Writer, r cases.Result) {
	status := "PASS"
	if !r.Pass {
		status = "FAIL"
	}
	_, _ = fmt.Fprintf(w, "%s %s (%s)\n", status, r.Name, r.Source)
	for _, f := range r.Firings {
		// Compact without json.Marshal's HTML escaping, so that the line
		// reads like the log action's ("<redacted>", not "\u003credacted\u003e").
		var b bytes.Buffer
		if err := json.Compact(&b, f); err != nil {
			b.Reset()
			b.Write(f)
		}
		_, _ = fmt.Fprintf(w, "  %s\n", b.Bytes())
	}
	for _, l := range r.OldSeries {
		_, _ = fmt.Fprintf(w, "  old series: %s\n", l)
	}
	for _, l := range r.Series {
		_, _ = fmt.Fprintf(w, "  series: %s\n", l)
	}
	for _, e := range r.Errors {
		_, _ = fmt.Fprintf(w, "  error: %s\n", e)
	}
	if r.Diff != "" {
		_, _ = fmt.Fprintf(w, "  %s\n", r.Diff)
	}
}
