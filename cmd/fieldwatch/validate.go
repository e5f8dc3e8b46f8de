package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/fieldwatch/fieldwatch/fieldmetrics"
	"github.com/fieldwatch/fieldwatch/rules"
)

func validateCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fieldwatch validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var namespaces nameList
	fs.Var(&namespaces, "namespaces", "check the rules for a namespaced install watching only these namespaces (a comma list, or repeat), as fieldwatch run --namespaces does: "+
		"a rule that names another namespace or selects a built-in cluster-scoped resource is an error")
	metricsConfig := fs.String("metrics-config", "", "also check this kube-state-metrics CustomResourceStateMetrics file, as fieldwatch run --metrics-config loads it")
	fs.Usage = func() {
		_, _ = fmt.Fprintln(stderr, "usage: fieldwatch validate [--namespaces NS,...] [--metrics-config FILE] FILE...\n\nChecks rules files, their metrics sections and a metrics config. Exit 0 when valid; 1 with one FILE:LINE:COL: message per error\n(or when interrupted by SIGINT or SIGTERM).")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 && *metricsConfig == "" {
		fs.Usage()
		return 2
	}
	err, done := untilDone(ctx, func() error {
		if _, err := fieldmetrics.Load(*metricsConfig, fs.Args()...); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			return nil
		}
		set, err := rules.Load(fs.Args()...)
		if err != nil || len(namespaces) == 0 {
			return err
		}
		// Offline: the built-in cluster-scoped resources only; fieldwatch
		// run checks custom ones against discovery too.
		return set.CheckNamespaced(rules.Namespaced{Namespaces: namespaces})
	})
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
