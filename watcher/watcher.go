package watcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"k8s.io/client-go/util/workqueue"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/watcher/internal/watchstream"
)

// Config configures a Watcher.
type Config struct {
	// Selectors pick the resources to watch.
	Selectors []change.Selector
	// Cache picks more resources to watch and cache, as Projection says,
	// without handing their changes to the Handler (unless Selectors
	// pick them too): readers take their objects with Snapshots.
	Cache []change.Selector
	// Projection says what to cache of each selected resource's objects;
	// nil caches whole objects.
	Projection func(change.Resource) change.Projection
	// Namespaces, when set, names the namespaces to watch a namespaced
	// selected resource in: one informer per namespace lists and watches
	// only there (less memory, and namespaced RBAC suffices). nil or an
	// empty result watches every namespace.
	Namespaces func(change.Resource) []string
	// Confine, when set, confines the watcher to these namespaces (a
	// namespaced install, `fieldwatch run --namespaces`): a selected
	// namespaced resource is listed and watched in each of them (or in
	// those of them that Namespaces gives), and cluster-scoped resources
	// are not watched, so that Roles in these namespaces suffice. CRDs
	// and APIServices are still followed when the watcher may list them
	// (a ClusterRole); without that, new resources are found by the
	// periodic discovery, which every authenticated user may do.
	Confine []string
	// Handler receives the changes. Required.
	Handler Handler
	// Workers is the number of changes handled in parallel (default 4).
	Workers int
	// InitialSync delivers a Created change marked Initial for every object
	// found at start. Without it those objects are the baseline and only
	// what happens to them afterwards is delivered.
	InitialSync bool
	// RediscoveryInterval is how often discovery runs besides when a CRD or
	// APIService changes (default 30s); failed group versions are retried
	// then.
	RediscoveryInterval time.Duration
	// DrainTimeout bounds how long Run keeps handling queued changes after
	// its context ends (default 10s).
	DrainTimeout time.Duration
	// MaxRetryDelay caps the backoff between retries of a failing change
	// (default 2m). Failing changes are retried until they succeed.
	MaxRetryDelay time.Duration
	// Shard restricts the watcher to a share of the objects.
	Shard Shard
	// Store, when set, keeps the restart baseline: what was handled for
	// each object, so that the next run reports what changed meanwhile
	// (see Store). The caller opens and closes it; close it after the
	// handler's deferred changes are done.
	Store *Store
	// Queue bounds the changes waiting for a worker (zero fields take
	// the defaults, see QueueLimits).
	Queue QueueLimits
	// Standby starts the watcher as a leader election standby: it watches
	// and keeps its changes, but hands none to the handler; the leader's
	// watermarks (Confirm) say which ones the leader handled, and those
	// are recorded in the Store and dropped. TakeOver hands the rest to
	// the handler, and from then on it publishes its own Watermarks.
	// Without Standby the watcher acts at once and keeps no watermarks.
	Standby bool
	// Confirmed, if set, is called on a standby with each change the
	// leader's watermarks confirm (in order per object), before it is
	// dropped: what the leader delivered, which this replica will not.
	// fieldwatch evaluates the rules on it for its history, and takes its
	// audit event out of its index, as the leader's match did. It must
	// not block, nor modify the change's objects (the cache's).
	Confirmed func(c *Change)
	// ContentHash makes every change a watch event delivers carry the
	// digest of its new object's whole JSON, taken before the projection
	// (Change.ContentHash): what admission attribution compares with the
	// object a validating webhook saw. It costs a pass over each event's
	// bytes; off, nothing.
	ContentHash bool
	// Logger receives the watcher's logs (default slog.Default()).
	Logger *slog.Logger
	// Registerer receives the watcher's metrics (nil: not registered).
	Registerer prometheus.Registerer

	// discoveryRequests is where New's discovery client counts its
	// requests.
	discoveryRequests *atomic.Int64
}

// QueueLimits bound the changes waiting for a worker: each change an
// informer makes is kept as its own until a worker hands it to the
// handler (on a standby, until the leader's watermark confirms it or the
// standby takes over), so what a burst costs is bounded here. When an
// object's changes, or all of them, reach a bound, the informer's watch
// stream waits (back-pressure) until workers make room: nothing is merged
// or dropped. Lists never wait, so the changes a relist or a start finds
// (at most one per object) may pass the total bounds.
type QueueLimits struct {
	// Changes and Bytes bound every change waiting (defaults
	// DefaultQueueChanges and DefaultQueueBytes).
	Changes int
	Bytes   int64
	// ObjectChanges and ObjectBytes bound the changes of one object
	// (defaults DefaultQueueObjectChanges and DefaultQueueObjectBytes).
	ObjectChanges int
	ObjectBytes   int64
}

