package watcher

import (
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/resourceversion"

	"github.com/fieldwatch/fieldwatch/change"
)

// Watermarks maps an informer to the resourceVersion up to which every
// change it received is done: handled by this replica, or confirmed
// handled by the leader it stood by for. A leader publishes its
// Watermarks; a standby applies the leader's with Confirm. An informer is
// named by its resource ("resource.version.group", kubectl's form) and,
// when it watches one namespace only, "/namespace": the resourceVersions
// of different informers are never compared with each other.
type Watermarks map[string]string

// Gap is a range of resourceVersions of one informer, above After and up
// to Through, whose writes a leader did not see one by one: its informer's
// watch began at Through (a list then, at the latest), and no leader before
// it confirmed them (After is the highest watermark it took over with, or
// reached as a standby). A standby that saw a write of the gap one by one
// does not take the leader's watermark for a confirmation of it: it keeps
// it, and the leader hands over to that standby (see Watcher.Held).
type Gap struct {
	After   string `json:"after"`
	Through string `json:"through"`
}

// Gaps maps an informer, named as in Watermarks, to the gap of a leader.
type Gaps map[string]Gap

// covers reports whether rv is in g.
func (t *tracker) covers(g Gap, rv string) bool {
	above, ok1 := t.cmp(rv, g.After)
	upTo, ok2 := t.cmp(rv, g.Through)
	return ok1 && ok2 && above > 0 && upTo <= 0
}

// gap returns the gap of this informer for a replica that takes over with
// leader's watermarks and gaps: from the highest watermark known handled
// (the previous leader's, or the previous run's when the watch replayed
// from it) to where its watch began, and the part of the previous leader's
// gap below where its watch began (the rest this replica saw one by one,
// and delivers). No watermark of the previous leader for this informer: no
// gap (nothing was handled before, as on a first start).
func (t *tracker) gap(leader Watermarks, gaps Gaps) (Gap, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	wm, ok := leader[t.key]
	if !ok || t.broken {
		return Gap{}, false
	}
	var g Gap
	has := false
	handled := t.maxRV(wm, t.covered)
	if c, ok := t.cmp(handled, t.from); ok && c < 0 && t.from != "" {
		g, has = Gap{After: handled, Through: t.from}, true
	}
	if pg, ok := gaps[t.key]; ok {
		through := pg.Through
		if c, ok := t.cmp(t.from, through); ok && c < 0 && t.from != "" {
			through = t.from
		}
		if c, ok := t.cmp(pg.After, through); ok && c < 0 {
			if has {
				// One range for both: what lies between is only
				// held again by a standby, never lost.
				g = Gap{After: t.minRV(g.After, pg.After), Through: t.maxRV(g.Through, through)}
			} else {
				g, has = Gap{After: pg.After, Through: through}, true
			}
		}
	}
	return g, has && !t.broken
}

// minRV returns the lower of two resourceVersions (a when they do not
// compare).
func (t *tracker) minRV(a, b string) string {
	if c, ok := t.cmp(a, b); ok && c > 0 {
		return b
	}
	return a
}

// watermarkKey names the informer of key in Watermarks.
func (k watchKey) watermarkKey() string {
	r := change.Resource{Group: k.gvr.Group, Version: k.gvr.Version, Resource: k.gvr.Resource}
	if k.namespace == "" {
		return r.String()
	}
	return r.String() + "/" + k.namespace
}

