package watcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/watcher/internal/watchstream"
)

// startMode says what a watch does with the objects of its initial list.
type startMode int

const (
	// quietStart: the objects are the baseline; nothing is delivered for
	// them (or Created changes marked Initial, with Config.InitialSync).
	quietStart startMode = iota
	// baselineStart: the objects are compared with a baseline (the cache
	// of a previous version of the resource, or of a previous run): new
	// ones are Created, changed ones Updated, missing ones Deleted. A
	// resource that appears while the watcher runs starts this way with an
	// empty baseline, so objects created with a brand-new CRD are reported.
	baselineStart
	// replayStart: the previous run handled every change up to its
	// watermark (resume): the first list is served at that resourceVersion
	// and its objects are the baseline, and the watch from there replays
	// every write since, each its own change. When the apiserver can no
	// longer serve that resourceVersion the watch starts as baselineStart
	// against the objects the previous run recorded.
	replayStart
)

// resourceWatch is the informer of one resource: a reflector, its cache of
// Objects (objectStore) and the glue that turns its events into pending
// changes. Handlers run synchronously in the reflector's goroutine, after
// the cache is updated, so the cache and the changes handed on never
// disagree.
type resourceWatch struct {
	res      change.Resource
	typ      *objectType
	fromList *objectType // typ, for objects decoded from a list
	foreign  *objectType // for other shards' objects
	w        *Watcher
	// events are the resource's series of events_total, each made at
	// its first event (thousands of resources hold few objects, and
	// each series costs memory) and kept for the hot path; only the
	// informer's goroutine, and the watcher's once it stopped, emit.
	events map[change.Type]prometheus.Counter
	store  *objectStore
	// client lists the resource (in namespace, when not ""); watches go
	// through the watcher's stream client.
	client    dynamic.ResourceInterface
	namespace string
	// metaOnly: the informer delivers nothing, it follows the resource
	// for the watcher (CRDs, APIServices): its watch carries the objects'
	// metadata only (PartialObjectMetadata).
	metaOnly bool
	// source fills the store until its context ends: listAndWatch (a
	// benchmark puts a fake in).
	source  source
	deliver atomic.Bool     // hand changes to the watcher's handler
	observe func(c *Change) // internal observer (CRD tracking), may be nil
	// listed is the last list that filled the cache (nil before the
	// first one completes).
	listed atomic.Pointer[listMark]
	track  *tracker // the watermark of this informer's key
	// waited counts the seconds the gate (objectStore.admit) held the
	// watch stream (made at the first wait).
	waited prometheus.Counter
	// lists and watches count the requests (the watcher's, shared).
	lists, watches prometheus.Counter

	mode    startMode
	covered func(namespace string) bool // baselineStart: the namespaces base covers; nil for all
	// listObserved is how the changes the initial list finds are
	// observed: ObservedRestart against the restart baseline,
	// ObservedRelist against the cache of a previous informer.
	listObserved change.Observed
	record       bool // with a Store: record the initial objects that are not news
	// resume is, for replayStart, the resourceVersion to list at until
	// the first list succeeded (the informer's goroutine's alone).
	resume string
	// resuming is set from a replay's list at the watermark until its
	// watch delivers something: a relist meanwhile (the apiserver no
	// longer had the writes since) finds what changed while no process
	// watched.
	resuming  atomic.Bool
	initialMu sync.Mutex
	baseline  map[types.UID]*Object // baselineStart: not yet seen
	cancel    context.CancelFunc
	done      chan struct{}
	// stopped is set once stop returned: errors of requests still under
	// way are not counted (errMu).
	errMu   sync.Mutex
	stopped bool
}

