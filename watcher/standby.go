package watcher

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
)

// role holds the signals between a standby and its takeover.
type role struct {
	mu        sync.Mutex // serialises Confirm and the takeover
	lead      chan struct{}
	leadOnce  sync.Once
	abandoned chan struct{}
	abandon   sync.Once
	last      Watermarks // the leader's, as last confirmed or handed to TakeOver
	gaps      Gaps       // the leader's gaps, with last
	// confirmed is last, for Watermarks to read without mu.
	confirmed atomic.Pointer[Watermarks]
	own       Gaps // this replica's, from its takeover
	// held counts the changes waiting in the leader's gaps (Held).
	held atomic.Int64
}

func newRole() role {
	return role{lead: make(chan struct{}), abandoned: make(chan struct{})}
}

// tracker returns the watermark tracker of an informer key; nil (no
// tracking) when the watcher is neither in a leader election nor keeps a
// restart baseline.
func (w *Watcher) tracker(k watchKey) *tracker {
	if !w.cfg.Standby && w.cfg.Store == nil {
		return nil
	}
	w.trackersMu.Lock()
	defer w.trackersMu.Unlock()
	t := w.trackers[k]
	if t == nil {
		t = newTracker(k.watermarkKey(), func(key, rv string) {
			w.log.Warn("resourceVersions of this informer do not compare: it has no watermark (a restart compares with the baseline; a standby fires all its changes at takeover)",
				"informer", key, "resourceVersion", rv)
		})
		w.trackers[k] = t
	}
	return t
}

// Watermarks returns, for each informer delivering to the handler (also
// after Run returned), the resourceVersion up to which every change it
// received is done: handled by this replica (delivered or dead-lettered,
// as for the Store) or, on a standby, confirmed by the leader (never above
// the leader's last watermark: objects this standby found unchanged at its
// start are no writes a leader handled). Informers without one yet are
// absent.
// A leader publishes them (fieldwatch writes them on its Lease at every
// renewal) for its standbys' Confirm.
func (w *Watcher) Watermarks() Watermarks {
	w.mu.Lock()
	for _, rw := range w.watches {
		rw.track.progress(rw.storeRV())
	}
	w.mu.Unlock()
	w.trackersMu.Lock()
	trackers := slices.Collect(maps.Values(w.trackers))
	w.trackersMu.Unlock()
	var limit Watermarks
	standby := w.standby.Load()
	if p := w.role.confirmed.Load(); standby && p != nil {
		limit = *p
	}
	out := Watermarks{}
	for _, t := range trackers {
		if !t.active.Load() {
			continue
		}
		wm := t.watermark()
		if standby {
			confirmed, ok := limit[t.key]
			if !ok {
				continue // nothing confirmed for it
			}
			wm = t.capped(confirmed)
		}
		if wm != "" {
			out[t.key] = wm
		}
	}
	return out
}

// Confirm applies the leader's watermarks on a standby: each change
// waiting whose resourceVersion is at or below the watermark of its
// informer was handled by the leader; it is recorded in the Store (so that
// the baseline follows the leader's) and dropped. Changes of informers the
// leader has no watermark for wait. So do the writes this replica saw one
// by one in a gap of the leader (gaps: writes made before the leader's
// watch began that no leader before it confirmed): the leader never
// received them, whatever its watermark says; Held counts them. After the
// takeover Confirm does nothing.
func (w *Watcher) Confirm(leader Watermarks, gaps Gaps) {
	w.role.mu.Lock()
	defer w.role.mu.Unlock()
	if !w.standby.Load() {
		return
	}
	w.role.last, w.role.gaps = leader, gaps
	w.role.confirmed.Store(&leader)
	w.confirm(leader, gaps)
	held := 0
	if len(gaps) > 0 {
		held = w.pending.count(func(c *Change) bool { return inGap(c, gaps) })
	}
	w.role.held.Store(int64(held))
}

// Published returns what a leader publishes for its standbys: its
// Watermarks and its Gaps, taken together (never watermarks of after its
// takeover without the gaps it took over with).
func (w *Watcher) Published() (Watermarks, Gaps) {
	w.role.mu.Lock()
	defer w.role.mu.Unlock()
	return w.Watermarks(), maps.Clone(w.role.own)
}

// Held returns how many changes this standby holds that its leader never
// received: writes it saw one by one in a gap of the leader (Confirm). The
// leader cannot deliver them; this replica can, once it leads, so a
// leader hands over to a standby that holds some (fieldwatch asks it to
// on the Lease).
func (w *Watcher) Held() int { return int(w.role.held.Load()) }

// Gaps returns, once this replica leads, the gaps it took over with (nil
// before): per informer, the writes before its watch began that no leader
// before it confirmed. A leader publishes them with its Watermarks, so
// that a standby that saw those writes keeps them (Confirm).
func (w *Watcher) Gaps() Gaps {
	w.role.mu.Lock()
	defer w.role.mu.Unlock()
	return maps.Clone(w.role.own)
}