// The defaults of QueueLimits. A waiting change counts its objects as
// cached plus about 300 bytes; BenchmarkQueueing measures what a hot
// object holds at its bound.
const (
	DefaultQueueChanges       = 10000
	DefaultQueueBytes         = 64 << 20
	DefaultQueueObjectChanges = 1000
	DefaultQueueObjectBytes   = 16 << 20
)

func (l *QueueLimits) defaults() {
	if l.Changes <= 0 {
		l.Changes = DefaultQueueChanges
	}
	if l.Bytes <= 0 {
		l.Bytes = DefaultQueueBytes
	}
	if l.ObjectChanges <= 0 {
		l.ObjectChanges = DefaultQueueObjectChanges
	}
	if l.ObjectBytes <= 0 {
		l.ObjectBytes = DefaultQueueObjectBytes
	}
}

// The resources the watcher follows for itself: CRDs tell which resources
// are custom and when to rediscover, APIServices when aggregated APIs come
// and go.
var (
	crdResource = change.Resource{
		Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions",
		Kind: "CustomResourceDefinition", Preferred: true,
	}
	apiServiceResource = change.Resource{
		Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices",
		Kind: "APIService", Preferred: true,
	}
)

// Watcher watches the selected resources and hands their changes to a
// Handler. Build it with New, then call Run.
//
// Discovery lists the resources; the selectors pick some of them; one
// dynamic informer per GroupVersionResource watches each, caching compact
// projected objects (Object) rather than full unstructured ones. The set of
// informers follows the cluster: a CRD created while running is watched
// within seconds, a CRD deleted is dropped without error loops. Events go
// through a rate-limited work queue keyed by resource/namespace/name, so
// that one key is handled by one worker at a time, in order. Every write
// the watch delivers is a Change of its own, never merged with another;
// what waits is bounded (QueueLimits), an informer's watch stream waiting
// at a bound.
//
// In a leader election the watcher starts as a standby (Config.Standby): it
// watches and keeps its changes without handing them on; the leader
// publishes its Watermarks and the standby applies them (Confirm),
// recording in its Store what they cover and dropping it; TakeOver hands
// the rest to the handler. A leader that loses its election calls Abandon
// and stops at once, leaving what it did not handle to the next one.
type Watcher struct {
	cfg      Config
	dyn      dynamic.Interface
	disc     discovery.DiscoveryInterface
	log      *slog.Logger
	metrics  *metrics
	baseline *baselineMetrics
	queue    workqueue.TypedRateLimitingInterface[key]
	pending  *pending
	trigger  chan struct{}
	started  atomic.Bool // the initial sync is done
	commits  *commits    // nil without a Store or leader election
	standby  atomic.Bool // Config.Standby until the takeover
	role     role        // standby, takeover and abandon

	// mu guards the selectors, the projection, the namespaces and the
	// watches map. It is held only to read or write them, never across a
	// wait (an informer stopping, a cache syncing, a network call, the
	// Store): readers such as CachedObjects, and so a /metrics scrape,
	// never wait for a discovery pass. Only the goroutine of Run (its
	// reconcile, and stopAll) changes the watches map, so it may read
	// the map without mu.
	mu         sync.Mutex
	selectors  []change.Selector
	cache      []change.Selector
	projection func(change.Resource) change.Projection
	namespaces func(change.Resource) []string
	watches    map[watchKey]*resourceWatch

	// The fields below are the goroutine of Run's alone.
	known      map[schema.GroupResource]bool // resources discovered at least once
	failedGV   map[schema.GroupVersion]bool  // group versions whose discovery fails
	everFailed map[schema.GroupVersion]bool  // group versions whose discovery ever failed
	crds       *resourceWatch                // nil when CRDs cannot be listed
	// followAPIServices is set when APIServices can be listed: their
	// changes trigger discovery.
	followAPIServices bool
	gone              map[schema.GroupResource]bool // stored resources reported deleted this run
	storedKnown       map[schema.GroupResource]bool // served set last written to the Store

	forbiddenMu    sync.Mutex // not mu: informers report while reconcile runs
	forbiddenSince map[schema.GroupVersionResource]time.Time

	trackersMu sync.Mutex
	trackers   map[watchKey]*tracker

	// stopping, when set (by tests), is called before the informer of a
	// resource no longer served is stopped, with no lock held.
	stopping func(change.Resource)
	// passes counts the discovery passes done (tests wait for some).
	passes atomic.Int64
	// discoveryRequests counts the HTTP requests of discovery (New's
	// discovery client counts them).
	discoveryRequests *atomic.Int64
	// streams is the client the informers watch with (nil with the
	// clients of tests that run none).
	streams rest.Interface
}

