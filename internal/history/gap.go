package history

import (
	"context"
	"encoding/json"
	"time"
)

// Why payloads were not kept, the keys of GapBody.Reasons.
const (
	gapQueueFull   = "queueFull"   // the queue was full
	gapStopped     = "stopped"     // fieldwatch stopped before writing them
	gapStoreFailed = "storeFailed" // the store refused them past the retries
	gapInvalid     = "invalid"     // not a payload
	gapBehind      = "behind"      // left out by the caller (Recorder.Drop)
)

// gap is what was not kept since the last gap record: it becomes one
// when the store takes it.
type gap struct {
	body GapBody
}

// add counts n payloads not kept for reason, at time at, with their id
// when known.
func (g *gap) add(reason string, n int64, at time.Time, id string) {
	b := &g.body
	if b.Count == 0 || at.Before(b.From) {
		b.From = at
	}
	if at.After(b.To) {
		b.To = at
	}
	b.Count += n
	if b.Reasons == nil {
		b.Reasons = map[string]int64{}
	}
	b.Reasons[reason] += n
	if id != "" && len(b.IDs) < MaxGapIDs {
		b.IDs = append(b.IDs, id)
	}
}

// addQueued counts queued payloads not kept (states are not counted).
func (g *gap) addQueued(reason string, qs []queued) {
	for i := range qs {
		if qs[i].state != nil {
			continue // a state (RecordState) is no entry of the trail
		}
		at, id := qs[i].at, ""
		if e := qs[i].entry; e != nil {
			at, id = e.Time, e.ID
		}
		g.add(reason, 1, at, id)
	}
}

// addEntries counts entries not kept.
func (g *gap) addEntries(reason string, es []Entry) {
	for i := range es {
		g.add(reason, 1, es[i].Time, es[i].ID)
	}
}

// noteGap adds to the gap not yet written (under r.mu) and wakes the
// writer, which writes it.
func (r *Recorder) noteGap(fn func(g *gap)) {
	r.mu.Lock()
	fn(&r.gap)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// gapPending reports whether a gap waits to be written.
func (r *Recorder) gapPending() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gap.body.Count > 0
}

// writeGap appends the gap not yet written as one record, before the
// entries that come after it. When the store does not take it, it is
// kept, and grows, until the store does: the record then says where the
// trail is incomplete, as far as the store's outage allows.
func (r *Recorder) writeGap(ctx context.Context) {
	if r.trail == nil {
		return
	}
	r.mu.Lock()
	g := r.gap
	r.gap = gap{}
	r.mu.Unlock()
	if g.body.Count == 0 {
		return
	}
	g.body.From, g.body.To = g.body.From.UTC(), g.body.To.UTC()
	body, _ := json.Marshal(g.body)
	if err := r.trail.Append(ctx, []Record{{Kind: LinkGap, Body: body}}); err != nil {
		r.m.trail.WithLabelValues(string(LinkGap), "failed").Inc()
		r.gapFailed = time.Now()
		r.mu.Lock()
		merged := g
		merged.merge(&r.gap)
		r.gap = merged
		r.mu.Unlock()
		if ctx.Err() == nil {
			r.errLog.Do(func() { r.log.Error("history trail: gap record not written; tried again later", "error", err) })
		}
		return
	}
	r.m.trail.WithLabelValues(string(LinkGap), "written").Inc()
	r.linked(1)
}

// merge adds what o counts to g.
func (g *gap) merge(o *gap) {
	for reason, n := range o.body.Reasons {
		g.add(reason, n, o.body.From, "")
	}
	if o.body.To.After(g.body.To) {
		g.body.To = o.body.To
	}
	for _, id := range o.body.IDs {
		if len(g.body.IDs) < MaxGapIDs {
			g.body.IDs = append(g.body.IDs, id)
		}
	}
}
