package watcher

import (
	"context"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/fieldwatch/fieldwatch/change"
)

// forbiddenRetry is how long a resource the watcher may not list stays
// unwatched before the watcher tries again.
const forbiddenRetry = 5 * time.Minute

// startCRDWatch starts following CRDs before the first discovery, so that
// discovery can tell custom resources apart. Without permission to list
// CRDs the watcher guesses from group names and rediscovers on a timer only.
func (w *Watcher) startCRDWatch(ctx context.Context) {
	if !w.canList(ctx, crdResource) {
		w.log.Warn("cannot list CustomResourceDefinitions; new CRDs are found by periodic discovery only",
			"every", w.cfg.RediscoveryInterval)
		return
	}
	rw := w.startWatch(ctx, crdResource, "", change.Projection{}, false, false, start{mode: quietStart})
	w.crds = rw
	cache.WaitForCacheSync(ctx.Done(), rw.hasSynced)
}

// startFollowingAPIServices decides whether the watcher follows APIServices, so
// that an aggregated API becoming available (or going) is rediscovered at
// once rather than at the next periodic discovery.
func (w *Watcher) startFollowingAPIServices(ctx context.Context) {
	w.followAPIServices = w.canList(ctx, apiServiceResource)
	if !w.followAPIServices {
		w.log.Info("cannot list APIServices; aggregated APIs are found by periodic discovery",
			"every", w.cfg.RediscoveryInterval)
	}
}

// canList reports whether the watcher may list res.
func (w *Watcher) canList(ctx context.Context, res change.Resource) bool {
	_, err := w.dyn.Resource(gvr(res)).List(ctx, metav1.ListOptions{Limit: 1})
	return !apierrors.IsForbidden(err) && !apierrors.IsNotFound(err)
}

// want is what reconcile wants watched for one resource.
type want struct {
	res     change.Resource
	deliver bool
	// cached: Config.Cache selects the resource, whose objects are kept
	// as the projection says even when no change is delivered.
	cached   bool
	proj     change.Projection
	internal bool // followed to keep discovery current
	// namespace is the one namespace this informer lists and watches; ""
	// for all namespaces (and for cluster-scoped resources).
	namespace string
}

// watchKey identifies one informer: a resource at one version, in one
// namespace or in all ("").
type watchKey struct {
	gvr       schema.GroupVersionResource
	namespace string
}

// handoverKey identifies a cache handed from an informer to its successor
// (another version of the resource, a new projection).
type handoverKey struct {
	gr        schema.GroupResource
	namespace string
}

