package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/dynamic"

	"github.com/fieldwatch/fieldwatch/internal/crdguard"
)

const crdMigrateUsage = `usage: fieldwatch crd-migrate CRD [--kubeconfig FILE] [--context NAME] [--timeout 1h] [--force]

Rewrites the custom resources of CRD (its name, plural.group) that etcd still
holds at a version other than the storage version, then sets
status.storedVersions to the storage version alone, so that the old versions
can leave spec.versions safely.

Each object gets an update that changes nothing, in pages of --page-size:
the apiserver writes the ones stored at another version and leaves the others
as they are, so running it again writes nothing. A conflict is retried from a
fresh read; an object deleted meanwhile is skipped. It starts once the CRD's
last write is --settle old (the apiserver takes a storage switch up a moment
after storing it). status.storedVersions changes only when every object went
through and the storage version did not change meanwhile; then the CRD
records the migration in its fieldwatch.io/migrated annotation, which
fieldwatch's storage-version ledger and CRD guard read. The client's pace is
--kube-qps. It needs get, list and update on the custom resources, and get,
update and update of customresourcedefinitions/status on the CRD.

Exit 0 when status.storedVersions lists the storage version alone (nothing to
do included), 1 when objects could not be rewritten or the time ran out (run
it again), 2 on a usage error or a CRD that cannot be read.`

func crdMigrateCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fieldwatch crd-migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var kube kubeFlags
	kube.register(fs)
	timeout := fs.Duration("timeout", time.Hour, "longest the migration runs; what is rewritten by then stays rewritten, and a second run goes on")
	force := fs.Bool("force", false, "rewrite the objects even when status.storedVersions lists the storage version alone")
	pageSize := fs.Int64("page-size", crdguard.DefaultPageSize, "objects listed per page")
	settle := fs.Duration("settle", crdguard.DefaultSettle, "how old the CRD's last write must be before objects are rewritten")
	fs.Usage = func() {
		_, _ = fmt.Fprintln(stderr, crdMigrateUsage)
		_, _ = fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	names, err := parseInterspersed(fs, args)
	if err != nil {
		return 2
	}
	if len(names) != 1 || *timeout <= 0 || *pageSize <= 0 || *settle <= 0 {
		_, _ = fmt.Fprintln(stderr, "fieldwatch crd-migrate: want one CRD name, and a positive --timeout, --page-size and --settle")
		_, _ = fmt.Fprintln(stderr, strings.SplitN(crdMigrateUsage, "\n\n", 2)[0])
		return 2
	}
	cfg, err := kube.config()
	if err != nil {
		_, _ = fmt.Fprintln(stderr, err)
		return 2
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "client: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	start := time.Now()
	var mu sync.Mutex
	reported := start
	progress := func(r crdguard.MigrateResult) {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(reported) < progressEvery {
			return
		}
		reported = time.Now()
		_, _ = fmt.Fprintf(stderr, "crd-migrate: %s: %d objects, %d rewritten, %d failed in %s\n", r.CRD, r.Objects, r.Rewritten, r.Failed, time.Since(start).Round(time.Second))
	}
	r, err := crdguard.Migrate(ctx, names[0], crdguard.MigrateOptions{Dynamic: dyn, PageSize: *pageSize, Settle: *settle, Force: *force, Progress: progress})
	switch {
	case err == nil && r.Objects == 0 && r.Done:
		_, _ = fmt.Fprintf(stdout, "%s: status.storedVersions is [%s]: every object is stored at %s, nothing to do\n", r.CRD, r.Version, r.Version)
		return 0
	case err == nil:
		_, _ = fmt.Fprintf(stdout, "%s: %d objects gone through, %d rewritten at %s, %d deleted meanwhile; status.storedVersions is now [%s] (%s)\n",
			r.CRD, r.Objects, r.Rewritten, r.Version, r.Gone, r.Version, time.Since(start).Round(time.Millisecond))
		return 0
	case r.Version == "":
		_, _ = fmt.Fprintln(stderr, err)
		return 2
	}
	_, _ = fmt.Fprintf(stderr, "%s: %v\n", r.CRD, err)
	_, _ = fmt.Fprintf(stdout, "%s: %d objects gone through, %d rewritten at %s, %d failed; status.storedVersions left at [%s]: run it again\n",
		r.CRD, r.Objects, r.Rewritten, r.Version, r.Failed, strings.Join(r.StoredVersions, ", "))
	return 1
}
