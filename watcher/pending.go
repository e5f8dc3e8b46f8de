package watcher

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// pending holds, per key, the changes not yet handed to the handler, in
// the order they happened: every change an informer made is kept as its
// own, never merged with the ones around it, so that each write the watch
// delivers reaches the handler with the state it replaced. Informer
// handlers append (never block); a worker takes a key's changes one at a
// time and puts back one that failed.
//
// What the changes hold is counted, per key and in total (changes, and
// bytes as size reports them): the watch streams wait while a bound is
// reached (gate), so that a hot object costs at most its bound however
// fast it changes.
//
// On a standby nothing is handled: changes wait until the leader's
// watermark confirms them (confirm) or the standby takes over (lead).
type pending struct {
	mu      sync.Mutex
	m       map[key]sequence
	standby bool
	limits  QueueLimits
	// changes and bytes are in every sequence, changed with mu held
	// and read without it too (roomy).
	changes, bytes atomic.Int64
	// roomy's bounds: below them no sequence can be at its own.
	fastChanges, fastBytes int64
	peak                   int // the longest sequence so far (tests and benchmarks)
	// room, when not nil, is closed (and cleared) the next time changes
	// leave: a gate waiting for room made it.
	room chan struct{}
}

// sequence is one key's waiting changes, in order.
type sequence struct {
	list  []*Change
	bytes int64
}

func newPending(standby bool, limits QueueLimits) *pending {
	return &pending{m: map[key]sequence{}, standby: standby, limits: limits,
		fastChanges: int64(min(limits.Changes, limits.ObjectChanges)), fastBytes: min(limits.Bytes, limits.ObjectBytes)}
}

// add appends c to k's sequence. It reports whether k must be queued for a
// worker (false on a standby).
func (p *pending) add(k key, c *Change) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.m[k]
	var prev *Object
	if len(s.list) > 0 {
		prev = s.list[len(s.list)-1].New
	}
	c.queued = c.size(prev)
	n := c.queued
	s.list = append(s.list, c)
	s.bytes += n
	p.m[k] = s
	p.changes.Add(1)
	p.bytes.Add(n)
	p.peak = max(p.peak, len(s.list))
	return !p.standby
}

// next removes and returns k's first change, nil when none waits.
func (p *pending) next(k key) *Change {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.m[k]
	if len(s.list) == 0 {
		return nil
	}
	c := s.list[0]
	s.list[0] = nil
	s.list = s.list[1:]
	p.leftLocked(k, s, 1, c.queued)
	return c
}

// waiting returns how many changes k has waiting.
func (p *pending) waiting(k key) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.m[k].list)
}

// putBack returns an unhandled change to the front of k's sequence, before
// any that arrived meanwhile.
func (p *pending) putBack(k key, c *Change) {
	n := c.queued
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.m[k]
	s.list = append([]*Change{c}, s.list...)
	s.bytes += n
	p.m[k] = s
	p.changes.Add(1)
	p.bytes.Add(n)
}

// leftLocked stores s, k's sequence from which n changes of bytes b
// left, dropping it when it is empty, and wakes a waiting gate. p.mu is
// held.
func (p *pending) leftLocked(k key, s sequence, n int, b int64) {
	s.bytes -= b
	p.changes.Add(-int64(n))
	p.bytes.Add(-b)
	if len(s.list) == 0 {
		delete(p.m, k)
	} else {
		p.m[k] = s
	}
	if p.room != nil {
		close(p.room)
		p.room = nil
	}
}

// len returns the number of keys with waiting changes.
func (p *pending) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.m)
}

// totals returns the changes waiting and their bytes.
func (p *pending) totals() (changes int, bytes int64) {
	return int(p.changes.Load()), p.bytes.Load()
}

// roomy reports, without taking the lock, whether every change waiting
// and inTotal more are below the smaller of the object and the total
// bounds: then one more of any object may come.
func (p *pending) roomy(inTotal int) bool {
	return p.changes.Load()+int64(inTotal) < p.fastChanges && p.bytes.Load() < p.fastBytes
}

// admits reports whether one more change of k may come: k's sequence and
// the total, with the changes a gate let through that are not added yet
// (inKey of k's, inTotal in all), are below their bounds. When not, it
// returns a channel closed the next time changes leave.
func (p *pending) admits(k key, inKey, inTotal int) (bool, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.limits
	s := p.m[k]
	kn, kb := len(s.list), s.bytes
	if kn+inKey < l.ObjectChanges && kb < l.ObjectBytes && int(p.changes.Load())+inTotal < l.Changes && p.bytes.Load() < l.Bytes {
		return true, nil
	}
	if p.room == nil {
		p.room = make(chan struct{})
	}
	return false, p.room
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
	for k, s := range p.m {
		keep := s.list[:0:0]
		blocked := map[string]bool{} // UIDs with an unconfirmed change
		var gone int64
		for _, c := range s.list {
			uid := string(c.Object().GetUID())
			if !blocked[uid] && confirmed(c) {
				out = append(out, c)
				gone += c.queued
				continue
			}
			blocked[uid] = true
			keep = append(keep, c)
		}
		if n := len(s.list) - len(keep); n > 0 {
			s.list = keep
			p.leftLocked(k, s, n, gone)
		}
	}
	return out
}

// count returns how many waiting changes match.
func (p *pending) count(match func(*Change) bool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, s := range p.m {
		for _, c := range s.list {
			if match(c) {
				n++
			}
		}
	}
	return n
}

// lead ends the standby: each sequence goes through each, which returns
// what is left of it to hand to the workers (in order), and the keys
// with changes are returned for them.
func (p *pending) lead(each func(k key, list []*Change) []*Change) []key {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.standby = false
	keys := make([]key, 0, len(p.m))
	for k, s := range p.m {
		before := len(s.list)
		var bytes int64
		for _, c := range s.list {
			bytes += c.queued
		}
		s.list = each(k, s.list)
		var kept int64
		for _, c := range s.list {
			kept += c.queued
		}
		if len(s.list) < before {
			p.leftLocked(k, s, before-len(s.list), bytes-kept)
		}
		if len(s.list) > 0 {
			keys = append(keys, k)
		}
	}
	return keys
}

// The fixed part of a waiting change's memory: the Change and its place
// in the sequence, and an Object.
const (
	changeOverhead = int64(unsafe.Sizeof(Change{})) + 8
	objectOverhead = int64(unsafe.Sizeof(Object{}))
)

// size returns the bytes c holds on its own while it waits behind the
// change whose new object is prev (nil for none): the change, its new
// object (which the cache holds too until the next change replaces it),
// and its old one unless that is prev's (an update's old object is the
// state the cache held before it: once replaced there, only the change
// holds it).
func (c *Change) size(prev *Object) int64 {
	n := changeOverhead + objectSize(c.New)
	if c.Old != prev {
		n += objectSize(c.Old)
	}
	return n
}

// objectSize returns what o holds (0 for nil).
func objectSize(o *Object) int64 {
	if o == nil {
		return 0
	}
	return objectOverhead + int64(len(o.rest)+len(o.name)+len(o.resourceVersion))
}