// New returns a Watcher for the cluster config points to.
func New(config *rest.Config, cfg Config) (*Watcher, error) {
	dyn, err := dynamic.NewForConfig(config)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	requests := &atomic.Int64{}
	dc := rest.CopyConfig(config)
	dc.Wrap(countRequests(requests))
	disc, err := discovery.NewDiscoveryClientForConfig(dc)
	if err != nil {
		return nil, fmt.Errorf("discovery client: %w", err)
	}
	cfg.discoveryRequests = requests
	streams, err := watchstream.NewClient(config)
	if err != nil {
		return nil, err
	}
	w, err := newForClients(dyn, disc, cfg)
	if err != nil {
		return nil, err
	}
	w.streams = streams
	return w, nil
}

// countRequests wraps a transport to count its requests in n.
func countRequests(n *atomic.Int64) transport.WrapperFunc {
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			n.Add(1)
			return rt.RoundTrip(r)
		})
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// newForClients returns a Watcher that uses the given clients.
func newForClients(dyn dynamic.Interface, disc discovery.DiscoveryInterface, cfg Config) (*Watcher, error) {
	if cfg.Handler == nil {
		return nil, errors.New("watcher: Config.Handler is required")
	}
	if err := cfg.Shard.Validate(); err != nil {
		return nil, err
	}
	if cfg.Confine != nil && len(cfg.Confine) == 0 {
		return nil, errors.New("watcher: Config.Confine names no namespace")
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.RediscoveryInterval <= 0 {
		cfg.RediscoveryInterval = 30 * time.Second
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = 10 * time.Second
	}
	if cfg.MaxRetryDelay <= 0 {
		cfg.MaxRetryDelay = 2 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Queue.defaults()
	if cfg.Projection == nil {
		cfg.Projection = func(change.Resource) change.Projection { return change.Projection{Full: true} }
	}
	w := &Watcher{
		cfg:        cfg,
		dyn:        dyn,
		disc:       disc,
		log:        cfg.Logger,
		pending:    newPending(cfg.Standby, cfg.Queue),
		trigger:    make(chan struct{}, 1),
		selectors:  slices.Clone(cfg.Selectors),
		cache:      slices.Clone(cfg.Cache),
		projection: cfg.Projection,
		namespaces: cfg.Namespaces,
		watches:    map[watchKey]*resourceWatch{},
		known:      map[schema.GroupResource]bool{},
		failedGV:   map[schema.GroupVersion]bool{},
		everFailed: map[schema.GroupVersion]bool{},
		gone:       map[schema.GroupResource]bool{},

		forbiddenSince: map[schema.GroupVersionResource]time.Time{},
		trackers:       map[watchKey]*tracker{},
	}
	if cfg.Store != nil || cfg.Standby {
		// The baseline, or the watermarks of a leader election, need
		// to know when each change is done.
		w.commits = newCommits(cfg.Store)
	}
	w.standby.Store(cfg.Standby)
	w.role = newRole()
	if cfg.Store != nil {
		// The baseline records how far this run got, so that the next
		// one replays the writes since.
		cfg.Store.follow(w.Watermarks)
	}
	w.discoveryRequests = cfg.discoveryRequests
	if w.discoveryRequests == nil {
		w.discoveryRequests = &atomic.Int64{} // clients that do not count
	}
	w.metrics = newMetrics(cfg.Registerer, w.pending, func() float64 { return float64(w.CachedObjects()) },
		func() float64 { return float64(w.discoveryRequests.Load()) })
	w.baseline = newBaselineMetrics(cfg.Registerer, cfg.Store, w.watermarkLag)
	w.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[key](5*time.Millisecond, cfg.MaxRetryDelay),
		workqueue.TypedRateLimitingQueueConfig[key]{Name: "changes", MetricsProvider: w.metrics.queue},
	)
	return w, nil
}

// Run watches until ctx ends. It discovers the resources, starts their
// informers, waits until all have synced, then starts the workers (a
// standby: once it takes over) and keeps the set of informers in step with
// the cluster. When ctx ends it stops the informers and lets the workers
// handle what is queued for up to Config.DrainTimeout, unless Abandon was
// called.
func (w *Watcher) Run(ctx context.Context) error {
	workCtx, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	var workers sync.WaitGroup
	defer func() {
		w.stopAll()
		w.drain(&workers, stopWork)
	}()
	go func() {
		select {
		case <-w.role.abandoned:
			stopWork()
			w.queue.ShutDown()
		case <-workCtx.Done():
		}
	}()

	endStartGC := startGC()
	defer endStartGC()
	// A start that never syncs (an apiserver away for long) does not
	// keep the collector at startGCPercent.
	defer time.AfterFunc(startGCMax, endStartGC).Stop()
	w.startCRDWatch(ctx)
	w.startFollowingAPIServices(ctx)
	for {
		err := w.reconcile(ctx)
		if err == nil {
			break
		}
		w.log.Error("discovery failed; retrying", "error", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(2 * time.Second):
		}
	}
	if !w.waitForSync(ctx) {
		return nil
	}
	w.started.Store(true)
	w.log.Info("watcher synced", "resources", len(w.resources()), "standby", w.cfg.Standby)
	// The start decoded every object and CRD once: most of what it
	// allocated is garbage now, and the runtime would hand that memory
	// back to the system only over minutes. Handing it back at once makes
	// the pod's resident memory what the cache holds (`make bench
	// -sections crds` reports the settled RSS).
	endStartGC()
	debug.FreeOSMemory()
	startWorkers := func() {
		for range w.cfg.Workers {
			workers.Go(func() {
				for workCtx.Err() == nil && w.processNext(workCtx) {
				}
			})
		}
	}
	var lead <-chan struct{}
	if w.cfg.Standby {
		lead = w.role.lead
	} else {
		startWorkers()
	}

	ticker := time.NewTicker(w.cfg.RediscoveryInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-lead:
			lead = nil
			w.takeOver()
			startWorkers()
			continue
		case <-w.trigger:
			// Let a burst of CRD events settle into one discovery.
			select {
			case <-time.After(200 * time.Millisecond):
			case <-ctx.Done():
				return nil
			}
		case <-ticker.C:
		}
		if err := w.reconcile(ctx); err != nil {
			w.log.Error("discovery failed; keeping the current resources", "error", err)
		}
	}
}

