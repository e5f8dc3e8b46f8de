package watcher

import (
	"maps"
	"slices"
	"sync"
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
// as for the Store) or, on a standby, confirmed by the leader. Informers
// without one yet are absent.
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
	out := Watermarks{}
	for _, t := range trackers {
		if !t.active.Load() {
			continue
		}
		if wm := t.watermark(); wm != "" {
			out[t.key] = wm
		}
	}
	return out
}

// Confirm applies the leader's watermarks on a standby: each change
// waiting whose resourceVersion is at or below the watermark of its
// informer was handled by the leader; it is recorded in the Store (so that
// the baseline follows the leader's) and dropped. Changes of informers the
// leader has no watermark for wait. After the takeover Confirm does
// nothing.
func (w *Watcher) Confirm(leader Watermarks) {
	w.role.mu.Lock()
	defer w.role.mu.Unlock()
	if !w.standby.Load() {
		return
	}
	w.role.last = leader
	w.confirm(leader)
}

// confirm records and drops what leader confirms. w.role.mu is held.
func (w *Watcher) confirm(leader Watermarks) int {
	done := w.pending.confirm(func(c *Change) bool {
		if c.bound == "" || c.mark == nil {
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
// there are none) one last time and hands every change still waiting to
// the handler: exactly what the previous leader had not confirmed, with
// the old objects the standby recorded. Informers the previous leader
// published no watermark for fire everything they hold, except objects of
// an initial list this replica had no baseline for: with nothing to
// compare them with, and no leader known to have handled them, they are
// taken as the baseline, as on a first start. TakeOver returns at once; it
// may be called before Run. Calls after the first do nothing.
func (w *Watcher) TakeOver(leader Watermarks) {
	w.role.mu.Lock()
	if leader != nil {
		w.role.last = leader
	}
	w.role.mu.Unlock()
	w.role.leadOnce.Do(func() { close(w.role.lead) })
}

// takeOver ends the standby (Run calls it once synced).
func (w *Watcher) takeOver() {
	w.role.mu.Lock()
	defer w.role.mu.Unlock()
	start := time.Now()
	leader := w.role.last
	confirmed := w.confirm(leader)
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
	// What the previous leader handled is done: this replica's watermarks
	// start from its.
	w.trackersMu.Lock()
	for _, t := range w.trackers {
		if wm, ok := leader[t.key]; ok {
			t.seed(wm)
		}
	}
	w.trackersMu.Unlock()
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
