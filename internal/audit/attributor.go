package audit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
)

// The defaults of AttributorOptions.
const (
	DefaultWait       = 2 * time.Second
	DefaultMaxWaiting = 10000
)

// ErrClosed is returned by Submit after Close.
var ErrClosed = errors.New("audit attributor closed")

// AttributorOptions set how long changes wait for their audit events.
type AttributorOptions struct {
	// Wait is how long a change waits at most for its audit event (default
	// 2s).
	Wait time.Duration
	// MaxWaiting is how many changes may wait at once (default 10000);
	// Submit blocks while that many wait.
	MaxWaiting int
	// Clock is the time source; it must be the Index's (default the real
	// clock).
	Clock Clock
	// Metrics receive the match counts (default unregistered ones).
	Metrics *Metrics
	// Sources names the sources an unmatched change was looked for in, as
	// its Attribution's Source (default change.SourceAudit).
	Sources string
}

func (o *AttributorOptions) defaults() {
	if o.Wait <= 0 {
		o.Wait = DefaultWait
	}
	if o.MaxWaiting <= 0 {
		o.MaxWaiting = DefaultMaxWaiting
	}
	if o.Clock == nil {
		o.Clock = RealClock{}
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	if o.Sources == "" {
		o.Sources = change.SourceAudit
	}
}

// Attributor attributes watched changes, waiting a bounded time for audit
// events that have not arrived yet. Its contract:
//
//   - Submit's callback gets the change's Attribution as soon as a fitting
//     audit event is in the Index, or with change.MatchNone once Wait has
//     passed since Submit;
//   - callbacks of one object run one at a time, in submission order: a
//     change waits behind the earlier changes of its object (their own
//     bounds pass first, so its bound holds), and its callback runs after
//     theirs returned;
//   - changes of different objects never wait for each other, and their
//     callbacks run concurrently;
//   - at most MaxWaiting changes wait; Submit blocks beyond that
//     (back-pressure, nothing is dropped);
//   - a Listed change (learned from a list) waits only for the earlier
//     changes of its object, then is matched with what the Index holds.
//
// When the event is already held and nothing of the object is pending,
// Submit runs the callback on the caller's goroutine before it returns,
// with no timer and no goroutine (and the callbacks of the same object that
// other goroutines submit meanwhile). Otherwise callbacks run on goroutines
// of the Attributor. Callbacks must not call Submit for their own object
// and wait for it.
//
// It matches each change against the Index:
//
//   - exact: the audit event's responseObject (RequestResponse level)
//     carries the object's uid and the change's resourceVersion;
//   - window: Metadata or Request level, so no resourceVersion: one audit
//     event of a verb that fits the change, with a 2xx response, on the
//     same object, whose request was received no later than the change
//     was observed (plus the allowed clock skew) and which completed within
//     the match window of it. When the candidates are several writes by
//     the same identity, the user is certain and the request-level fields
//     that differ between them (auditID at least) are left out. When every
//     candidate was held before the change was observed, the change is
//     decided only when its wait is over: such an event may be another
//     request's (a no-op write, an event posted ahead of the apiserver's),
//     and the change's own, when it comes, makes it ambiguous or exact;
//   - ambiguous: candidates by different identities: the usernames are
//     listed and no user is named. fieldwatch never guesses;
//   - none: nothing fitted within the wait bound (the policy does not audit
//     the resource, the event was lost or is later than the bound).
//
// The verbs that fit: create for a creation (and, weakly, the update or
// patch of create-on-update and server-side apply); update and patch for an
// update, delete, deletecollection and pods/eviction for one that set
// metadata.deletionTimestamp; those for a deletion (and, weakly, the update
// or patch that removed the last finalizer of a terminating object). A
// change that only weak candidates fit is decided when its wait is over, in
// case its own request is still on its way.
//
// Attribution at Metadata level is as good as the timing: a no-op patch
// (audited, but producing no watch event) by another user shortly before a
// real change can be taken for it when its event arrives after the change
// was observed and before the real change's own (a no-op update is
// recognised when the change gives its previous resourceVersion). Exact
// matching (RequestResponse level for the resources where it matters) has
// no such limit.
type Attributor struct {
	ix   *Index
	opts AttributorOptions
	m    *Metrics
	// slots holds a token per waiting change: the MaxWaiting bound.
	slots  chan struct{}
	closed chan struct{}

	mu      sync.Mutex
	objects map[objectKey]*objectQueue
	// byScope finds the queues of a group/resource/namespace that have
	// waiting changes, for the events that name no object (generateName,
	// deletecollection).
	byScope   map[objectKey]map[*objectQueue]struct{}
	deadlines []*waiter // in submission order, which is deadline order
	dhead     int
	timer     Timer
	timerAt   time.Time
	done      bool
	drainers  sync.WaitGroup
	nwaiting  int // unresolved changes
}

// objectQueue is the pending work of one object.
type objectQueue struct {
	key     objectKey
	waiting []*waiter // unresolved, in submission order
	ready   []readyCall
	running bool // a goroutine (or Submit's caller) runs ready's callbacks
}

type readyCall struct {
	cb func(change.Attribution)
	a  change.Attribution
}

type waiter struct {
	c         Change
	cb        func(change.Attribution)
	submitted time.Time
	deadline  time.Time
	q         *objectQueue
	resolved  bool
}

// NewAttributor returns an Attributor matching against ix. An Index serves
// one Attributor.
func NewAttributor(ix *Index, opts AttributorOptions) *Attributor {
	opts.defaults()
	a := &Attributor{
		ix:      ix,
		opts:    opts,
		m:       opts.Metrics,
		slots:   make(chan struct{}, opts.MaxWaiting),
		closed:  make(chan struct{}),
		objects: map[objectKey]*objectQueue{},
		byScope: map[objectKey]map[*objectQueue]struct{}{},
	}
	ix.mu.Lock()
	ix.notify = a.eventsArrived
	ix.mu.Unlock()
	return a
}

// Submit attributes c and calls cb with the result (see Attributor). It
// blocks while MaxWaiting changes wait, until ctx ends (its error is
// returned and cb is never called) or Close (ErrClosed).
func (a *Attributor) Submit(ctx context.Context, c Change, cb func(change.Attribution)) error {
	if c.Type != change.Created && c.Type != change.Updated && c.Type != change.Deleted || c.Resource == "" || c.Name == "" {
		return fmt.Errorf("audit: change %s %s/%s of kind %s cannot be attributed", c.Resource, c.Namespace, c.Name, c.Type)
	}
	key := c.key()
	a.mu.Lock()
	if a.done {
		a.mu.Unlock()
		return ErrClosed
	}
	q := a.objects[key]
	if q == nil {
		// The fast path: nothing of this object is pending.
		if res, ok := a.matchNow(&c); ok {
			// q marks the object busy while cb runs: a Submit for it from
			// another goroutine meanwhile queues behind, and runs here.
			q = &objectQueue{key: key, running: true}
			a.objects[key] = q
			a.drainers.Add(1)
			a.mu.Unlock()
			defer a.drainers.Done()
			a.count(res, 0)
			cb(res)
			a.drain(q)
			return nil
		}
	} else if len(q.waiting) == 0 {
		if res, ok := a.matchNow(&c); ok {
			a.count(res, 0)
			a.readyLocked(q, cb, res)
			a.mu.Unlock()
			return nil
		}
	}
	a.mu.Unlock()

	select {
	case a.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-a.closed:
		return ErrClosed
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done {
		<-a.slots
		return ErrClosed
	}
	q = a.objects[key]
	if q == nil || len(q.waiting) == 0 {
		// An event may have arrived while Submit waited for a slot.
		if res, ok := a.matchNow(&c); ok {
			<-a.slots
			a.count(res, 0)
			if q == nil {
				q = &objectQueue{key: key}
				a.objects[key] = q
			}
			a.readyLocked(q, cb, res)
			return nil
		}
	}
	if q == nil {
		q = &objectQueue{key: key}
		a.objects[key] = q
	}
	now := a.opts.Clock.Now()
	w := &waiter{c: c, cb: cb, submitted: now, deadline: now.Add(a.opts.Wait), q: q}
	if len(q.waiting) == 0 {
		a.scopeAddLocked(q)
	}
	q.waiting = append(q.waiting, w)
	a.deadlines = append(a.deadlines, w)
	a.nwaiting++
	a.m.waiting.Inc()
	a.armLocked(now)
	return nil
}

// matchNow matches c against the events held now, when nothing of its
// object waits: ok is false when c must wait. A Listed change never waits:
// it is change.MatchNone when nothing fits.
func (a *Attributor) matchNow(c *Change) (change.Attribution, bool) {
	res, ok := a.ix.match(c, c.Listed)
	if !ok && c.Listed {
		return change.Attribution{Match: change.MatchNone, Source: a.opts.Sources}, true
	}
	return res, ok
}

// eventsArrived re-examines the objects that got new events.
func (a *Attributor) eventsArrived(keys []objectKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done {
		return
	}
	for _, k := range keys {
		if k.name == "" {
			for q := range a.byScope[objectKey{group: k.group, resource: k.resource, namespace: k.namespace}] {
				a.resolveLocked(q, false)
			}
			continue
		}
		if q := a.objects[k]; q != nil {
			a.resolveLocked(q, false)
		}
	}
}

// resolveLocked resolves q's waiting changes in order while they match;
// with expired, a change whose deadline has passed resolves unmatched.
func (a *Attributor) resolveLocked(q *objectQueue, expired bool) {
	now := a.opts.Clock.Now()
	for len(q.waiting) > 0 {
		w := q.waiting[0]
		// A Listed change waits only for the changes before it.
		due := w.c.Listed || expired && !now.Before(w.deadline)
		res, ok := a.ix.match(&w.c, due)
		if !ok {
			if !due {
				return
			}
			res = change.Attribution{Match: change.MatchNone, Source: a.opts.Sources}
		}
		q.waiting[0] = nil
		q.waiting = q.waiting[1:]
		w.resolved = true
		<-a.slots
		a.nwaiting--
		a.m.waiting.Dec()
		a.count(res, sinceOrZero(now, w.submitted))
		a.readyLocked(q, w.cb, res)
	}
	q.waiting = nil
	a.scopeRemoveLocked(q)
	if !q.running && len(q.ready) == 0 {
		delete(a.objects, q.key)
	}
}

// readyLocked queues cb's call behind q's earlier ones, starting a
// goroutine to run them unless one runs.
func (a *Attributor) readyLocked(q *objectQueue, cb func(change.Attribution), res change.Attribution) {
	q.ready = append(q.ready, readyCall{cb: cb, a: res})
	if q.running {
		return
	}
	q.running = true
	a.drainers.Add(1)
	go func() {
		defer a.drainers.Done()
		a.drain(q)
	}()
}

// drain runs q's ready callbacks in order until none is left, then lets q
// go when nothing of it is pending. The caller has set q.running.
func (a *Attributor) drain(q *objectQueue) {
	for {
		a.mu.Lock()
		if len(q.ready) == 0 {
			q.running = false
			q.ready = nil
			if len(q.waiting) == 0 && a.objects[q.key] == q {
				delete(a.objects, q.key)
			}
			a.mu.Unlock()
			return
		}
		call := q.ready[0]
		q.ready[0] = readyCall{}
		q.ready = q.ready[1:]
		a.mu.Unlock()
		call.cb(call.a)
	}
}

// armLocked makes sure the timer fires at the earliest pending deadline.
func (a *Attributor) armLocked(now time.Time) {
	for a.dhead < len(a.deadlines) && a.deadlines[a.dhead].resolved {
		a.deadlines[a.dhead] = nil
		a.dhead++
	}
	if a.dhead > 0 && a.dhead >= len(a.deadlines)-a.dhead {
		n := copy(a.deadlines, a.deadlines[a.dhead:])
		clear(a.deadlines[n:])
		a.deadlines = a.deadlines[:n]
		a.dhead = 0
	}
	if a.dhead == len(a.deadlines) {
		return
	}
	next := a.deadlines[a.dhead].deadline
	if a.timer != nil && !a.timerAt.IsZero() && !a.timerAt.After(next) {
		return // armed for this deadline or an earlier one
	}
	d := next.Sub(now)
	if a.timer == nil {
		a.timer = a.opts.Clock.AfterFunc(d, a.expire)
	} else {
		a.timer.Reset(d)
	}
	a.timerAt = next
}

// expire resolves the changes whose deadline has passed, and the ones
// behind them that match by now.
func (a *Attributor) expire() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.timerAt = time.Time{}
	if a.done {
		return
	}
	now := a.opts.Clock.Now()
	for a.dhead < len(a.deadlines) {
		w := a.deadlines[a.dhead]
		if !w.resolved {
			if now.Before(w.deadline) {
				break
			}
			a.resolveLocked(w.q, true)
		}
		a.deadlines[a.dhead] = nil
		a.dhead++
	}
	a.armLocked(now)
}

func (a *Attributor) scopeAddLocked(q *objectQueue) {
	s := objectKey{group: q.key.group, resource: q.key.resource, namespace: q.key.namespace}
	set := a.byScope[s]
	if set == nil {
		set = map[*objectQueue]struct{}{}
		a.byScope[s] = set
	}
	set[q] = struct{}{}
}

func (a *Attributor) scopeRemoveLocked(q *objectQueue) {
	s := objectKey{group: q.key.group, resource: q.key.resource, namespace: q.key.namespace}
	if set := a.byScope[s]; set != nil {
		delete(set, q)
		if len(set) == 0 {
			delete(a.byScope, s)
		}
	}
}

func (a *Attributor) count(res change.Attribution, waited time.Duration) {
	switch res.Match {
	case change.MatchExact:
		a.m.matchExact.Inc()
	case change.MatchWindow:
		a.m.matchWindow.Inc()
	case change.MatchAmbiguous:
		a.m.matchAmbig.Inc()
	default:
		a.m.unmatched.Inc()
	}
	a.m.wait.Observe(waited.Seconds())
}

// Drain waits until no change waits any more (each has had its event or
// its bound), polling every interval, or until ctx ends; callbacks may
// still be running. Call it on shutdown, after the last Submit and before
// Close, so that the last changes keep their chance of an attribution.
func (a *Attributor) Drain(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		a.mu.Lock()
		n := a.nwaiting
		a.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Close stops waiting: every waiting change is resolved at once with what
// the index holds (change.MatchNone when nothing fits), and Close returns
// when all callbacks have returned (so it must not be called from one).
// Submit fails with ErrClosed afterwards.
func (a *Attributor) Close() {
	a.mu.Lock()
	if a.done {
		a.mu.Unlock()
		a.drainers.Wait()
		return
	}
	a.done = true
	close(a.closed)
	if a.timer != nil {
		a.timer.Stop()
	}
	for a.dhead < len(a.deadlines) {
		w := a.deadlines[a.dhead]
		if !w.resolved {
			w.deadline = time.Time{} // due now
			for _, o := range w.q.waiting {
				o.deadline = time.Time{}
			}
			a.resolveLocked(w.q, true)
		}
		a.deadlines[a.dhead] = nil
		a.dhead++
	}
	a.mu.Unlock()
	a.drainers.Wait()
}