// newResourceWatch builds the informer for res; run starts it.
func newResourceWatch(w *Watcher, res change.Resource, namespace string, proj change.Projection) *resourceWatch {
	typ := &objectType{
		gvk:        groupVersion(res).WithKind(res.Kind),
		apiVersion: res.APIVersion(),
		projection: proj,
		dict:       &packDict{},
	}
	foreign := *typ
	foreign.foreign = true
	listed := *typ
	listed.listed = true
	rw := &resourceWatch{
		res:      res,
		w:        w,
		typ:      typ,
		fromList: &listed,
		foreign:  &foreign,
		done:     make(chan struct{}),
		events:   map[change.Type]prometheus.Counter{},
		track:    w.tracker(watchKey{gvr(res), namespace}),
		lists:    w.metrics.requests.WithLabelValues("list"),
		watches:  w.metrics.requests.WithLabelValues("watch"),
	}
	dyn := w.dyn
	if w.streams != nil {
		// Informers list as they watch, without client-side throttling.
		dyn = dynamic.New(w.streams)
	}
	rw.client = dynamic.ResourceInterface(dyn.Resource(gvr(res)))
	if namespace != "" {
		rw.client = dyn.Resource(gvr(res)).Namespace(namespace)
	}
	rw.namespace = namespace
	rw.store = newObjectStore(rw)
	rw.source = rw.listAndWatch
	return rw
}

// list lists the resource. The first list of a replay is served at the
// previous run's watermark; when the apiserver no longer can (compacted,
// or a resourceVersion it does not know), the informer starts against
// the recorded objects instead, with a list of now.
func (rw *resourceWatch) list(ctx context.Context, client dynamic.ResourceInterface, opts metav1.ListOptions) (*unstructured.UnstructuredList, error) {
	if rw.resume == "" || opts.Continue != "" {
		return client.List(ctx, opts)
	}
	err := rw.notAhead(ctx, client, opts)
	switch {
	case err != nil && !cannotReplay(err):
		return nil, err // the reflector retries
	case err == nil:
		at := opts
		at.ResourceVersion, at.ResourceVersionMatch = rw.resume, metav1.ResourceVersionMatchExact
		var list *unstructured.UnstructuredList
		list, err = client.List(ctx, at)
		if err == nil {
			rw.resuming.Store(true)
			rw.track.replayed(rw.resume)
		}
		if err == nil || !cannotReplay(err) {
			return list, err // another error: the reflector retries
		}
	}
	rw.w.log.Warn("the apiserver cannot replay the writes since the previous run's watermark: comparing with the objects it recorded (what changed comes as each object's net effect)",
		"gvr", rw.res.String(), "resourceVersion", rw.resume, "error", err)
	rw.w.baseline.replays.WithLabelValues("compared").Inc()
	rw.resume = ""
	rw.initialMu.Lock()
	rw.mode = baselineStart
	rw.initialMu.Unlock()
	return client.List(ctx, opts)
}

// errAhead says that the watermark to replay from is ahead of the
// apiserver (etcd restored from an older backup, say).
var errAhead = errors.New("the watermark is ahead of the apiserver's resourceVersion")

// notAhead checks that the watermark to replay from is not ahead of the
// apiserver, with a list of one object: the apiserver would wait for a
// resourceVersion it has not reached, and the client retry, for tens of
// seconds before refusing it. It returns errAhead when it is; other errors
// as they come.
func (rw *resourceWatch) notAhead(ctx context.Context, client dynamic.ResourceInterface, opts metav1.ListOptions) error {
	probe := metav1.ListOptions{LabelSelector: opts.LabelSelector, FieldSelector: opts.FieldSelector, Limit: 1}
	list, err := client.List(ctx, probe)
	if err != nil {
		return err
	}
	now, err1 := strconv.ParseUint(list.GetResourceVersion(), 10, 64)
	at, err2 := strconv.ParseUint(rw.resume, 10, 64)
	if err1 == nil && err2 == nil && at > now {
		return fmt.Errorf("%w (%s > %s)", errAhead, rw.resume, list.GetResourceVersion())
	}
	return nil
}

// cannotReplay reports whether a list at a resourceVersion failed because
// the apiserver cannot serve it (so that retrying is useless).
func cannotReplay(err error) bool {
	return errors.Is(err, errAhead) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) || apierrors.IsBadRequest(err) || apierrors.IsInvalid(err) ||
		apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge)
}

