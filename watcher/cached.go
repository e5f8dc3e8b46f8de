package watcher

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fieldwatch/fieldwatch/change"
)

// Snapshot is what the watcher caches of one resource at one moment.
type Snapshot struct {
	// Resource is the resource, at the version its objects are cached at.
	Resource change.Resource
	// Projection says what of each object is cached.
	Projection change.Projection
	// Objects are the cached objects, in no particular order. They are
	// the cache's: immutable, shared, decoded one at a time with Map.
	Objects []*Object
	// Listed is when the list that last filled the cache started (the
	// initial list, or a relist after a watch could not resume), and
	// ResourceVersion the resourceVersion it was served at: every object
	// is as the apiserver served it then or later.
	Listed          time.Time
	ResourceVersion string
}

// Cached returns the objects the watcher caches of the resource gr, when
// it caches every object of it: the resource is watched in every
// namespace, its informer has synced, and the watcher is not sharded (a
// shard caches a share of the objects). When it watches the resource at
// several versions, the snapshot is of the preferred one. The error says
// why there is no snapshot.
func (w *Watcher) Cached(gr schema.GroupResource) (Snapshot, error) {
	if w.cfg.Shard.enabled() {
		return Snapshot{}, fmt.Errorf("shard %d of %d caches a share of the objects only", w.cfg.Shard.Index, w.cfg.Shard.Total)
	}
	w.mu.Lock()
	var rw *resourceWatch
	partial := false
	for key, r := range w.watches {
		if key.gvr.GroupResource() != gr {
			continue
		}
		if key.namespace != "" {
			partial = true
			continue
		}
		if rw == nil || r.res.Preferred {
			rw = r
		}
	}
	w.mu.Unlock()
	switch {
	case rw == nil && partial:
		return Snapshot{}, errors.New("watched in some namespaces only")
	case rw == nil:
		return Snapshot{}, errors.New("not watched")
	case !rw.hasSynced():
		return Snapshot{}, errors.New("not synced yet")
	}
	mark := rw.listed.Load()
	if mark == nil {
		return Snapshot{}, errors.New("not listed yet")
	}
	objs := rw.store.list()
	return Snapshot{Resource: rw.res, Projection: rw.typ.projection, Objects: objs, Listed: mark.at, ResourceVersion: mark.resourceVersion}, nil
}

// Snapshots returns, for each resource want accepts among those the
// watcher caches (for the handler or Config.Cache) whose informers have
// all synced, the objects of this shard (a shard caches others' for
// keying only: they are left out), gathered from every namespace it is
// watched in. Objects are the cache's: immutable and shared. A resource
// whose CRD is gone is no longer watched, and so absent. want is called
// with the watcher's lock held: it must be quick and not call the
// watcher.
func (w *Watcher) Snapshots(want func(change.Resource) bool) []Snapshot {
	// A resource is watched once, cluster-wide, or once per namespace:
	// the watches of one are gathered by sorting them, when some are per
	// namespace (BenchmarkSnapshots).
	w.mu.Lock()
	rws := make([]*resourceWatch, 0, len(w.watches))
	perNamespace := false
	for key, rw := range w.watches {
		if !rw.metaOnly && want(rw.res) {
			rws = append(rws, rw)
			perNamespace = perNamespace || key.namespace != ""
		}
	}
	w.mu.Unlock()
	if perNamespace {
		slices.SortFunc(rws, func(a, b *resourceWatch) int { return compareGVR(a.res, b.res) })
	}
	out := make([]Snapshot, 0, len(rws))
	// The snapshots' objects share one array, grown as needed: a slice
	// handed out before it grew keeps the array it was cut from.
	objs := make([]*Object, 0, len(rws))
	for i := 0; i < len(rws); {
		j := i + 1
		for perNamespace && j < len(rws) && compareGVR(rws[j].res, rws[i].res) == 0 {
			j++
		}
		var snap Snapshot
		var ok bool
		if snap, objs, ok = snapshotOf(rws[i:j], objs); ok {
			out = append(out, snap)
		}
		i = j
	}
	return out
}

// compareGVR orders resources by group, version and resource.
func compareGVR(a, b change.Resource) int {
	return cmp.Or(strings.Compare(a.Group, b.Group), strings.Compare(a.Version, b.Version), strings.Compare(a.Resource, b.Resource))
}

// snapshotOf returns the snapshot of the watches of one resource, unless
// one of them has not synced, its objects appended to objs (and cut
// from it); it returns objs grown.
func snapshotOf(rws []*resourceWatch, objs []*Object) (Snapshot, []*Object, bool) {
	for _, rw := range rws {
		if !rw.hasSynced() || rw.listed.Load() == nil {
			return Snapshot{}, objs, false
		}
	}
	snap := Snapshot{Resource: rws[0].res, Projection: rws[0].typ.projection}
	start := len(objs)
	for _, rw := range rws {
		mark := rw.listed.Load()
		snap.Listed, snap.ResourceVersion = mark.at, mark.resourceVersion
		objs = rw.store.appendOwn(objs)
	}
	snap.Objects = objs[start:len(objs):len(objs)]
	return snap, objs, true
}