// tracker follows the changes of one informer key and computes its
// watermark. Only a watcher in a leader election has trackers; the
// methods of a nil tracker do nothing.
//
// Each change gets a mark when the informer hands it on. Its seq is the
// resourceVersion of the informer's cache when the change was made: the
// cache applies events in order and is updated before the handlers run,
// so seq is at or above the resourceVersion of the event behind the change
// (a relist's changes all get the list's resourceVersion), and seqs never
// decrease in arrival order. A seq is complete once every change of it
// has its mark: when the cache has moved beyond it, or at once when a
// watch event's own resourceVersion equals it (the last event of a batch;
// not inside a relist, whose objects carry older versions in any order).
//
// The watermark is the highest complete seq at or below which every mark
// is done. It never decreases and never claims more than was done: a mark
// registered at a seq is done before the watermark reaches that seq.
type tracker struct {
	key string
	// active is set while a selected resource's informer uses the
	// tracker (also once Run stopped it): its watermark is published.
	active atomic.Bool

	mu      sync.Mutex
	marks   []*mark // in arrival order; seq never decreases
	lastSeq string  // seq of the last callback or mark
	// complete is the highest seq known to have all its marks.
	complete string
	// ready is false until the informer's initial list is fully handed
	// on: until then nothing completes, so that the deletions found at
	// the end of the initial list are marked before the watermark moves.
	ready bool
	// initialSeq is the seq of the initial list's callbacks, firstList
	// the resourceVersion of the initial list (the seq it completes when
	// it had no objects).
	initialSeq, firstList string
	// from is the resourceVersion of the informer's last list: its watch
	// has seen every write since one by one (a replay lists at the
	// previous run's watermark). covered is the watermark a replay
	// started from: every write up to it was handled (or, by a standby,
	// confirmed) by the previous run.
	from, covered string
	// lists are the resourceVersions of the informer's lists, where the
	// last-event rule does not apply.
	lists map[string]bool
	// runSeq is the seq of the last mark popped, beforeRun the distinct
	// seq popped before it: complete seqs the watermark may stop at.
	runSeq, beforeRun string
	wm                string
	// broken is set when a resourceVersion does not compare (not an
	// integer): the informer then has no watermark.
	broken   bool
	onBroken func(key, rv string)
}

// mark is one change's entry in a tracker.
type mark struct {
	t    *tracker
	seq  string
	done bool
	at   time.Time // received, for the lag
}

func newTracker(key string, onBroken func(key, rv string)) *tracker {
	return &tracker{key: key, lists: map[string]bool{}, onBroken: onBroken}
}

// cmp compares two resourceVersions; ok is false (and the tracker broken)
// when one is not an integer. "" is below everything.
func (t *tracker) cmp(a, b string) (int, bool) {
	switch {
	case a == b:
		return 0, true
	case a == "":
		return -1, true
	case b == "":
		return 1, true
	}
	c, err := resourceversion.CompareResourceVersion(a, b)
	if err != nil {
		if _, aerr := resourceversion.CompareResourceVersion(a, a); aerr != nil {
			t.breakOn(a)
		} else {
			t.breakOn(b)
		}
		return 0, false
	}
	return c, true
}

// breakOn gives up the watermark because of the resourceVersion rv.
func (t *tracker) breakOn(rv string) {
	if !t.broken {
		t.broken = true
		if t.onBroken != nil {
			t.onBroken(t.key, rv)
		}
	}
}

// maxRV returns the higher of two resourceVersions (a when they do not
// compare).
func (t *tracker) maxRV(a, b string) string {
	if c, ok := t.cmp(a, b); ok && c < 0 {
		return b
	}
	return a
}

// add registers a change at the cache's resourceVersion storeRV and
// returns its mark.
func (t *tracker) add(storeRV string, now time.Time) *mark {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := &mark{t: t, seq: t.at(storeRV), at: now}
	t.marks = append(t.marks, m)
	return m
}

// observed records a handler callback at the cache's resourceVersion
// storeRV for an object of resourceVersion objRV, once the callback has
// registered its marks. initial says the callback is one of the initial
// list's.
func (t *tracker) observed(storeRV, objRV string, initial bool) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	seq := t.at(storeRV)
	if initial {
		t.initialSeq = seq
		return
	}
	if objRV == seq && !t.lists[seq] {
		// A watch event carrying the cache's resourceVersion is the
		// last one applied: no other callback of this seq follows.
		t.setComplete(seq)
	}
}

// at moves the tracker to the cache's resourceVersion storeRV and returns
// the seq of a callback there. t.mu is held.
func (t *tracker) at(storeRV string) string {
	if storeRV == "" {
		// client-go keeps no resourceVersion in the cache (its
		// AtomicFIFO feature is disabled): nothing orders the changes.
		t.breakOn(storeRV)
		return t.lastSeq
	}
	if c, ok := t.cmp(storeRV, t.lastSeq); ok && c > 0 {
		// The cache moved on: every callback of the previous seq ran.
		if t.lastSeq != "" {
			t.setComplete(t.lastSeq)
		}
		t.lastSeq = storeRV
	}
	return t.lastSeq
}

