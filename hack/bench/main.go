// Command bench is `make bench`: it measures fieldwatch against a bare
// client-go dynamic informer on a local control plane, side by side in one
// run, and prints one table:
//
//   - heap bytes per cached object (20,000 ConfigMaps of ~1 KiB and 20,000
//     custom resources of ~5 KiB), measured in this process;
//   - changes per second and CPU per change, with fieldwatch and a bare
//     informer running as separate processes on the same stream of updates
//     (CPU read from /proc), to a log action and to a webhook on 127.0.0.1;
//   - webhook POSTs per second draining a backlog;
//   - the history (a state directory with and without it): CPU per
//     change with a log action, and bytes on disk per entry;
//   - attribution from the audit stream on against off: CPU per change
//     (log action) and latency from update to webhook receipt with the
//     default --audit-wait, on a control plane that audits ConfigMap
//     writes to fieldwatch's audit webhook in batches of a second;
//   - latency from update to webhook receipt at half the maximum rate;
//   - start-up time and peak RSS with 100 CRDs and 50,000 objects, with and
//     without the watch-list streaming client;
//   - CPU per change with CBOR instead of JSON (-cbor).
//
// The bare informer runs as `bench -child bare`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// options are the bench's sizes.
type options struct {
	configMaps, widgets int
	updates             int
	crds, objectsPerCRD int
	latencySeconds      int
	drain               int
	sections            string
}

func main() {
	child := flag.String("child", "", "internal: run as the bare informer child (\"bare\")")
	kubeconfig := flag.String("child-kubeconfig", "", "internal: the child's kubeconfig")
	namespace := flag.String("child-namespace", "", "internal: the child's namespace")
	resource := flag.String("child-resource", "configmaps", "internal: the child's resource: configmaps or widgets")
	var o options
	flag.IntVar(&o.configMaps, "configmaps", 20000, "ConfigMaps of ~1 KiB for the cache measurement")
	flag.IntVar(&o.widgets, "widgets", 20000, "custom resources of ~5 KiB for the cache measurement")
	flag.IntVar(&o.updates, "updates", 10000, "updates for the throughput and CPU measurement")
	flag.IntVar(&o.crds, "crds", 100, "CRDs for the start-up measurement")
	flag.IntVar(&o.objectsPerCRD, "objects-per-crd", 500, "objects of each CRD for the start-up measurement")
	flag.IntVar(&o.latencySeconds, "latency-seconds", 10, "how long to measure latency at half the maximum rate")
	flag.IntVar(&o.drain, "drain", 5000, "firings queued for the webhook drain measurement")
	flag.StringVar(&o.sections, "sections", "memory,events,history,audit,startup,cbor", "which measurements to run (events and history update the ConfigMaps memory creates, or create them)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if *child == "bare" {
		gvr := configMapsGVR
		if *resource == "widgets" {
			gvr = widgetsGVR
		}
		err = runBareChild(ctx, *kubeconfig, *namespace, gvr)
	} else {
		err = run(ctx, o)
	}
	if err != nil {
		_, _ = fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}