// drain lets the workers finish the queue, then stops them. After Abandon
// it stops them at once.
func (w *Watcher) drain(workers *sync.WaitGroup, stopWork context.CancelFunc) {
	done := make(chan struct{})
	go func() {
		w.queue.ShutDownWithDrain()
		close(done)
	}()
	select {
	case <-done:
	case <-w.role.abandoned:
		w.queue.ShutDown()
	case <-time.After(w.cfg.DrainTimeout):
		if n := w.pending.len(); n > 0 {
			w.log.Warn("stopping with changes not handled", "objects", n)
		}
		w.queue.ShutDown()
	}
	stopWork()
	workers.Wait()
}

// waitForSync waits until every informer has synced, logging the
// stragglers now and then. It returns false when ctx ends first.
func (w *Watcher) waitForSync(ctx context.Context) bool {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	report := time.Now().Add(30 * time.Second)
	for {
		waiting := w.unsynced()
		if len(waiting) == 0 {
			return true
		}
		if time.Now().After(report) {
			w.log.Warn("waiting for informers to sync", "resources", waiting)
			report = time.Now().Add(30 * time.Second)
		}
		select {
		case <-ctx.Done():
			return false
		case <-w.trigger:
			// A resource turned out forbidden, or CRDs changed.
			if err := w.reconcile(ctx); err != nil {
				w.log.Error("discovery failed", "error", err)
			}
		case <-tick.C:
		}
	}
}

// unsynced lists the watched resources whose initial list is not done.
func (w *Watcher) unsynced() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, rw := range w.watches {
		if !rw.hasSynced() {
			out = append(out, rw.res.String())
		}
	}
	slices.Sort(out)
	return out
}