// inGap reports whether c is one write seen by a watch event in a gap of
// gaps: a change a leader with those gaps never received.
func inGap(c *Change, gaps Gaps) bool {
	if len(gaps) == 0 || c.bound == "" || c.mark == nil || c.uncertain || c.Observed != change.ObservedWatch {
		return false
	}
	t := c.mark.t
	g, ok := gaps[t.key]
	if !ok {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.covers(g, c.bound)
}

// confirm records and drops what leader confirms. w.role.mu is held.
func (w *Watcher) confirm(leader Watermarks, gaps Gaps) int {
	done := w.pending.confirm(func(c *Change) bool {
		if c.bound == "" || c.mark == nil || inGap(c, gaps) {
			return false
		}
		t := c.mark.t
		wm, ok := leader[t.key]
		if !ok {
			return false
		}
		t.mu.Lock()
		cmp, ok := t.cmp(c.bound, wm)
		t.mu.Unlock()
		return ok && cmp <= 0
	})
	for _, c := range done {
		w.cfg.Store.record(c)
		if w.cfg.Confirmed != nil {
			w.cfg.Confirmed(c)
		}
		c.finish()
	}
	w.baseline.confirmed.Add(float64(len(done)))
	return len(done)
}

// TakeOver makes a standby lead: once its informers have synced, it
// applies leader (the last watermarks of the previous leader, nil when
// there are none) and its gaps one last time and hands every change still
// waiting to the handler: exactly what the previous leader had not
// confirmed, with the old objects the standby recorded, the writes of its
// gaps included. Informers the previous leader published no watermark for
// fire everything they hold, except objects of an initial list this
// replica had no baseline for: with nothing to compare them with, and no
// leader known to have handled them, they are taken as the baseline, as
// on a first start. Where this replica's watch began after the previous
// leader's watermark, or within its gaps, it has gaps of its own (Gaps).
// TakeOver returns at once; it may be called before Run. Calls after the
// first do nothing.
func (w *Watcher) TakeOver(leader Watermarks, gaps Gaps) {
	w.role.mu.Lock()
	if leader != nil {
		w.role.last, w.role.gaps = leader, gaps
	}
	w.role.mu.Unlock()
	w.role.leadOnce.Do(func() { close(w.role.lead) })
}

// takeOver ends the standby (Run calls it once synced).
func (w *Watcher) takeOver() {
	w.role.mu.Lock()
	defer w.role.mu.Unlock()
	start := time.Now()
	leader, gaps := w.role.last, w.role.gaps
	confirmed := w.confirm(leader, gaps)
	type summary struct {
		fired, baseline int
		wm              string
		missing         bool
	}
	byKey := map[string]*summary{}
	types := map[change.Type]int{}
	keys := w.pending.lead(func(k key, list []*Change) []*Change {
		keep := list[:0]
		for _, c := range list {
			name := "(resource gone)"
			var wm string
			var has bool
			if c.mark != nil {
				name = c.mark.t.key
				wm, has = leader[name]
			}
			s := byKey[name]
			if s == nil {
				s = &summary{wm: wm, missing: !has && c.mark != nil}
				byKey[name] = s
			}
			if c.uncertain && !has {
				// No leader handled anything here that we know of:
				// the object is the baseline.
				w.cfg.Store.record(c)
				c.finish()
				s.baseline++
				continue
			}
			keep = append(keep, c)
			s.fired++
			types[c.Type]++
		}
		return keep
	})
	w.standby.Store(false)
	w.role.held.Store(0)
	// What the previous leader handled is done: this replica's watermarks
	// start from its. Where its watch began later, what lies between is
	// a gap.
	own := Gaps{}
	w.trackersMu.Lock()
	for _, t := range w.trackers {
		if !t.active.Load() {
			// Not delivering: no gap to publish.
		} else if g, ok := t.gap(leader, gaps); ok {
			own[t.key] = g
			w.log.Warn("taking over with a gap: this replica's watch began after the writes the previous leader had confirmed; a standby that saw them one by one gets the Lease handed over",
				"informer", t.key, "after", g.After, "through", g.Through)
		}
		if wm, ok := leader[t.key]; ok {
			t.seed(wm)
		}
	}
	w.trackersMu.Unlock()
	w.role.own = own
	for _, k := range keys {
		w.queue.Add(k)
	}
	for t, n := range types {
		w.baseline.takeover.WithLabelValues(string(t)).Add(float64(n))
	}
	names := slices.Sorted(maps.Keys(byKey))
	fired, missing := 0, 0
	for _, name := range names {
		s := byKey[name]
		fired += s.fired
		switch {
		case s.missing && s.fired > 0:
			missing++
			w.baseline.missing.Inc()
			w.log.Warn("taking over without a watermark of the previous leader for this informer: all its changes fire (some may repeat what a previous leader delivered, with the same ids)",
				"informer", name, "changes", s.fired, "baselineObjects", s.baseline)
		case s.missing:
			w.log.Info("no watermark of a previous leader for this informer: the objects found are the baseline",
				"informer", name, "objects", s.baseline)
		case s.fired > 0:
			w.log.Info("taking over: changes the previous leader had not confirmed fire",
				"informer", name, "watermark", s.wm, "changes", s.fired)
		}
	}
	w.log.Info("took over", "changes", fired, "objects", len(keys), "confirmed", confirmed,
		"informersWithoutWatermark", missing, "took", time.Since(start).String())
}

// Abandon stops handing changes to the handler at once, for a leader that
// lost its Lease: the handler's context is cancelled, the workers stop,
// and Run returns, when its context ends, without draining. What was not
// handled is left (not recorded in the Store) for the next leader.
func (w *Watcher) Abandon() {
	w.role.abandon.Do(func() { close(w.role.abandoned) })
}

// watermarkLag returns how long the oldest change not yet done has been
// waiting, over the informers in use (0 when none waits): a standby keeps
// the deletions of a resource that is gone until it takes over, which is
// no lag of the leader's.
func (w *Watcher) watermarkLag() float64 {
	w.trackersMu.Lock()
	trackers := slices.Collect(maps.Values(w.trackers))
	w.trackersMu.Unlock()
	var oldest time.Time
	for _, t := range trackers {
		if !t.active.Load() {
			continue
		}
		if at := t.oldest(); !at.IsZero() && (oldest.IsZero() || at.Before(oldest)) {
			oldest = at
		}
	}
	if oldest.IsZero() {
		return 0
	}
	return time.Since(oldest).Seconds()
}
