package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

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
	fs.Var(&ruleFiles, "rules", "rules file (repeat for several). Required")
	quiet := fs.Bool("q", false, "print only failures")
	fs.Usage = func() {
		_, _ = fmt.Fprintln(stderr, "usage: fieldwatch test --rules FILE CASES...\n\nEvaluates each case (a change: old and new objects) against the rules offline,\nprints what fired as JSON lines, and exits 1 when an expectation fails.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if len(ruleFiles) == 0 || fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	code, done := untilDone(ctx, func() int { return runCases(ruleFiles, fs.Args(), *quiet, stdout, stderr) })
	if !done {
		_, _ = fmt.Fprintln(stderr, "fieldwatch test: interrupted")
		return 1
	}
	return code
}

// runCases loads the rules and runs every case of the cases files,
// printing the results; it returns the exit code.
func runCases(ruleFiles, caseFiles []string, quiet bool, stdout, stderr io.Writer) int {
	set, err := rules.Load(ruleFiles...)
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
		for _, r := range cases.Run(set, cs) {
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
	for _, e := range r.Errors {
		_, _ = fmt.Fprintf(w, "  error: %s\n", e)
	}
	if r.Diff != "" {
		_, _ = fmt.Fprintf(w, "  %s\n", r.Diff)
	}
}