// Synced reports whether the watcher has completed its initial sync and
// every resource it watches now has synced too.
func (w *Watcher) Synced() bool {
	return w.started.Load() && len(w.unsynced()) == 0
}

// Started reports whether the initial sync is done: every resource found
// at the start has been listed into the cache (readiness). It stays true:
// resources found later (a new CRD) sync on their own, and Unsynced names
// those still listing.
func (w *Watcher) Started() bool { return w.started.Load() }

// Unsynced names the watched resources whose initial list is not done.
func (w *Watcher) Unsynced() []string { return w.unsynced() }

// resources returns the resources being watched for the handler.
func (w *Watcher) resources() []change.Resource {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.deliveringResources()
}

// deliveringResources lists the resources with an informer for the
// handler, once each however many namespaces they are watched in. w.mu
// must be held (or the caller be the goroutine of Run).
func (w *Watcher) deliveringResources() []change.Resource {
	seen := map[schema.GroupVersionResource]bool{}
	var out []change.Resource
	for key, rw := range w.watches {
		if rw.deliver.Load() && !seen[key.gvr] {
			seen[key.gvr] = true
			out = append(out, rw.res)
		}
	}
	slices.SortFunc(out, func(a, b change.Resource) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// watchedNamespaces returns, for each resource watched in some namespaces
// only, those namespaces; resources watched in every namespace are absent.
func (w *Watcher) watchedNamespaces() map[schema.GroupVersionResource][]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[schema.GroupVersionResource][]string{}
	for key := range w.watches {
		if key.namespace != "" {
			out[key.gvr] = append(out[key.gvr], key.namespace)
		}
	}
	for _, ns := range out {
		slices.Sort(ns)
	}
	return out
}

// CachedObjects returns how many objects the informers of the selected
// resources (Selectors and Cache) cache (other shards' objects included
// when sharding on the client).
func (w *Watcher) CachedObjects() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, rw := range w.watches {
		if !rw.metaOnly {
			n += rw.store.len()
		}
	}
	return n
}

// SetSelectors replaces the selectors, projection and namespaces (a
// reloaded rules file). Informers of resources still selected with the same
// projection in the same namespaces keep running; the others are started,
// stopped or restarted by the next discovery, which this triggers.
func (w *Watcher) SetSelectors(sels []change.Selector, projection func(change.Resource) change.Projection, namespaces func(change.Resource) []string) {
	if projection == nil {
		projection = func(change.Resource) change.Projection { return change.Projection{Full: true} }
	}
	w.mu.Lock()
	w.selectors = slices.Clone(sels)
	w.projection = projection
	w.namespaces = namespaces
	w.mu.Unlock()
	w.triggerDiscovery()
}

// SetCache replaces Config.Cache; the informers follow at the next
// discovery, which this triggers. Set the projection (SetSelectors) for
// what the new selectors read first.
func (w *Watcher) SetCache(sels []change.Selector) {
	w.mu.Lock()
	w.cache = slices.Clone(sels)
	w.mu.Unlock()
	w.triggerDiscovery()
}

// triggerDiscovery asks Run for a discovery pass soon.
func (w *Watcher) triggerDiscovery() {
	select {
	case w.trigger <- struct{}{}:
	default:
	}
}

// enqueue queues a change for the handler, with its mark in rw's tracker
// (rw is nil for changes no informer made).
func (w *Watcher) enqueue(c *Change, rw *resourceWatch, bound boundKind) {
	o := c.Object()
	if o.typ.foreign {
		return // another shard's object
	}
	k := key{gr: groupResource(c.Resource), namespace: o.GetNamespace(), name: o.name}
	if rw != nil && rw.track != nil {
		m := rw.track.add(rw.storeRV(), c.Time)
		c.mark = m
		switch bound {
		case boundObject:
			c.bound = o.resourceVersion
		case boundCache:
			c.bound = m.seq
		}
	}
	if w.pending.add(k, c) {
		w.queue.Add(k)
	}
}

