package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fieldwatch/fieldwatch/crd/diff"
	"github.com/fieldwatch/fieldwatch/crd/impact"
	"github.com/fieldwatch/fieldwatch/crd/validate"
	"github.com/fieldwatch/fieldwatch/internal/app"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

const crdDiffUsage = `usage: fieldwatch crd-diff OLD.yaml NEW.yaml [--objects DIR|FILE]... [--policy FILE] [-o table|json]
       fieldwatch crd-diff --cluster NEW.yaml [--kubeconfig FILE] [--context NAME] [--policy FILE] [-o table|json]

Compares the CustomResourceDefinitions of OLD and NEW (paired by name; other
kinds are skipped) and prints every difference with its severity: breaking,
safe, or unknown (counted as breaking). Each input CRD is first validated with
the apiserver's own validation: a CRD the apiserver would refuse, or one given
twice, is an error. With --objects (YAML or JSON files, Lists included;
directories are read for *.yaml, *.yml and *.json), it also runs each object
of a changed CRD through the apiserver's own pruning, defaulting and
validation under NEW, at every version NEW serves it at, and prints, per
breaking check, the objects the apiserver will reject when they are created
again or when the field changes.

With --cluster, each CRD of NEW is compared with the one the cluster serves
now (a CRD the cluster lacks is crd-added), and the custom resources of each
CRD with breaking changes are listed from the cluster (pages of 500, at most
--crd-impact-max-objects objects for at most --crd-impact-timeout, as a
running fieldwatch bounds its scans; progress goes to stderr) and scanned as
with --objects. It needs get on customresourcedefinitions and list on those
custom resources, cluster-wide.

--policy reads a per-check policy (fieldwatch's checks: map, or crdify's
validations/unhandledEnforcement/conversion configuration; see
docs/crd-checks.md).

Exit 0 when nothing is breaking, 1 when a change is breaking or unknown,
2 on a usage error, a file that cannot be read or a CRD the apiserver would
refuse (FILE:LINE:COL: message), or a cluster that cannot be read.`

// crdDiffOptions are crd-diff's flags.
type crdDiffOptions struct {
	objects    files
	policyFile string
	policy     *diff.Policy
	cluster    bool
	kube       kubeFlags
	maxObjects int
	timeout    time.Duration
	progress   io.Writer
}

func crdDiffCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fset := flag.NewFlagSet("fieldwatch crd-diff", flag.ContinueOnError)
	fset.SetOutput(stderr)
	opts := crdDiffOptions{progress: stderr}
	fset.Var(&opts.objects, "objects", "custom resources to check against NEW: a file or a directory (repeat for several)")
	output := fset.String("o", "table", "output format: table or json")
	fset.StringVar(&opts.policyFile, "policy", "", "per-check policy file (fieldwatch's checks: or crdify's configuration format)")
	fset.BoolVar(&opts.cluster, "cluster", false, "compare NEW with the CRDs the cluster serves now and scan the live custom resources")
	opts.kube.register(fset)
	fset.IntVar(&opts.maxObjects, "crd-impact-max-objects", app.DefaultCRDImpactMaxObjects, "with --cluster: most custom resources one CRD's impact scan reads; beyond, the counts are lower bounds")
	fset.DurationVar(&opts.timeout, "crd-impact-timeout", app.DefaultCRDImpactTimeout, "with --cluster: longest one CRD's impact scan runs, list included; beyond, the counts are lower bounds")
	fset.Usage = func() {
		_, _ = fmt.Fprintln(stderr, crdDiffUsage)
		_, _ = fmt.Fprintln(stderr)
		fset.PrintDefaults()
	}
	paths, err := parseInterspersed(fset, args)
	if err != nil {
		return 2
	}
	usageError := func(format string, a ...any) int {
		_, _ = fmt.Fprintf(stderr, "fieldwatch crd-diff: "+format+"\n", a...)
		_, _ = fmt.Fprintln(stderr, strings.SplitN(crdDiffUsage, "\n\n", 2)[0])
		return 2
	}
	want := 2
	if opts.cluster {
		want = 1
	}
	switch {
	case *output != "table" && *output != "json":
		return usageError("-o must be table or json, not %q", *output)
	case opts.cluster && len(opts.objects) > 0:
		return usageError("--objects and --cluster do not go together: with --cluster the objects are the cluster's")
	case len(paths) < want && opts.cluster:
		return usageError("--cluster takes one file, NEW")
	case len(paths) < want:
		return usageError("want two files, OLD and NEW, got %d", len(paths))
	case len(paths) > want:
		return usageError("unexpected argument %q: want %s", paths[want], map[bool]string{true: "one file, NEW, with --cluster", false: "two files, OLD and NEW"}[opts.cluster])
	case opts.maxObjects <= 0 || opts.timeout <= 0:
		return usageError("--crd-impact-max-objects and --crd-impact-timeout must be positive")
	}
	if opts.policyFile != "" {
		if opts.policy, err = diff.ReadPolicy(opts.policyFile); err != nil {
			_, _ = fmt.Fprintln(stderr, err)
			return 2
		}
	}
	var results []*diff.Result
	if opts.cluster {
		results, err = crdDiffCluster(ctx, paths[0], opts)
	} else {
		results, err = crdDiff(ctx, paths[0], paths[1], opts)
	}
	if err != nil {
		_, _ = fmt.Fprintln(stderr, err)
		return 2
	}
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(results); err != nil {
			_, _ = fmt.Fprintln(stderr, err)
			return 2
		}
	} else {
		printCRDDiff(stdout, results)
	}
	for _, r := range results {
		if r.Breaking > 0 {
			return 1
		}
	}
	return 0
}