// listed records the resourceVersion of a list (or of a watch-list's
// end), before the informer applies it.
func (t *tracker) listed(rv string) {
	if t == nil || rv == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lists[rv] = true
	t.from = rv
	if t.firstList == "" {
		t.firstList = rv
	}
}

// replayed records that the informer lists at rv, the previous run's
// watermark, to replay the writes since.
func (t *tracker) replayed(rv string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.covered = t.maxRV(t.covered, rv)
}

// capped returns the watermark, at most at rv (a standby's: what the
// leader confirmed); "" when they do not compare.
func (t *tracker) capped(rv string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	wm := t.advance()
	if wm == "" {
		return ""
	}
	return t.minRV(wm, rv)
}

// progress tells the tracker the cache's resourceVersion now, read
// outside the callbacks: when it is above the last callback's, that seq is
// complete.
func (t *tracker) progress(storeRV string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if c, ok := t.cmp(storeRV, t.lastSeq); ok && c > 0 && t.lastSeq != "" {
		t.setComplete(t.lastSeq)
	}
}

// stopped tells the tracker that its informer stopped: no callback of the
// last seq is left to run.
func (t *tracker) stopped() {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.setComplete(t.lastSeq)
}

// setActive says whether a selected resource's informer uses the tracker.
func (t *tracker) setActive(on bool) {
	if t != nil {
		t.active.Store(on)
	}
}

// seed raises the watermark to rv, a watermark the previous leader
// published for this informer: what it handled is done.
func (t *tracker) seed(rv string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.wm = t.maxRV(t.wm, rv)
}

// restart makes the tracker wait for a new informer's initial list.
func (t *tracker) restart() {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ready = false
	t.initialSeq, t.firstList = "", ""
}

// initialDone makes the tracker ready once the informer's initial list,
// with the deletions found at its end, is handed on: the initial list's
// seq is complete then.
func (t *tracker) initialDone() {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ready = true
	switch {
	case t.initialSeq != "":
		t.setComplete(t.initialSeq)
	case t.firstList != "":
		// No object: nothing at or below the list waits.
		t.setComplete(t.firstList)
	}
}

// setComplete raises complete to seq. t.mu is held.
func (t *tracker) setComplete(seq string) {
	t.complete = t.maxRV(t.complete, seq)
	// Forget list versions the cache has passed.
	for rv := range t.lists {
		if c, ok := t.cmp(rv, t.complete); ok && c < 0 {
			delete(t.lists, rv)
		}
	}
}

// finish marks m done, and lets the tracker drop the marks it no longer
// needs.
func (m *mark) finish() {
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	m.done = true
	m.t.advance()
}

// watermark advances and returns the watermark ("" when there is none).
func (t *tracker) watermark() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.advance()
}

// advance pops the done marks at complete seqs and raises wm. t.mu is
// held.
func (t *tracker) advance() string {
	if t.broken {
		return ""
	}
	if !t.ready || t.complete == "" {
		return t.wm
	}
	i := 0
	for ; i < len(t.marks); i++ {
		m := t.marks[i]
		c, ok := t.cmp(m.seq, t.complete)
		if !ok || !m.done || c > 0 {
			break
		}
		if m.seq != t.runSeq {
			t.beforeRun, t.runSeq = t.runSeq, m.seq
		}
	}
	clear(t.marks[:i])
	t.marks = t.marks[i:]
	cand := t.complete
	if len(t.marks) > 0 {
		first := t.marks[0]
		if c, ok := t.cmp(first.seq, t.complete); ok && c <= 0 {
			// first is waiting at a complete seq: stop below it.
			cand = t.runSeq
			if first.seq == t.runSeq {
				cand = t.beforeRun
			}
		}
	}
	if t.broken {
		return ""
	}
	t.wm = t.maxRV(t.wm, cand)
	return t.wm
}

// oldest returns when the oldest change not done was received (zero when
// every change is done).
func (t *tracker) oldest() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range t.marks {
		if !m.done {
			return m.at
		}
	}
	return time.Time{}
}