// processNext handles the changes of one key, one at a time in order: as
// many as were waiting when it took the key (later ones have queued the
// key again). It returns false when the queue is shut down.
func (w *Watcher) processNext(ctx context.Context) bool {
	k, quit := w.queue.Get()
	if quit {
		return false
	}
	defer w.queue.Done(k)
	for range w.pending.waiting(k) {
		c := w.pending.next(k)
		if c == nil {
			break
		}
		if err := w.handle(ctx, k, c); err != nil {
			w.pending.putBack(k, c)
			if ctx.Err() != nil {
				// Abandoned: the changes stay for the next leader.
				return false
			}
			w.metrics.handlerErrors.Inc()
			w.log.Warn("handling change failed; will retry", "gvr", c.Resource.String(),
				"namespace", k.namespace, "name", k.name, "type", c.Type, "error", err)
			w.queue.AddRateLimited(k)
			return true
		}
	}
	w.queue.Forget(k)
	return true
}

// handle hands c to the handler, registering it for the Store and the
// watermarks first.
func (w *Watcher) handle(ctx context.Context, k key, c *Change) error {
	var pc *commit
	if w.commits != nil {
		pc = w.commits.start(k, c)
		c.deferred = func() { w.commits.finish(k, pc) }
	}
	err := w.cfg.Handler.Handle(ctx, c)
	if pc != nil {
		switch {
		case err != nil:
			c.deferred = nil
			w.commits.abandon(k, pc)
		case c.deferred != nil: // not deferred: handled now
			c.deferred = nil
			w.commits.finish(k, pc)
		}
	}
	return err
}

// unexpected logs an object of a type the watcher did not cache.
func (w *Watcher) unexpected(res change.Resource, obj any) {
	w.log.Error("informer delivered an unexpected object; ignored", "gvr", res.String(), "type", fmt.Sprintf("%T", obj))
}

// customResources returns which group resources a CRD serves, or nil when
// the CRDs cannot be read (then the group names are the guide).
func (w *Watcher) customResources() func(schema.GroupResource) bool {
	if w.crds == nil {
		return func(gr schema.GroupResource) bool { return !builtinGroup(gr.Group) }
	}
	set := map[schema.GroupResource]bool{}
	for _, o := range w.crds.store.list() {
		set[crdServes(o.name)] = true
	}
	return func(gr schema.GroupResource) bool { return set[gr] }
}

// crdServes returns the group resource a CRD serves: its name is
// <plural>.<group>, as the apiserver's validation of CRDs requires.
func crdServes(name string) schema.GroupResource {
	plural, group, _ := strings.Cut(name, ".")
	return schema.GroupResource{Group: group, Resource: plural}
}

// stopAll stops every informer. The watches map is emptied first, so
// that no reader waits for the informers to stop.
func (w *Watcher) stopAll() {
	w.mu.Lock()
	watches := w.watches
	w.watches = map[watchKey]*resourceWatch{}
	w.mu.Unlock()
	for _, rw := range watches {
		rw.stop()
	}
	w.metrics.resources.Set(0)
}

// startGCPercent is the collector's GOGC while watchers start: the start
// decodes every object and CRD once, and what it keeps (the cache, the
// informers) is spread over the memory that garbage took. Collected
// sooner, the garbage is reused before the heap grows, which lowers the
// start's peak RSS and the heap its survivors hold afterwards at no cost
// in start time (`make bench -sections crds`, peak and settled RSS).
const startGCPercent = 25

// startGCMax is how long a start keeps GOGC at startGCPercent at most.
const startGCMax = 2 * time.Minute

var startGCState struct {
	sync.Mutex
	starting int // watchers starting
	restore  int // the GOGC to restore when the last one is done; <0: none to restore
}

// startGC lowers GOGC to startGCPercent while a watcher starts, unless the
// environment sets GOGC (or something else changed it from the default
// 100); the returned func, which may be called more than once, restores
// it when the last watcher starting is done.
func startGC() func() {
	startGCState.Lock()
	defer startGCState.Unlock()
	if startGCState.starting == 0 {
		startGCState.restore = -1
		if _, set := os.LookupEnv("GOGC"); !set {
			if prev := debug.SetGCPercent(startGCPercent); prev == 100 {
				startGCState.restore = prev
			} else {
				debug.SetGCPercent(prev)
			}
		}
	}
	startGCState.starting++
	var once sync.Once
	return func() {
		once.Do(func() {
			startGCState.Lock()
			defer startGCState.Unlock()
			if startGCState.starting--; startGCState.starting == 0 && startGCState.restore >= 0 {
				debug.SetGCPercent(startGCState.restore)
			}
		})
	}
}