// reconcile runs discovery and brings the informers in line with it and
// with the selectors: it starts informers for new resources, stops those of
// resources that are gone or no longer selected, and restarts those whose
// projection changed. Resources of group versions whose discovery failed
// are unknown, not gone: their informers keep running.
//
// Only the goroutine of Run calls it. It holds w.mu only to read the
// selectors and to change the watches map, never while an informer stops
// or the Store is read: readers of the watches see the old informer until
// the new one replaces it (or it is gone).
func (w *Watcher) reconcile(ctx context.Context) error {
	defer prometheus.NewTimer(w.metrics.discoveryPass).ObserveDuration()
	d, err := discover(w.disc, w.customResources())
	if err != nil {
		return err
	}
	w.noteFailures(d.failed)

	w.mu.Lock()
	wants := w.wants(d.resources)
	w.mu.Unlock()
	served := map[schema.GroupResource]bool{}
	for _, r := range d.resources {
		served[groupResource(r)] = true
	}

	handover := map[handoverKey]map[types.UID]*Object{}
	loaded := recorded{} // the Store's objects, read once per resource
	if w.cfg.Store != nil && !w.started.Load() {
		// Before any informer records anything.
		w.pruneStore(wants, loaded)
	}
	var stopped []change.Resource
	for key, rw := range w.watches {
		if _, ok := wants[key]; ok || d.failed[key.gvr.GroupVersion()] != nil {
			continue
		}
		stopped = append(stopped, rw.res)
		gr := key.gvr.GroupResource()
		if w.stopping != nil && !served[gr] {
			w.stopping(rw.res)
		}
		rw.stop()
		rw.track.setActive(false)
		w.mu.Lock()
		delete(w.watches, key)
		w.mu.Unlock()
		switch {
		case served[gr]:
			// Another version took over, or the rules no longer select
			// the resource (in this namespace): the successor, if any,
			// compares with this.
			handover[handoverKey{gr, key.namespace}] = rw.objects()
			w.log.Info("stopped watching", "gvr", rw.res.String(), "namespace", key.namespace)
		default:
			// The resource is gone (its CRD deleted): whatever the cache
			// still holds was deleted with it.
			w.log.Info("resource no longer served; stopped watching", "gvr", rw.res.String())
			if rw.deliver.Load() {
				for _, o := range rw.objects() {
					rw.emit(&Change{Type: change.Deleted, Resource: rw.res, Old: o, Observed: change.ObservedRelist, Time: time.Now()}, boundNever)
				}
			}
		}
	}

	for key, wt := range wants {
		rw := w.watches[key]
		if rw != nil && rw.typ.projection.Equal(wt.proj) && rw.metaOnly == (!wt.deliver && !wt.cached) {
			rw.deliver.Store(wt.deliver)
			rw.track.setActive(wt.deliver)
			continue
		}
		gr := key.gvr.GroupResource()
		var st start
		switch {
		case rw != nil:
			// The projection changed: the new informer takes over from
			// the old one's cache.
			st = start{mode: baselineStart, base: rw.objects()}
			rw.stop()
		case handover[handoverKey{gr, key.namespace}] != nil:
			st = start{mode: baselineStart, base: handover[handoverKey{gr, key.namespace}]}
		case w.cfg.Store != nil && wt.deliver && !w.started.Load():
			st = w.storedBaseline(wt.res, key.namespace, loaded)
		case !w.started.Load() || w.known[gr] || w.everFailed[key.gvr.GroupVersion()]:
			// At start, or a resource that existed before (newly
			// selected, or an aggregated API back): its objects are not
			// news.
			st = start{mode: quietStart}
		default:
			// A resource that did not exist before (a new CRD): every
			// object of it is new.
			st = start{mode: baselineStart, base: map[types.UID]*Object{}}
		}
		nrw := w.startWatch(ctx, wt.res, key.namespace, wt.proj, wt.deliver, wt.cached, st)
		if key.gvr == gvr(crdResource) {
			w.crds = nrw
		}
		w.log.Info("watching", "gvr", wt.res.String(), "namespace", key.namespace, "custom", wt.res.Custom, "deliver", wt.deliver)
	}

	if w.cfg.Store != nil {
		w.syncStore(served, d.failed, wants)
	}
	w.forgetSeries(stopped, d)
	for _, r := range d.resources {
		w.known[groupResource(r)] = true
	}
	w.metrics.resources.Set(float64(len(w.resources())))
	w.passes.Add(1)
	return nil
}

// forgetSeries deletes the metric series of the resources whose
// informers reconcile stopped and that no informer watches any more (a
// deleted CRD's, a resource the rules no longer select), and those of the
// discovery failures of group versions that are gone: without it every
// CRD ever watched kept its series until the process ended.
func (w *Watcher) forgetSeries(stopped []change.Resource, d discovered) {
	watched := map[schema.GroupVersionResource]bool{}
	for key := range w.watches {
		watched[key.gvr] = true
	}
	for _, res := range stopped {
		if !watched[gvr(res)] {
			w.metrics.forget(res)
		}
	}
	served := map[schema.GroupVersion]bool{}
	for _, r := range d.resources {
		served[gvr(r).GroupVersion()] = true
	}
	for gv := range w.everFailed {
		if d.failed[gv] == nil && !served[gv] {
			w.metrics.discoveryFails.DeleteLabelValues(gv.String())
		}
	}
}

