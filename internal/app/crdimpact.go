package app

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"

	"github.com/fieldwatch/fieldwatch/crd/diff"
	"github.com/fieldwatch/fieldwatch/crd/impact"
	"github.com/fieldwatch/fieldwatch/rules"
	"github.com/fieldwatch/fieldwatch/watcher"
)

// The impact of a CRD change on its custom resources, for the rules that
// ask for it (crd: {impact: true}): rules list no objects, so the
// pipeline hands them the comparison with its impact before it evaluates
// the change.
//
// Where the objects come from: the watcher's cache when it holds every
// object of the resource whole and filled it from a list served before
// the change (rules with the impact make the watcher watch those
// resources whole, see rules.Set.Projection), so that a field the change
// removes is still there; otherwise a paged list from the apiserver, read after the
// change, in which the impact of removals and of versions no longer
// served is reported as not computable (impact.Scanner.AfterChange).
//
// The scan runs on the worker that handles the CRD change, bounded by
// Config.CRDImpactMaxObjects and Config.CRDImpactTimeout: a scan that
// fails or stops early leaves an impactError in the payload, with what
// was found so far, and the rules still fire.

// listPageSize is the page size of the list the impact scan falls back
// to.
const listPageSize = 500

// errLimit stops a scan at the object limit.
var errLimit = errors.New("object limit")

// crdImpact compares the CRDs of c and, when the comparison has breaking
// checks, scans the custom resources for their impact; it sets rc.CRD.
// When the CRDs cannot be read it leaves rc.CRD nil: the rules compare
// them again and report why.
func (a *app) crdImpact(ctx context.Context, c *watcher.Change, rc *rules.Change) {
	oldCRD, err := diff.FromMap(rc.Old)
	if err != nil {
		return
	}
	newCRD, err := diff.FromMap(rc.New)
	if err != nil {
		return
	}
	res := diff.Compare(oldCRD, newCRD)
	rc.CRD = res
	if res.Breaking == 0 {
		return // nothing to scan for
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, a.cfg.CRDImpactTimeout)
	defer cancel()
	source, err := a.scanImpact(ctx, oldCRD, newCRD, res)
	elapsed := time.Since(start)
	m := a.metrics
	m.impactScans.WithLabelValues(source).Inc()
	m.impactObjects.Add(float64(res.Scanned))
	m.impactSeconds.Observe(elapsed.Seconds())
	log := a.log.With("gvr", c.Resource.String(), "name", newCRD.Name, "source", source, "objects", res.Scanned, "seconds", elapsed.Seconds())
	if err == nil {
		log.Info("scanned the custom resources a CRD change hits", "impacts", len(res.Impact))
		return
	}
	reason := "error"
	switch {
	case errors.Is(err, errLimit):
		reason = "limit"
		res.ImpactError = fmt.Sprintf("stopped after %d objects (--crd-impact-max-objects): the counts are lower bounds", res.Scanned)
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
		reason = "timeout"
		res.ImpactError = fmt.Sprintf("stopped after %s (--crd-impact-timeout), %d objects read: the counts are lower bounds", a.cfg.CRDImpactTimeout, res.Scanned)
	default:
		res.ImpactError = fmt.Sprintf("%v; %d objects read: the counts are lower bounds", err, res.Scanned)
	}
	m.impactFailures.WithLabelValues(reason).Inc()
	log.Warn("the impact of a CRD change is incomplete", "error", res.ImpactError)
}

// scanImpact runs the objects of the CRD's resource through the impact
// scan and records what it found in res, also when it stops early. It
// returns where the objects came from: cache or list.
func (a *app) scanImpact(ctx context.Context, oldCRD, newCRD *apiextensionsv1.CustomResourceDefinition, res *diff.Result) (string, error) {
	s, err := impact.New(newCRD, res)
	if err != nil {
		return "none", fmt.Errorf("the new CRD: %w", err)
	}
	defer s.Finish()
	add := func(obj map[string]any) error {
		if s.Scanned() >= a.cfg.CRDImpactMaxObjects {
			return errLimit
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		return s.Add(ctx, obj)
	}

	gr := schema.GroupResource{Group: oldCRD.Spec.Group, Resource: oldCRD.Spec.Names.Plural}
	why := a.cacheUnusable(gr, newCRD.ResourceVersion)
	if why == "" {
		snap, _ := a.watcher.Load().Cached(gr)
		for _, o := range snap.Objects {
			if err := add(o.Map()); err != nil {
				return "cache", err
			}
		}
		return "cache", nil
	}

	s.AfterChange("the objects were listed from the apiserver after the change (not cached before it: " + why + ")")
	v := listVersion(oldCRD, newCRD)
	if v == "" {
		return "list", errors.New("the CRD serves no version to list")
	}
	client := a.dyn.Resource(gr.WithVersion(v))
	opts := metav1.ListOptions{Limit: listPageSize}
	for {
		list, err := client.List(ctx, opts)
		if err != nil {
			return "list", fmt.Errorf("list %s.%s.%s: %w", gr.Resource, v, gr.Group, err)
		}
		for i := range list.Items {
			if err := add(list.Items[i].Object); err != nil {
				return "list", err
			}
		}
		if opts.Continue = list.GetContinue(); opts.Continue == "" {
			return "list", nil
		}
	}
}

// cacheUnusable says why the watcher's cache cannot give the objects of
// gr as they were before the CRD change that wrote resourceVersion
// changed; "" when it can: it holds them whole, and the list that last
// filled it was served at an earlier resourceVersion (the apiserver
// served them under the old schema; a list after the change, such as
// the one every informer makes when the change drops its watch, or the
// first one of a fieldwatch started after the change, has the removed
// fields pruned). resourceVersions are etcd revisions, compared as
// numbers; ones that are not numbers are not compared.
func (a *app) cacheUnusable(gr schema.GroupResource, changed string) string {
	w := a.watcher.Load()
	if w == nil {
		return "not watching"
	}
	snap, err := w.Cached(gr)
	if err != nil {
		return err.Error()
	}
	if !snap.Projection.Full {
		return "cached without all their fields"
	}
	listed, err1 := strconv.ParseUint(snap.ResourceVersion, 10, 64)
	change, err2 := strconv.ParseUint(changed, 10, 64)
	switch {
	case err1 != nil || err2 != nil:
		return fmt.Sprintf("resourceVersions %q and %q do not compare", snap.ResourceVersion, changed)
	case listed >= change:
		return fmt.Sprintf("the cache was filled from a list at resourceVersion %d, after the change at %d", listed, change)
	}
	return ""
}

// listVersion is the version the impact scan lists objects at when the
// cache cannot give them: the version the old CRD's clients preferred,
// if the new CRD still serves it, else the one the new CRD prefers (the
// served version of highest priority, as discovery orders them); "" when
// the new CRD serves none.
func listVersion(oldCRD, newCRD *apiextensionsv1.CustomResourceDefinition) string {
	preferred := func(crd *apiextensionsv1.CustomResourceDefinition) string {
		best := ""
		for _, v := range crd.Spec.Versions {
			if v.Served && (best == "" || version.CompareKubeAwareVersionStrings(v.Name, best) > 0) {
				best = v.Name
			}
		}
		return best
	}
	if v := preferred(oldCRD); v != "" {
		for _, nv := range newCRD.Spec.Versions {
			if nv.Name == v && nv.Served {
				return v
			}
		}
	}
	return preferred(newCRD)
}
