package watcher

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unique"

	"k8s.io/client-go/tools/cache"

	"github.com/fieldwatch/fieldwatch/internal/jsonscan"
	"github.com/fieldwatch/fieldwatch/watcher/internal/watchstream"
)

// objectStore is the cache of one resourceWatch: its informer
// (listAndWatch) lists and watches the resource and writes to it, and each
// write hands the change to the resourceWatch's handlers at once, in the
// informer's goroutine. There is no DeltaFIFO between them and no
// processing goroutine per resource: what a client-go informer per
// resource spends on both (a queue of deltas, an indexed store keyed by
// strings, two goroutines) goes. It implements client-go's ReflectorStore,
// which is how it is written to. Handlers never block (they append to pending), except
// the gate: a watch event whose change would pass a bound of QueueLimits
// waits here, and the reflector with it, so that the watch stream waits
// (back-pressure). Lists never wait.
//
// Only the informer's goroutine writes; readers (CachedObjects, a
// snapshot, a handover) take the read lock.
type objectStore struct {
	rw *resourceWatch
	// ctx ends when the informer stops: a gate that waits gives up.
	ctx context.Context

	mu    sync.RWMutex
	items map[objectKey]*Object
	// rv is the resourceVersion the cache is at: the last event's object,
	// list or bookmark.
	rv string

	synced atomic.Bool // the initial list is handed on
	// listStarted is when the list (or watch-list) now filling the
	// cache started; rvGone says the apiserver can no longer serve rv, so
	// that the next list is of now (the informer's goroutine's alone).
	listStarted time.Time
	rvGone      bool
}

// objectKey keys a cached object: its interned namespace and its name,
// which the Object holds anyway (no key string per object).
type objectKey struct {
	ns   unique.Handle[string]
	name string
}

func keyOf(o *Object) objectKey { return objectKey{ns: o.ns, name: o.name} }

var (
	_ cache.ReflectorStore         = &objectStore{}
	_ cache.ReflectorBookmarkStore = &objectStore{}
	_ cache.TransformingStore      = &objectStore{}
)

func newObjectStore(rw *resourceWatch) *objectStore {
	return &objectStore{rw: rw, items: map[objectKey]*Object{}}
}

// Transformer implements cache.TransformingStore: the reflector's store of
// a watch-list's initial events keeps them projected, as listed objects.
func (s *objectStore) Transformer() cache.TransformFunc {
	return func(obj any) (any, error) { return s.rw.project(obj, true) }
}

// Add implements cache.ReflectorStore: a watch event ADDED.
func (s *objectStore) Add(obj any) error { return s.event(obj) }

// Update implements cache.ReflectorStore: a watch event MODIFIED.
func (s *objectStore) Update(obj any) error { return s.event(obj) }

// event applies an object a watch event delivered and hands on the change.
func (s *objectStore) event(obj any) error {
	o, err := s.rw.project(obj, false)
	if err != nil {
		return err
	}
	if !s.admit(o) {
		return nil // stopping
	}
	hash := s.rw.contentHash(obj)
	k := keyOf(o)
	s.mu.Lock()
	old, exists := s.items[k]
	s.items[k] = o
	s.rv = o.resourceVersion
	s.mu.Unlock()
	if exists {
		s.rw.updated(old, o, hash)
	} else {
		s.rw.added(o, hash)
	}
	return nil
}

// Delete implements cache.ReflectorStore: a watch event DELETED.
func (s *objectStore) Delete(obj any) error {
	o, err := s.rw.project(obj, false)
	if err != nil {
		return err
	}
	if !s.admit(o) {
		return nil
	}
	var prevRV string
	s.mu.Lock()
	if old := s.items[keyOf(o)]; old != nil {
		prevRV = old.resourceVersion
	}
	delete(s.items, keyOf(o))
	s.rv = o.resourceVersion
	s.mu.Unlock()
	s.rw.deleted(o, prevRV)
	return nil
}

// Bookmark implements cache.ReflectorBookmarkStore: the watch is at rv.
// A bookmark of a replay's watch says the watch resumed at the watermark.
func (s *objectStore) Bookmark(rv string) error {
	s.rw.resuming.Store(false)
	s.mu.Lock()
	s.rv = rv
	s.mu.Unlock()
	return nil
}

// Resync implements cache.ReflectorStore; the watcher never resyncs.
func (s *objectStore) Resync() error { return nil }

