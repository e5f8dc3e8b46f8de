// Package fieldmetrics computes Prometheus series from fields of
// Kubernetes objects, configured as kube-state-metrics' custom-resource-
// state (CRS) metrics are: a CustomResourceStateMetrics file (`fieldwatch
// run --metrics-config`), or the same spec as the `metrics:` section of a
// rules file. The same file gives the same series names, labels and
// values for the same objects (docs/metrics-from-fields.md lists every
// feature, and each difference with its reason).
//
// A program loads the configuration into a Set (compiled once: paths
// become operations, label names indices), asks it which resources to
// cache and what of their objects (Resources, Projection), and serves the
// series a Scraper computes from a Source of objects:
//
//	set, err := fieldmetrics.Load("crs.yaml", "rules.yaml")
//	...
//	sc := fieldmetrics.NewScraper(set, fieldmetrics.Options{})
//	http.Handle("/metrics", sc.Handler(source, nil))
//
// Loading is strict, as for rules files: unknown keys, and whatever
// kube-state-metrics would accept but not serve correctly (a metric name
// or a label name Prometheus refuses, a metric type it does not have),
// are errors placed at FILE:LINE:COL with their field path, all reported
// at once; with any error there is no Set.
//
// Evaluation works on plain map[string]any objects, as decoded from JSON
// by Kubernetes' unstructured decoder (int64 for integral numbers,
// float64 otherwise). The Scraper keeps the encoded series of each object
// between scrapes, keyed by the immutable object the Source holds, and
// evaluates only new and changed objects; series are exposed with
// client_golang's exposition code (expfmt), family by family, in pieces
// of bounded size. A family's series are bounded (Options.SeriesLimit),
// and so are label values (Options.MaxLabelValueBytes): what passes a
// bound is skipped and counted, never kept.
//
// fieldmetrics must not import k8s.io/client-go nor the watcher, rules,
// action or internal/app packages (TestDependencies keeps it so): it uses
// package change (resources and selectors), fileerr and
// internal/yamlstrict (its errors and decoding), apimachinery's quantity
// and percentage parsers, and client_golang.
package fieldmetrics