// wants lists the informers to run: the selected resources (one informer
// per namespace when every rule on the resource names its namespaces), and
// the resources the watcher follows for itself. w.mu must be held.
func (w *Watcher) wants(resources []change.Resource) map[watchKey]*want {
	out := map[watchKey]*want{}
	for _, r := range resources {
		if w.isForbidden(gvr(r)) {
			continue
		}
		// Confined to namespaces, the watcher reads no cluster-scoped
		// resource but those it follows for itself.
		confined := w.cfg.Confine == nil || r.Namespaced
		sel := change.Selected(w.selectors, r) && confined
		cached := change.Selected(w.cache, r) && confined
		internal := (gvr(r) == gvr(crdResource) && w.crds != nil) ||
			(gvr(r) == gvr(apiServiceResource) && w.followAPIServices)
		if !sel && !cached && !internal {
			continue
		}
		var proj change.Projection // internal only: identity (metaOnly)
		if sel || cached {
			proj = w.projection(r)
		}
		namespaces := []string{""}
		if (sel || cached) && !internal && r.Namespaced {
			namespaces = w.namespacesOf(r)
		}
		for _, ns := range namespaces {
			out[watchKey{gvr(r), ns}] = &want{res: r, deliver: sel, cached: cached, proj: proj, internal: internal, namespace: ns}
		}
	}
	return out
}

// namespacesOf returns the namespaces to watch the selected namespaced
// resource r in: [""] for all, those Config.Namespaces gives, and when
// the watcher is confined (Config.Confine) those of them it is confined
// to, every one of those when Namespaces gives none. It may return none:
// r is then not watched. w.mu must be held.
func (w *Watcher) namespacesOf(r change.Resource) []string {
	var ns []string
	if w.namespaces != nil {
		ns = w.namespaces(r)
	}
	confine := w.cfg.Confine
	switch {
	case confine == nil && len(ns) == 0:
		return []string{""}
	case confine == nil:
		return ns
	case len(ns) == 0:
		return confine
	}
	return slices.DeleteFunc(slices.Clone(ns), func(n string) bool { return !slices.Contains(confine, n) })
}

// startWatch starts an informer for res in namespace ("" for all), in
// place of the one there was for that key. Only the goroutine of Run calls
// it.
func (w *Watcher) startWatch(ctx context.Context, res change.Resource, namespace string, proj change.Projection, deliver, cached bool, st start) *resourceWatch {
	rw := newResourceWatch(w, res, namespace, proj)
	// What the watcher follows for itself (CRDs, APIServices) and no
	// rule reads needs their names only: their watch carries metadata,
	// so that the schemas of thousands of CRDs are neither sent nor read
	// before the first discovery (`make bench -sections crds`).
	rw.metaOnly = !deliver && !cached
	rw.deliver.Store(deliver)
	rw.track.setActive(deliver)
	rw.mode = st.mode
	rw.baseline = st.base
	rw.covered = st.covered
	rw.listObserved = st.observed
	rw.resume = st.resume
	if rw.listObserved == "" {
		rw.listObserved = change.ObservedRelist
	}
	rw.record = w.cfg.Store != nil && deliver && st.mode != replayStart && (st.mode == quietStart || st.covered != nil)
	if w.cfg.Store != nil && deliver {
		if err := w.cfg.Store.track(res); err != nil {
			w.log.Error("cannot record a resource in the baseline", "gvr", res.String(), "error", err)
		}
	}
	if gvr(res) == gvr(crdResource) || gvr(res) == gvr(apiServiceResource) {
		rw.observe = func(*Change) { w.triggerDiscovery() }
	}
	rw.run(ctx)
	w.mu.Lock()
	w.watches[watchKey{gvr(res), namespace}] = rw
	w.mu.Unlock()
	return rw
}

// noteFailures logs and counts group versions whose discovery failed, and
// logs those that recovered.
func (w *Watcher) noteFailures(failed map[schema.GroupVersion]error) {
	for gv, err := range failed {
		w.metrics.discoveryFails.WithLabelValues(gv.String()).Inc()
		if !w.failedGV[gv] {
			w.log.Warn("discovery of a group version failed; its resources keep their informers and it is retried",
				"groupVersion", gv.String(), "error", err, "retry", w.cfg.RediscoveryInterval)
		}
		w.failedGV[gv] = true
		w.everFailed[gv] = true
	}
	for gv := range w.failedGV {
		if _, still := failed[gv]; !still {
			w.log.Info("discovery of a group version recovered", "groupVersion", gv.String())
			delete(w.failedGV, gv)
		}
	}
}

