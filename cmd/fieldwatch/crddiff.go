package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/fieldwatch/fieldwatch/crd/diff"
	"github.com/fieldwatch/fieldwatch/crd/impact"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

const crdDiffUsage = `usage: fieldwatch crd-diff OLD.yaml NEW.yaml [--objects DIR|FILE]... [-o table|json]

Compares the CustomResourceDefinitions of OLD and NEW (paired by name; other
kinds are skipped) and prints every difference with its severity: breaking,
safe, or unknown (counted as breaking). With --objects (YAML or JSON files,
Lists included; directories are read for *.yaml, *.yml and *.json), it also
runs each object of a changed CRD through the apiserver's own pruning,
defaulting and validation under NEW and prints, per breaking check, the
objects the apiserver will reject when they are created again or when the
field changes.

Exit 0 when nothing is breaking, 1 when a change is breaking or unknown,
2 on a usage error or a file that cannot be read (FILE:LINE:COL: message).`

func crdDiffCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fset := flag.NewFlagSet("fieldwatch crd-diff", flag.ContinueOnError)
	fset.SetOutput(stderr)
	var objects files
	fset.Var(&objects, "objects", "custom resources to check against NEW: a file or a directory (repeat for several)")
	output := fset.String("o", "table", "output format: table or json")
	fset.Usage = func() {
		_, _ = fmt.Fprintln(stderr, crdDiffUsage)
		_, _ = fmt.Fprintln(stderr)
		fset.PrintDefaults()
	}
	paths, err := parseInterspersed(fset, args)
	if err != nil {
		return 2
	}
	if len(paths) != 2 || (*output != "table" && *output != "json") {
		fset.Usage()
		return 2
	}
	results, err := crdDiff(ctx, paths[0], paths[1], objects)
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
func crdDiff(ctx context.Context, oldPath, newPath string, objectPaths []string) ([]*diff.Result, error) {
	oldDocs, err := readCRDs(oldPath)
	if err != nil {
		return nil, err
	}
	newDocs, err := readCRDs(newPath)
	if err != nil {
		return nil, err
	}
	manifests, err := diff.ReadManifests(objectPaths...)
	if err != nil {
		return nil, err
	}
	crds := func(docs []diff.Document) []*apiextensionsv1.CustomResourceDefinition {
		out := make([]*apiextensionsv1.CustomResourceDefinition, len(docs))
		for i, d := range docs {
			out[i] = d.CRD
		}
		return out
	}
	results := diff.CompareAll(crds(oldDocs), crds(newDocs))
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
		if len(r.Checks) > 0 {
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			_, _ = fmt.Fprintln(tw, "SEVERITY\tCHECK\tVERSION\tFIELD\tMESSAGE")
			for _, c := range r.Checks {
				_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Severity, c.Check, dash(c.Version), dash(c.Field), c.Message)
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
