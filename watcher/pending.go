package watcher

import (
	"slices"
	"sync"

	"github.com/fieldwatch/fieldwatch/change"
)

// standbyMerge is how many changes of one object a standby keeps apart
// before it merges consecutive updates: apart, each can be confirmed by
// the leader's watermark on its own.
const standbyMerge = 16

// pending holds, per key, the changes not yet handled, in order. Informer
// handlers append (never block); a worker takes a key's whole list, handles
// it and puts back what failed. Consecutive updates of one object merge
// into one (first old, last new), so a hot object costs one entry however
// often it changes while it waits; creates and deletes never merge, so a
// delete followed by a create under the same name stays a delete and a
// create.
//
// On a standby nothing is handled: changes wait until the leader's
// watermark confirms them (confirm) or the standby takes over (lead). They
// are kept apart, so that each is confirmed as soon as the leader handled
// it, up to standbyMerge per object.
type pending struct {
	mu      sync.Mutex
	m       map[key][]*Change
	standby bool
}

func newPending(standby bool) *pending {
	return &pending{m: map[key][]*Change{}, standby: standby}
}

// add appends c to k's list, merging it into a waiting update. It reports
// whether k must be queued for a worker (false on a standby).
func (p *pending) add(k key, c *Change) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.standby && len(p.m[k]) < standbyMerge {
		p.m[k] = append(p.m[k], c)
		return false
	}
	p.m[k] = appendChange(p.m[k], c)
	return !p.standby
}

// appendChange appends c to list, merging consecutive updates of one object.
func appendChange(list []*Change, c *Change) []*Change {
	if n := len(list); n > 0 && c.Type == change.Updated {
		last := list[n-1]
		if last.Type == change.Updated && last.New.GetUID() == c.New.GetUID() {
			merged := *last
			merged.New = c.New
			merged.Resource = c.Resource
			merged.marks = append(slices.Clip(last.marks), c.marks...)
			merged.bound = c.bound
			merged.Listed = last.Listed || c.Listed
			merged.merged = true
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

// confirm removes, on a standby, every change that confirmed says the
// leader handled, and returns them in the order they happened per object.
// A change that is not confirmed keeps the ones after it of the same
// object waiting too.
func (p *pending) confirm(confirmed func(*Change) bool) []*Change {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.standby {
		return nil
	}
	var out []*Change
	for k, list := range p.m {
		keep := list[:0:0]
		blocked := map[string]bool{} // UIDs with an unconfirmed change
		for _, c := range list {
			uid := string(c.Object().GetUID())
			if !blocked[uid] && confirmed(c) {
				out = append(out, c)
				continue
			}
			blocked[uid] = true
			keep = append(keep, c)
		}
		if len(keep) == 0 {
			delete(p.m, k)
		} else if len(keep) < len(list) {
			p.m[k] = keep
		}
	}
	return out
}

// lead ends the standby: every list is merged as a leader's would be, and
// the keys with changes are returned for the workers.
func (p *pending) lead(each func(k key, list []*Change) []*Change) []key {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.standby = false
	keys := make([]key, 0, len(p.m))
	for k, list := range p.m {
		var merged []*Change
		for _, c := range list {
			merged = appendChange(merged, c)
		}
		if merged = each(k, merged); len(merged) == 0 {
			delete(p.m, k)
			continue
		}
		p.m[k] = merged
		keys = append(keys, k)
	}
	return keys
}
