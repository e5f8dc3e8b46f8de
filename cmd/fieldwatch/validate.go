package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/fieldwatch/fieldwatch/rules"
)

func validateCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fieldwatch validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		_, _ = fmt.Fprintln(stderr, "usage: fieldwatch validate FILE...\n\nChecks rules files. Exit 0 when valid; 1 with one FILE:LINE:COL: message per error\n(or when interrupted by SIGINT or SIGTERM).")
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	err, done := untilDone(ctx, func() error { return rules.Validate(fs.Args()...) })
	if !done {
		_, _ = fmt.Fprintln(stderr, "fieldwatch validate: interrupted")
		return 1
	}
	if err != nil {
		_, _ = fmt.Fprintln(stderr, err)
		return 1
	}
	_, _ = fmt.Fprintf(stdout, "%d file(s) valid\n", fs.NArg())
	return 0
}