// markForbidden stops watching a resource the watcher may not list, for a
// while, instead of letting its informer fail forever (and readiness wait
// for it).
func (w *Watcher) markForbidden(res change.Resource, err error) {
	w.forbiddenMu.Lock()
	_, already := w.forbiddenSince[gvr(res)]
	w.forbiddenSince[gvr(res)] = time.Now()
	w.forbiddenMu.Unlock()
	if !already {
		w.log.Error("not allowed to list or watch a selected resource; it is not watched (grant get/list/watch, see `fieldwatch rbac`)",
			"gvr", res.String(), "error", err, "retry", forbiddenRetry)
	}
	w.triggerDiscovery()
}

// isForbidden reports whether gvr was found forbidden recently.
func (w *Watcher) isForbidden(gvr schema.GroupVersionResource) bool {
	w.forbiddenMu.Lock()
	defer w.forbiddenMu.Unlock()
	since, ok := w.forbiddenSince[gvr]
	return ok && time.Since(since) < forbiddenRetry
}

// storedBaseline decides how a resource starts at process start when there
// is a Store: against the objects recorded by the previous run; with an
// empty baseline (every object is new) when the resource appeared while
// the watcher was down; quietly (the objects become the baseline) on the
// very first run or when the previous run did not watch it.
func (w *Watcher) storedBaseline(res change.Resource, namespace string, loaded recorded) start {
	store, gr := w.cfg.Store, groupResource(res)
	switch {
	case store.hasResource(gr):
		prev, err := store.scope(gr)
		if err != nil {
			w.log.Error("cannot read the baseline of a resource; starting it without one", "gvr", res.String(), "error", err)
			return start{mode: quietStart}
		}
		if namespace != "" && prev != nil && !slices.Contains(prev, namespace) {
			w.log.Info("namespace not watched by the previous run: its objects are the baseline", "gvr", res.String(), "namespace", namespace)
			return start{mode: quietStart}
		}
		base, err := loaded.get(store, gr, res)
		if err != nil {
			w.log.Error("cannot read the baseline of a resource; starting it without one", "gvr", res.String(), "error", err)
			return start{mode: quietStart}
		}
		if namespace != "" {
			// One informer per namespace: each gets its own part.
			part := map[types.UID]*Object{}
			for uid, o := range base {
				if o.GetNamespace() == namespace {
					part[uid] = o
				}
			}
			base = part
		}
		st := start{mode: baselineStart, base: base, observed: change.ObservedRestart}
		if rv := store.resumeFrom(watchKey{gvr(res), namespace}.watermarkKey()); rv != "" {
			// The base stays for when the apiserver cannot replay.
			w.log.Info("replaying the writes since the previous run's watermark", "gvr", res.String(), "namespace", namespace, "resourceVersion", rv)
			st.mode, st.resume = replayStart, rv
			return st
		}
		w.log.Info("comparing with the baseline of the previous run", "gvr", res.String(), "namespace", namespace, "objects", len(base))
		if namespace == "" && prev != nil {
			// Watched everywhere now, in some namespaces before: objects
			// of the others are not news.
			st.covered = func(ns string) bool { return slices.Contains(prev, ns) }
		}
		return st
	case !store.firstRun() && !store.wasKnown(gr):
		w.log.Info("resource appeared while fieldwatch was down: its objects are new", "gvr", res.String())
		return start{mode: baselineStart, base: map[types.UID]*Object{}, observed: change.ObservedRestart}
	}
	return start{mode: quietStart}
}

