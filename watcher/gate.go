package watcher

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
)

// gatedWatch is the back-pressure of one informer's watch stream. The
// informer's handlers never block: they append every change to pending.
// What slows the watcher down when changes pile up is this gate between
// the apiserver's stream and the informer: before it lets an event
// through, the event's object and the total must be below their bounds
// (QueueLimits), counting the events it let through that the handlers
// have not applied yet. While it waits, the informer reads nothing more;
// the stream's buffers fill and the apiserver holds the events (or, past
// its patience, ends the watch, which the informer resumes from the last
// resourceVersion it applied). Lists are never held: a relist, or a
// watch-list's initial events, pass at once, so a resync or relist is
// never blocked, and the changes they make (one per object at most) count
// once they are in.
type gatedWatch struct {
	in   watch.Interface
	out  chan watch.Event
	stop chan struct{}
	once sync.Once
	rw   *resourceWatch
	// passed are the events let through whose callbacks have not run
	// yet, in order.
	passed []passedEvent
}

// passedEvent is an event let through, by resourceVersion.
type passedEvent struct {
	rv uint64
	k  key
}

// gateProgress is how an informer's handlers tell its gate what they
// applied: the resourceVersion of the last watch event handled, and a
// wake-up for a gate that waits.
type gateProgress struct {
	handled atomic.Uint64
	// untracked is set once a resourceVersion is not an integer: events
	// in flight are then not counted.
	untracked atomic.Bool
	waiting   atomic.Bool
	wake      chan struct{}
}

func newGateProgress() *gateProgress { return &gateProgress{wake: make(chan struct{}, 1)} }

// applied records that the callback of an event of resourceVersion rv
// ran.
func (g *gateProgress) applied(rv string) {
	if g == nil || rv == "" {
		return
	}
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		g.untracked.Store(true)
		return
	}
	for {
		cur := g.handled.Load()
		if n <= cur || g.handled.CompareAndSwap(cur, n) {
			break
		}
	}
	if g.waiting.Load() {
		select {
		case g.wake <- struct{}{}:
		default:
		}
	}
}

// gate wraps an informer's watch in its gate.
func (rw *resourceWatch) gate(in watch.Interface) watch.Interface {
	g := &gatedWatch{in: in, out: make(chan watch.Event), stop: make(chan struct{}), rw: rw}
	go g.run()
	return g
}

// ResultChan implements watch.Interface.
func (g *gatedWatch) ResultChan() <-chan watch.Event { return g.out }

// Stop implements watch.Interface.
func (g *gatedWatch) Stop() {
	g.once.Do(func() {
		close(g.stop)
		g.in.Stop()
	})
}

func (g *gatedWatch) run() {
	defer close(g.out)
	in := g.in.ResultChan()
	for {
		var e watch.Event
		var ok bool
		select {
		case e, ok = <-in:
			if !ok {
				return
			}
		case <-g.stop:
			return
		}
		if !g.admit(e) {
			return
		}
		select {
		case g.out <- e:
		case <-g.stop:
			return
		}
	}
}

// admit waits until e may pass, and counts it in flight. It returns false
// when the watch is stopped meanwhile.
func (g *gatedWatch) admit(e watch.Event) bool {
	if e.Type == watch.Bookmark && g.rw.resuming.Load() {
		if m, err := meta.Accessor(e.Object); err == nil && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" {
			g.rw.resuming.Store(false) // the watch resumed: no gap
		}
	}
	if e.Type != watch.Added && e.Type != watch.Modified && e.Type != watch.Deleted {
		return true // bookmarks and errors
	}
	if !g.rw.deliver.Load() {
		return true // its changes are not queued
	}
	if u, ok := e.Object.(*unstructured.Unstructured); ok {
		if _, listed := u.Object[listedKey]; listed {
			return true // a watch-list's initial events: a list
		}
	}
	if g.rw.resuming.Load() {
		g.rw.resuming.Store(false) // the watch resumed: no gap
	}
	m, err := meta.Accessor(e.Object)
	if err != nil {
		return true // the informer reports it
	}
	k := key{gr: groupResource(g.rw.res), namespace: m.GetNamespace(), name: m.GetName()}
	g.expire()
	if !g.rw.w.pending.roomy(len(g.passed)) && !g.wait(k) {
		return false
	}
	p := g.rw.progress
	if p.untracked.Load() {
		return true
	}
	rv, err := strconv.ParseUint(m.GetResourceVersion(), 10, 64)
	if err != nil {
		p.untracked.Store(true)
		return true
	}
	g.passed = append(g.passed, passedEvent{rv: rv, k: k})
	return true
}

// wait waits until one more change of k may come, near a bound. It
// returns false when the watch is stopped meanwhile.
func (g *gatedWatch) wait(k key) bool {
	p := g.rw.progress
	var since time.Time
	defer func() {
		p.waiting.Store(false)
		if !since.IsZero() {
			g.rw.waited.Add(time.Since(since).Seconds())
		}
	}()
	for {
		p.waiting.Store(true) // before looking: a callback meanwhile wakes us
		g.expire()
		inKey := 0
		for _, e := range g.passed {
			if e.k == k {
				inKey++
			}
		}
		ok, room := g.rw.w.pending.admits(k, inKey, len(g.passed))
		if ok {
			return true
		}
		if since.IsZero() {
			since = time.Now()
		}
		select {
		case <-room:
		case <-p.wake:
		case <-g.stop:
			return false
		}
	}
}

// expire forgets the events let through whose callbacks have run: the
// changes they made are in pending now.
func (g *gatedWatch) expire() {
	if len(g.passed) == 0 {
		return
	}
	if g.rw.progress.untracked.Load() {
		clear(g.passed)
		g.passed = g.passed[:0]
		return
	}
	handled := g.rw.progress.handled.Load()
	i := 0
	for i < len(g.passed) && g.passed[i].rv <= handled {
		i++
	}
	if i > 0 {
		n := copy(g.passed, g.passed[i:])
		clear(g.passed[n:])
		g.passed = g.passed[:n]
	}
}
