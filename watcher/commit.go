package watcher

import (
	"sync"
)

// commits records handled changes in the Store in the order they happened
// per object, also when the handler finishes them out of order (Defer): a
// change's state is written only once it and every earlier change of the
// same object are done, so that a crash can never leave the baseline ahead
// of what was delivered. The same moment marks the change done for the
// watermark. Without a Store (in a leader election) only the marks are
// kept.
type commits struct {
	store *Store // nil: no restart baseline
	mu    sync.Mutex
	m     map[key][]*commit
}

// commit is one change being handled.
type commit struct {
	c    *Change
	done bool
}

func newCommits(store *Store) *commits {
	return &commits{store: store, m: map[key][]*commit{}}
}

// start registers c, about to be handled.
func (cs *commits) start(k key, c *Change) *commit {
	pc := &commit{c: c}
	cs.mu.Lock()
	cs.m[k] = append(cs.m[k], pc)
	cs.mu.Unlock()
	return pc
}

// abandon forgets a change whose handling failed (it is retried later and
// registered again then). It is always the last one of its key.
func (cs *commits) abandon(k key, pc *commit) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	list := cs.m[k]
	for i, x := range list {
		if x == pc {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	cs.settle(k, list)
}

// finish marks a change done and writes every change of its key that is
// done with all before it.
func (cs *commits) finish(k key, pc *commit) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	pc.done = true
	cs.settle(k, cs.m[k])
}

// settle writes the done prefix of list and keeps the rest. cs.mu is held.
func (cs *commits) settle(k key, list []*commit) {
	i := 0
	for ; i < len(list) && list[i].done; i++ {
		c := list[i].c
		cs.store.record(c)
		c.finish()
	}
	if i == len(list) {
		delete(cs.m, k)
		return
	}
	cs.m[k] = list[i:]
}