// syncStore keeps the Store in step with discovery: resources recorded
// but no longer served (their CRD deleted, maybe while the watcher was
// down) report their objects deleted; resources no longer selected are
// forgotten; the served set is remembered for the next run.
func (w *Watcher) syncStore(served map[schema.GroupResource]bool, failed map[schema.GroupVersion]error, wants map[watchKey]*want) {
	store := w.cfg.Store
	stored, err := store.resources()
	if err != nil {
		w.log.Error("cannot read the baseline's resources", "error", err)
		return
	}
	selected := map[schema.GroupResource]bool{}
	for gr, sc := range watchedNamespaces(wants) {
		selected[gr] = true
		if err := store.setScope(sc.res, sc.namespaces); err != nil {
			w.log.Error("cannot record the namespaces of a resource in the baseline", "gvr", sc.res.String(), "error", err)
		}
	}
	for gr, res := range stored {
		switch {
		case selected[gr], failed[groupVersion(res)] != nil:
		case served[gr]:
			if err := store.dropResource(gr); err != nil {
				w.log.Error("cannot forget a resource in the baseline", "gvr", res.String(), "error", err)
			}
		case !w.gone[gr]:
			objs, err := store.load(gr, res)
			if err != nil {
				w.log.Error("cannot read the baseline of a vanished resource", "gvr", res.String(), "error", err)
				continue
			}
			w.gone[gr] = true
			w.log.Info("resource gone since the last run: its recorded objects were deleted", "gvr", res.String(), "objects", len(objs))
			for _, o := range objs {
				w.enqueue(&Change{Type: change.Deleted, Resource: res, Old: o, Observed: change.ObservedRestart, Time: time.Now()}, nil, boundNever)
			}
		}
	}
	if !sameSet(served, w.storedKnown) {
		if err := store.setKnown(served); err != nil {
			w.log.Error("cannot record the served resources in the baseline", "error", err)
			return
		}
		w.storedKnown = served
	}
}

// scope is the namespaces a selected resource is watched in (nil: all).
type scope struct {
	res        change.Resource
	namespaces []string
}

// watchedNamespaces returns the scope of each selected resource.
func watchedNamespaces(wants map[watchKey]*want) map[schema.GroupResource]*scope {
	out := map[schema.GroupResource]*scope{}
	for key, wt := range wants {
		if !wt.deliver {
			continue
		}
		gr := key.gvr.GroupResource()
		if out[gr] == nil {
			out[gr] = &scope{res: wt.res}
		}
		if key.namespace != "" {
			out[gr].namespaces = append(out[gr].namespaces, key.namespace)
		}
	}
	for _, sc := range out {
		slices.Sort(sc.namespaces)
	}
	return out
}

// pruneStore forgets, at start and before any informer runs, the recorded
// objects of namespaces a resource is not watched in now, or was not
// watched in by the previous run (left over from an earlier one): they
// would otherwise be taken for changes when those namespaces are watched.
func (w *Watcher) pruneStore(wants map[watchKey]*want, loaded recorded) {
	store := w.cfg.Store
	for gr, sc := range watchedNamespaces(wants) {
		if sc.namespaces == nil || !store.hasResource(gr) {
			// Watched everywhere: the previous run recorded only what
			// it watched.
			continue
		}
		prev, err := store.scope(gr)
		if err != nil {
			w.log.Error("cannot read the baseline of a resource", "gvr", sc.res.String(), "error", err)
			continue
		}
		objs, err := loaded.get(store, gr, sc.res)
		if err != nil {
			w.log.Error("cannot read the baseline of a resource", "gvr", sc.res.String(), "error", err)
			continue
		}
		for uid, o := range objs {
			if !slices.Contains(sc.namespaces, o.GetNamespace()) || prev != nil && !slices.Contains(prev, o.GetNamespace()) {
				store.remove(sc.res, uid)
			}
		}
	}
}

// start is how an informer starts: quietly, or against a baseline; covered,
// when set, says which namespaces the baseline covers (objects of the
// others are not news).
type start struct {
	mode    startMode
	base    map[types.UID]*Object
	covered func(namespace string) bool
	// observed is how the changes found against base are observed
	// (default ObservedRelist: base is what an informer held).
	observed change.Observed
	// resume is replayStart's resourceVersion.
	resume string
}

func sameSet[K comparable](a, b map[K]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// recorded holds the objects read from the Store during one discovery
// pass, so that a resource watched in several namespaces is read once.
type recorded map[schema.GroupResource]map[types.UID]*Object

func (r recorded) get(store *Store, gr schema.GroupResource, res change.Resource) (map[types.UID]*Object, error) {
	if objs, ok := r[gr]; ok {
		return objs, nil
	}
	objs, err := store.load(gr, res)
	if err == nil {
		r[gr] = objs
	}
	return objs, err
}