// listMark is a list that filled the cache: when it started and the
// resourceVersion it was served at.
type listMark struct {
	at              time.Time
	resourceVersion string
}

// storeRV returns the resourceVersion the informer's cache is at.
func (rw *resourceWatch) storeRV() string { return rw.store.lastRV() }

// observeError reacts to list/watch errors: a resource that is gone
// (its CRD deleted) makes the watcher rediscover at once rather than let the
// reflector retry against a 404.
func (rw *resourceWatch) observeError(err error) {
	if err == nil {
		return
	}
	rw.errMu.Lock()
	defer rw.errMu.Unlock()
	if rw.stopped {
		// A list the reflector left running when it stopped: no news,
		// and its resource's series may be gone already.
		return
	}
	rw.w.metrics.listWatchErrors.WithLabelValues(rw.res.String()).Inc()
	switch {
	case apierrors.IsForbidden(err):
		rw.w.markForbidden(rw.res, err)
	case apierrors.IsNotFound(err), apierrors.IsMethodNotSupported(err):
		rw.w.triggerDiscovery()
	}
}

// run runs the informer until ctx ends, in one goroutine.
func (rw *resourceWatch) run(ctx context.Context) {
	rw.track.restart()
	ctx, rw.cancel = context.WithCancel(ctx)
	rw.store.ctx = ctx
	go func() {
		defer close(rw.done)
		rw.source(ctx)
	}()
}

// stop stops the informer and waits until its handlers have returned.
func (rw *resourceWatch) stop() {
	rw.cancel()
	<-rw.done
	rw.errMu.Lock()
	rw.stopped = true
	rw.errMu.Unlock()
	rw.track.stopped()
}

// hasSynced reports whether the initial list has been processed.
func (rw *resourceWatch) hasSynced() bool { return rw.store.synced.Load() }

// finishInitial reports, once the initial list is handed on, the baseline
// objects that were not in it as deleted.
func (rw *resourceWatch) finishInitial() {
	rw.initialMu.Lock()
	defer rw.initialMu.Unlock()
	if rw.mode == replayStart {
		// The list at the watermark went through: the recorded objects
		// are not needed, the watch replays what happened to them.
		rw.baseline = nil
		rw.w.baseline.replays.WithLabelValues("replayed").Inc()
	}
	for _, old := range rw.baseline {
		rw.emit(&Change{Type: change.Deleted, Resource: rw.res, Old: old, Listed: true, Observed: rw.listObserved, Time: time.Now()}, boundCache)
	}
	rw.baseline = nil
	rw.track.initialDone()
}

// project turns a decoded object into its compact, projected form before
// the informer caches it; listed says it came from a list (or a
// watch-list's initial events). Objects already projected pass through (a
// watch-list's, projected by the reflector's store of its initial events).
func (rw *resourceWatch) project(obj any, listed bool) (*Object, error) {
	switch o := obj.(type) {
	case *Object:
		return o, nil
	case watchstream.RawObject:
		m, err := watchstream.DecodeProjected(rw.typ.projection, o)
		if err != nil {
			return nil, fmt.Errorf("decode an object of %s: %w", rw.res, err)
		}
		return rw.project(&unstructured.Unstructured{Object: m}, listed)
	case *unstructured.Unstructured:
		typ := rw.typ
		if listed {
			typ = rw.fromList
		}
		if shard := rw.w.cfg.Shard; shard.enabled() && !shard.ServerSide && !shard.owns(o.GetUID()) {
			// Another replica's object: keep only what the cache
			// needs to key it.
			f := &Object{ns: intern(o.GetNamespace()), name: o.GetName(),
				resourceVersion: o.GetResourceVersion(), typ: rw.foreign}
			f.setUID(o.GetUID())
			return f, nil
		}
		return newObject(o.Object, typ)
	default:
		return nil, errUnexpected(rw.res, obj)
	}
}