// Replace implements cache.ReflectorStore: a list (or a watch-list's
// initial events) at rv. Objects no longer there are deleted (as
// tombstones: the watch missed their deletion) before the listed ones are
// handed on, in the list's order, as client-go's informers do.
func (s *objectStore) Replace(list []any, rv string) error {
	order := make([]*Object, 0, len(list))
	for _, obj := range list {
		o, err := s.rw.project(obj, true)
		if err != nil {
			return err
		}
		order = append(order, o)
	}
	return s.replace(order, rv)
}

// replace is Replace of projected objects.
func (s *objectStore) replace(order []*Object, rv string) error {
	items := make(map[objectKey]*Object, len(order))
	for _, o := range order {
		items[keyOf(o)] = o
	}
	s.rw.listed.Store(&listMark{at: s.listStarted, resourceVersion: rv})
	s.rw.track.listed(rv)
	s.mu.Lock()
	old := s.items
	s.items = items
	s.rv = rv
	s.mu.Unlock()
	for k, o := range old {
		if items[k] == nil {
			s.rw.OnDelete(cache.DeletedFinalStateUnknown{Key: k.String(), Obj: o})
		}
	}
	initial := !s.synced.Load()
	for _, o := range order {
		if prev := old[keyOf(o)]; prev != nil {
			s.rw.OnUpdate(prev, o)
		} else {
			s.rw.OnAdd(o, initial)
		}
	}
	if initial {
		s.synced.Store(true)
		s.rw.finishInitial()
	}
	return nil
}

// String returns the key as client-go's cache keys it: namespace/name, or
// name for cluster-scoped objects.
func (k objectKey) String() string {
	if k.ns == (unique.Handle[string]{}) || k.ns.Value() == "" {
		return k.name
	}
	return k.ns.Value() + "/" + k.name
}

// lastRV returns the resourceVersion the cache is at.
func (s *objectStore) lastRV() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.rv
}

// len returns how many objects the cache holds.
func (s *objectStore) len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.items)
}

// list returns the cached objects.
func (s *objectStore) list() []*Object {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*Object, 0, len(s.items))
	for _, o := range s.items {
		out = append(out, o)
	}
	return out
}

// appendOwn appends to dst the objects of this shard: those of other
// shards, cached for keying only, are left out.
func (s *objectStore) appendOwn(dst []*Object) []*Object {
	foreign := s.rw.foreign
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, o := range s.items {
		if o.typ != foreign {
			dst = append(dst, o)
		}
	}
	return dst
}

// put sets the cached state of an object, with no change handed on (a
// benchmark's stand-in for an event already handled).
func (s *objectStore) put(o *Object) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.items[keyOf(o)] = o
	s.rv = o.resourceVersion
}

// admit is the gate: it waits, before a watch event of o's object is
// applied, until one more change of it may wait for a worker. It returns
// false when the informer stops meanwhile.
func (s *objectStore) admit(o *Object) bool {
	rw := s.rw
	rw.resuming.Store(false) // the replay's watch delivered: no gap
	if !rw.deliver.Load() || o.typ.foreign || rw.w.pending.roomy(0) {
		return true
	}
	k := key{gr: groupResource(rw.res), namespace: o.GetNamespace(), name: o.name}
	var since time.Time
	defer func() {
		if !since.IsZero() {
			if rw.waited == nil {
				rw.waited = rw.w.metrics.backpressure.WithLabelValues(rw.res.String())
			}
			rw.waited.Add(time.Since(since).Seconds())
		}
	}()
	for {
		ok, room := rw.w.pending.admits(k, 0, 0)
		if ok {
			return true
		}
		if since.IsZero() {
			since = time.Now()
		}
		select {
		case <-room:
		case <-s.ctx.Done():
			return false
		}
	}
}

// contentHash returns the content hash of a watch event's object as the
// stream carried it (jsonscan.ObjectHash), when Config.ContentHash asks
// for it; "" otherwise, or when the object is not raw JSON.
func (rw *resourceWatch) contentHash(obj any) string {
	raw, ok := obj.(watchstream.RawObject)
	if !ok || !rw.w.cfg.ContentHash {
		return ""
	}
	h, err := jsonscan.ObjectHash(raw)
	if err != nil {
		return "" // it decoded: a syntax only the hash checks
	}
	return h
}

// errUnexpected is an object of a type the informer does not cache.
func errUnexpected(res fmt.Stringer, obj any) error {
	return fmt.Errorf("%s: unexpected object type %T", res, obj)
}
