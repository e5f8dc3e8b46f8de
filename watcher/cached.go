package watcher

import (
	"errors"
	"fmt"
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