// OnAdd implements cache.ResourceEventHandler.
func (rw *resourceWatch) OnAdd(obj any, isInInitialList bool) {
	o, ok := obj.(*Object)
	if !ok {
		rw.w.unexpected(rw.res, obj)
		return
	}
	if !isInInitialList {
		rw.added(o, "")
		return
	}
	defer rw.observed(o.resourceVersion, isInInitialList)
	rw.initialMu.Lock()
	mode := rw.mode
	rw.initialMu.Unlock()
	switch mode {
	case replayStart:
		// At or below the watermark: handled by the previous run.
	case quietStart:
		switch {
		case rw.w.cfg.InitialSync:
			rw.emit(&Change{Type: change.Created, Resource: rw.res, New: o, Initial: true, Listed: true, Observed: change.ObservedRestart, Time: time.Now()}, boundObject)
		default:
			rw.notNews(o)
		}
	case baselineStart:
		rw.initialMu.Lock()
		old, found := rw.baseline[o.GetUID()]
		delete(rw.baseline, o.GetUID())
		rw.initialMu.Unlock()
		switch {
		case !found && rw.covered != nil && !rw.covered(o.GetNamespace()):
			// Not watched by the previous run: not news.
			rw.notNews(o)
		case !found:
			rw.emit(&Change{Type: change.Created, Resource: rw.res, New: o, Listed: true, Observed: rw.listObserved, Time: time.Now()}, boundObject)
		case old.resourceVersion != o.resourceVersion:
			if st := rw.w.cfg.Store; st != nil {
				old = unhash(st.salt, old, o) // a baseline's hashed values
			}
			if !sameUnder(old, o) {
				rw.emit(&Change{Type: change.Updated, Resource: rw.res, Old: old, New: o, Listed: true, Observed: rw.listObserved, Time: time.Now()}, boundObject)
			}
		}
	}
}

// added hands on the creation of o outside the initial list; hash is the
// content hash of the watch event's object, if taken.
func (rw *resourceWatch) added(o *Object, hash string) {
	defer rw.observed(o.resourceVersion, false)
	rw.emit(&Change{Type: change.Created, Resource: rw.res, New: o, Listed: o.typ.listed, Observed: rw.observedAs(o), Time: time.Now(), contentHash: hash}, boundObject)
}

// notNews takes an object of the initial list that has no baseline as it
// is. A leader records it as handled. A standby cannot tell whether the
// leader handled its last change: it waits as an uncertain Created change
// until the leader's watermark passes the object's resourceVersion.
func (rw *resourceWatch) notNews(o *Object) {
	switch {
	case o.typ.foreign:
	case rw.w.standby.Load() && rw.deliver.Load():
		rw.emit(&Change{Type: change.Created, Resource: rw.res, New: o, Listed: true, Observed: change.ObservedTakeover, Time: time.Now(), uncertain: true}, boundObject)
	case rw.record:
		rw.w.cfg.Store.put(rw.res, o)
	}
}

// OnUpdate implements cache.ResourceEventHandler.
func (rw *resourceWatch) OnUpdate(oldObj, newObj any) {
	old, ok1 := oldObj.(*Object)
	o, ok2 := newObj.(*Object)
	if !ok1 || !ok2 {
		rw.w.unexpected(rw.res, newObj)
		return
	}
	rw.updated(old, o, "")
}

// updated hands on the change of an object from old to o; hash is the
// content hash of the watch event's object, if taken.
func (rw *resourceWatch) updated(old, o *Object, hash string) {
	defer rw.observed(o.resourceVersion, false)
	if old.resourceVersion == o.resourceVersion {
		return // a relist that found the object unchanged
	}
	if !old.sameUID(o) {
		// A relist after a disconnection found another object under the
		// same name: the first was deleted, the second created.
		rw.emit(&Change{Type: change.Deleted, Resource: rw.res, Old: old, Listed: true, Observed: rw.relisted(), Time: time.Now()}, boundCache)
		rw.emit(&Change{Type: change.Created, Resource: rw.res, New: o, Listed: true, Observed: rw.relisted(), Time: time.Now()}, boundObject)
		return
	}
	rw.emit(&Change{Type: change.Updated, Resource: rw.res, Old: old, New: o, Listed: o.typ.listed, Observed: rw.observedAs(o), Time: time.Now(), contentHash: hash}, boundObject)
}