// parseInterspersed parses flags that may come after the positional
// arguments (crd-diff OLD NEW --objects DIR) and returns the positional
// ones.
func parseInterspersed(fset *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fset.Parse(args); err != nil {
			return nil, err
		}
		rest := fset.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if rest[0] == "--" {
			return append(positional, rest[1:]...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// crdDiff compares the CRDs of two files and scans the objects.
func crdDiff(ctx context.Context, oldPath, newPath string, opts crdDiffOptions) ([]*diff.Result, error) {
	oldDocs, err := readCRDs(oldPath)
	if err != nil {
		return nil, err
	}
	newDocs, err := readCRDs(newPath)
	if err != nil {
		return nil, err
	}
	if err := errors.Join(validateEach(ctx, oldDocs, newDocs)...); err != nil {
		return nil, err
	}
	manifests, err := diff.ReadManifests(opts.objects...)
	if err != nil {
		return nil, err
	}
	results := compareAll(crds(oldDocs), crds(newDocs), opts.policy)
	if len(manifests) == 0 {
		return results, nil
	}
	for _, r := range results {
		doc := findDoc(newDocs, r.CRD)
		if doc == nil {
			continue // removed CRD: its objects go with it
		}
		s, err := impact.New(doc.CRD, r)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %s: %w", doc.File, doc.Line, r.CRD, err)
		}
		for _, m := range manifests {
			if err := s.Add(ctx, m.Object); err != nil {
				return nil, fmt.Errorf("%s:%d: %w", m.File, m.Line, err)
			}
		}
		s.Finish()
	}
	return results, nil
}

func crds(docs []diff.Document) []*apiextensionsv1.CustomResourceDefinition {
	out := make([]*apiextensionsv1.CustomResourceDefinition, len(docs))
	for i, d := range docs {
		out[i] = d.CRD
	}
	return out
}

// compareAll is diff.CompareAll under a policy.
func compareAll(old, new []*apiextensionsv1.CustomResourceDefinition, p *diff.Policy) []*diff.Result {
	results := diff.CompareAll(old, new)
	if p == nil {
		return results
	}
	byName := func(list []*apiextensionsv1.CustomResourceDefinition, name string) *apiextensionsv1.CustomResourceDefinition {
		for _, c := range list {
			if c.Name == name {
				return c
			}
		}
		return nil
	}
	for i, r := range results {
		o, n := byName(old, r.CRD), byName(new, r.CRD)
		if o != nil && n != nil {
			results[i] = diff.CompareWith(o, n, p)
		} else {
			results[i] = p.Apply(r)
		}
	}
	return results
}

func findDoc(docs []diff.Document, name string) *diff.Document {
	for i := range docs {
		if docs[i].CRD.Name == name {
			return &docs[i]
		}
	}
	return nil
}

// readCRDs reads the CRDs of a file or directory.
func readCRDs(path string) ([]diff.Document, error) {
	docs, err := diff.ReadCRDs(path)
	if err != nil {
		return nil, err
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("%s: no apiextensions.k8s.io/v1 CustomResourceDefinition in the file", path)
	}
	return docs, nil
}

// validateEach validates the CRDs of each file as the apiserver would
// (a CRD twice in one file included) and returns the errors of each file
// in order.
func validateEach(ctx context.Context, files ...[]diff.Document) []error {
	errs := make([]error, len(files))
	for i, docs := range files {
		errs[i] = validate.Documents(ctx, docs)
	}
	return errs
}

// printCRDDiff prints the results as tables: the checks, then the impact
// with a sample of the objects and the apiserver's error for each.
func printCRDDiff(w io.Writer, results []*diff.Result) {
	for i, r := range results {
		if i > 0 {
			_, _ = fmt.Fprintln(w)
		}
		summary := fmt.Sprintf("%s: %d breaking", r.CRD, r.Breaking)
		if r.Unknown > 0 {
			summary += fmt.Sprintf(" (%d unknown)", r.Unknown)
		}
		summary += fmt.Sprintf(", %d safe", r.Safe)
		if r.Scanned > 0 {
			summary += fmt.Sprintf("; %d object(s) checked", r.Scanned)
		}
		_, _ = fmt.Fprintln(w, summary)
		if r.ImpactError != "" {
			_, _ = fmt.Fprintf(w, "impact incomplete: %s\n", r.ImpactError)
		}
		if len(r.Checks) > 0 {
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			_, _ = fmt.Fprintln(tw, "SEVERITY\tCHECK\tVERSION\tFIELD\tMESSAGE")
			for _, c := range r.Checks {
				v := dash(c.Version)
				if c.Against != "" {
					v = c.Against + "->" + c.Version
				}
				_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Severity, c.Check, v, dash(c.Field), c.Message)
			}
			_ = tw.Flush()
		}
		for _, im := range r.Impact {
			where := im.Version
			if im.Field != "" {
				where += ", " + im.Field
			}
			_, _ = fmt.Fprintf(w, "impact %s (%s): %d object(s) %s\n  %s\n", im.Check, where, im.Count, im.Effect, im.Message)
			for _, h := range im.Objects {
				_, _ = fmt.Fprintf(w, "    %s: %s\n", h, h.Error)
			}
			if more := im.Count - len(im.Objects); more > 0 {
				_, _ = fmt.Fprintf(w, "    and %d more\n", more)
			}
		}
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
