package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/watcher"
)

func apiResourcesCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fieldwatch api-resources", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var kube kubeFlags
	kube.register(fs)
	all := fs.Bool("all-versions", false, "list every served version, not only the preferred one")
	custom := fs.Bool("custom", false, "list only CRD-backed resources")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, err := kube.config()
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "fieldwatch api-resources: %v\n", err)
		return 1
	}
	resources, failed, err := watcher.Discover(ctx, cfg)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "fieldwatch api-resources: %v\n", err)
		return 1
	}
	slices.SortFunc(resources, func(a, b change.Resource) int {
		return strings.Compare(a.Group+"/"+a.Resource+"/"+a.Version, b.Group+"/"+b.Resource+"/"+b.Version)
	})
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "NAME\tAPIVERSION\tNAMESPACED\tKIND\tCUSTOM")
	for _, r := range resources {
		if (!*all && !r.Preferred) || (*custom && !r.Custom) {
			continue
		}
		mark := ""
		if r.Custom {
			mark = "crd"
		}
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\n", r.Resource, r.APIVersion(), r.Namespaced, r.Kind, mark)
	}
	if err := tw.Flush(); err != nil {
		return 1
	}
	for gv, err := range failed {
		_, _ = fmt.Fprintf(stderr, "warning: discovery of %s failed: %v\n", gv, err)
	}
	return 0
}