// OnDelete implements cache.ResourceEventHandler.
func (rw *resourceWatch) OnDelete(obj any) { rw.deleted(obj, "") }

// deleted hands on the deletion of obj (an Object, or a tombstone);
// prevRV is the resourceVersion the cache had for it before a watch
// event deleted it.
func (rw *resourceWatch) deleted(obj any, prevRV string) {
	bound := boundObject // a watch event: the deletion's resourceVersion
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		// The watch missed the deletion; the tombstone carries the last
		// state the cache had.
		obj = tomb.Obj
		bound = boundCache
		rw.w.metrics.tombstones.WithLabelValues(rw.res.String()).Inc()
	}
	o, ok := obj.(*Object)
	if !ok {
		rw.w.unexpected(rw.res, obj)
		return
	}
	objRV := o.resourceVersion
	if bound == boundCache {
		objRV = "" // not the deletion's
	}
	defer rw.observed(objRV, false)
	// A tombstone: the deletion was seen only as a missing object.
	observed := change.ObservedWatch
	if bound == boundCache {
		observed = rw.relisted()
	}
	rw.emit(&Change{Type: change.Deleted, Resource: rw.res, Old: o, Listed: bound == boundCache, Observed: observed, Time: time.Now(), prevRV: prevRV}, bound)
}

// observedAs says how a change to o, outside the initial list, was
// observed: from a list (a relist) or from a watch event.
func (rw *resourceWatch) observedAs(o *Object) change.Observed {
	if o.typ.listed {
		return rw.relisted()
	}
	return change.ObservedWatch
}

// relisted says how a change a relist found was observed: as a restart
// when the relist came before a replay's watch delivered anything.
func (rw *resourceWatch) relisted() change.Observed {
	if rw.resuming.Load() {
		return change.ObservedRestart
	}
	return change.ObservedRelist
}

// observed tells the tracker a callback for an object of resourceVersion
// objRV is over.
func (rw *resourceWatch) observed(objRV string, initial bool) {
	if rw.track != nil {
		rw.track.observed(rw.storeRV(), objRV, initial)
	}
}

// boundKind says what resourceVersion bounds a change from above, for a
// standby to confirm it with the leader's watermark.
type boundKind int

const (
	// boundObject: the object's own (New's, or Old's for a deletion the
	// watch reported, which carries the deletion's).
	boundObject boundKind = iota
	// boundCache: the cache's, for a deletion learned from a list.
	boundCache
	// boundNever: none; the change is never confirmed (its resource is
	// gone: no watermark covers it).
	boundNever
)

// emit hands c to the internal observer and, when the resource is
// selected, to the work queue, with its mark in the tracker.
func (rw *resourceWatch) emit(c *Change, bound boundKind) {
	ev := rw.events[c.Type]
	if ev == nil {
		ev = rw.w.metrics.events.WithLabelValues(rw.res.Group, rw.res.Version, rw.res.Resource, string(c.Type))
		rw.events[c.Type] = ev
	}
	ev.Inc()
	if rw.observe != nil {
		rw.observe(c)
	}
	if rw.deliver.Load() {
		rw.w.enqueue(c, rw, bound)
	}
}

// objects returns the cached objects by UID.
func (rw *resourceWatch) objects() map[types.UID]*Object {
	items := rw.store.list()
	m := make(map[types.UID]*Object, len(items))
	for _, o := range items {
		m[o.GetUID()] = o
	}
	return m
}

// sameUnder reports whether old and o carry the same content when both are
// seen through the narrower of their projections (a changed rules file may
// have widened what is kept; fields that were not kept before cannot be
// said to have changed).
func sameUnder(old, o *Object) bool {
	if old.typ.projection.Equal(o.typ.projection) {
		return old.sameContent(o)
	}
	both := func(x *Object) string {
		b, _ := json.Marshal(project(old.typ.projection, project(o.typ.projection, x.Map())))
		return string(b)
	}
	return both(old) == both(o)
}
