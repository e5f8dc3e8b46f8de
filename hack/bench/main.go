// Command bench is `make bench`: it measures fieldwatch against a bare
// client-go dynamic informer on a local control plane, side by side in one
// run, and prints one table. Where a row says "fair peer", the informer
// has a SetTransform that keeps what fieldwatch's cache keeps of each
// object (projectTransform): the peer fieldwatch's own informer is
// measured against.
//
//   - heap bytes per cached object (20,000 ConfigMaps of ~1 KiB and 20,000
//     custom resources of ~5 KiB), measured in this process;
//   - changes per second and CPU per change, with fieldwatch and a bare
//     informer running as separate processes on the same stream of updates
//     (CPU read from /proc), to a log action and to a webhook on 127.0.0.1;
//   - webhook POSTs per second draining a backlog of 4 KB bodies to Go's
//     net/http server (receiver.go), with the CPU per POST of fieldwatch
//     and of the receiver;
//   - the history (a state directory with and without it): CPU per
//     change with a log action, and bytes on disk per entry;
//   - attribution from the audit stream on against off: CPU per change
//     (log action) and latency from update to webhook receipt with the
//     default --audit-wait, on a control plane that audits ConfigMap
//     writes to fieldwatch's audit webhook in batches of a second;
//   - latency from update to webhook receipt at half the maximum rate;
//   - start-up time and peak RSS with 100 CRDs and 50,000 objects, with and
//     without the watch-list streaming client;
//   - CPU per change with CBOR instead of JSON (-cbor);
//   - the CRD-count scenario (crds): 100, 1,000 and 3,000 CRDs with 20 KiB
//     schemas over up to 300 groups, one object each, on a control plane
//     of their own: ready time, settled RSS, goroutines and discovery
//     requests of fieldwatch with deploy/'s rules, and with the
//     CRD-definition rules too, beside bare dynamic informers on every
//     custom resource; and how long a new CRD's first object takes to fire;
//   - the object-count scenario (objects): 100,000 and 300,000 ConfigMaps
//     with a rule reading one field, settled RSS and heap per object of
//     fieldwatch and a bare informer, and what each object adds between
//     the counts;
//   - the kube-state-metrics scenario (ksm): the same
//     CustomResourceStateMetrics file served by kube-state-metrics and by
//     fieldwatch --metrics-config, over 100,000 custom resources (five
//     series each) and over 3,000 CRDs with one object each: start to the
//     first full scrape, settled and peak RSS, scrape time.
//
// The bare informers run as `bench -child bare` and `bench -child
// bare-crds`, one after the other with fieldwatch, never at once.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
)

// options are the bench's sizes.
type options struct {
	configMaps, widgets int
	updates             int
	crds, objectsPerCRD int
	latencySeconds      int
	drain               int
	// drainRuns repeats the drain; drainProfile,
	// when set, is a directory for fieldwatch's heap and CPU profiles of
	// each drain.
	drainRuns    int
	drainProfile string
	sections     string
	compare      string
	crdCounts    []int
	objectCounts []int
	// hold keeps the CRD-count or kube-state-metrics scenario's control
	// plane, with its CRDs (and objects) created, until interrupted: for
	// profiling against it.
	hold bool
}

func main() {
	child := flag.String("child", "", "internal: run as a bare informer child (\"bare\" or \"bare-crds\")")
	kubeconfig := flag.String("child-kubeconfig", "", "internal: the child's kubeconfig")
	namespace := flag.String("child-namespace", "", "internal: the child's namespace")
	resource := flag.String("child-resource", "configmaps", "internal: the child's resource: configmaps or widgets")
	fields := flag.String("child-fields", "", "internal: the child's projecting transform keeps these dotted paths (comma-separated) as fieldwatch's cache does; none: no transform")
	var o options
	flag.IntVar(&o.configMaps, "configmaps", 20000, "ConfigMaps of ~1 KiB for the cache measurement")
	flag.IntVar(&o.widgets, "widgets", 20000, "custom resources of ~5 KiB for the cache measurement")
	flag.IntVar(&o.updates, "updates", 10000, "updates for the throughput and CPU measurement")
	flag.IntVar(&o.crds, "crds", 100, "CRDs for the start-up measurement")
	flag.IntVar(&o.objectsPerCRD, "objects-per-crd", 500, "objects of each CRD for the start-up measurement")
	flag.IntVar(&o.latencySeconds, "latency-seconds", 10, "how long to measure latency at half the maximum rate")
	flag.IntVar(&o.drain, "drain", 5000, "firings queued for the webhook drain measurement")
	flag.IntVar(&o.drainRuns, "drain-runs", 1, "drains, each its own row (profiles of several drains merge with go tool pprof)")
	flag.StringVar(&o.drainProfile, "drain-profile", "", "a directory for profiles of fieldwatch from its --pprof (events section): its heap as the drain starts (after a collection, which the drain then does not make: its rate is not comparable with unprofiled drains) and its CPU during the drain")
	flag.StringVar(&o.sections, "sections", "memory,events,history,audit,startup,cbor,crds,objects,ksm", "which measurements to run (events and history update the ConfigMaps memory creates, or create them)")
	flag.StringVar(&o.compare, "compare", "", "another fieldwatch binary to run beside bin/fieldwatch in the events section (CPU per change with a webhook, the drain), the CRD-count (deploy/ rules) and object-count scenarios, for a change's before and after in one run")
	crdCounts := flag.String("crd-counts", "100,1000,3000", "CRD counts of the CRD-count scenario (crds), ascending")
	objectCounts := flag.String("object-counts", "100000,300000", "ConfigMap counts of the object-count scenario (objects), ascending")
	flag.BoolVar(&o.hold, "hold", false, "in the CRD-count scenario (crds), create the last count's CRDs, print the kubeconfig and wait until interrupted, measuring nothing: for profiling fieldwatch against it; in the kube-state-metrics scenario (ksm), the same with the 3,000 CRDs of an object each and their metrics configuration")
	flag.Parse()
	var err error
	if o.crdCounts, err = counts(*crdCounts); err == nil {
		o.objectCounts, err = counts(*objectCounts)
	}
	if err != nil {
		_, _ = fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch *child {
	case "bare-crds":
		err = runBareCRDsChild(ctx, *kubeconfig)
	case "bare":
		gvr := configMapsGVR
		if *resource == "widgets" {
			gvr = widgetsGVR
		}
		var paths []string
		if *fields != "" {
			paths = strings.Split(*fields, ",")
		}
		err = runBareChild(ctx, *kubeconfig, *namespace, gvr, paths)
	default:
		err = run(ctx, o)
	}
	if err != nil {
		_, _ = fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

// counts parses a comma list of ascending counts.
func counts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 || len(out) > 0 && n <= out[len(out)-1] {
			return nil, fmt.Errorf("counts %q: want ascending positive numbers", s)
		}
		out = append(out, n)
	}
	return out, nil
}
