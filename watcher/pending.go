package watcher

import (
	"sync"

	"github.com/fieldwatch/fieldwatch/change"
)

// pending holds, per key, the changes not yet handled, in order. Informer
// handlers append (never block); a worker takes a key's whole list, handles
// it and puts back what failed. Consecutive updates of one object merge
// into one (first old, last new), so a hot object costs one entry however
// often it changes while it waits; creates and deletes never merge, so a
// delete followed by a create under the same name stays a delete and a
// create.
type pending struct {
	mu sync.Mutex
	m  map[key][]*Change
}

func newPending() *pending {
	return &pending{m: map[key][]*Change{}}
}

// add appends c to k's list, merging it into a waiting update.
func (p *pending) add(k key, c *Change) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.m[k] = appendChange(p.m[k], c)
}

// appendChange appends c to list, merging consecutive updates of one object.
func appendChange(list []*Change, c *Change) []*Change {
	if n := len(list); n > 0 && c.Type == change.Updated {
		last := list[n-1]
		if last.Type == change.Updated && last.New.GetUID() == c.New.GetUID() {
			merged := *last
			merged.New = c.New
			merged.Resource = c.Resource
			list[n-1] = &merged
			return list
		}
	}
	return append(list, c)
}

// take removes and returns k's list.
func (p *pending) take(k key) []*Change {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.m[k]
	delete(p.m, k)
	return list
}

// putBack returns unhandled changes to the front of k's list, before any
// that arrived meanwhile.
func (p *pending) putBack(k key, list []*Change) {
	if len(list) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	merged := make([]*Change, 0, len(list)+len(p.m[k]))
	merged = append(merged, list...)
	for _, c := range p.m[k] {
		merged = appendChange(merged, c)
	}
	p.m[k] = merged
}

// len returns the number of keys with waiting changes.
func (p *pending) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.m)
}
