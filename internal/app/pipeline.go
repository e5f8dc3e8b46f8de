package app

import (
	"context"
	"sync/atomic"

	"golang.org/x/time/rate"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/audit"
	"github.com/fieldwatch/fieldwatch/internal/history"
	"github.com/fieldwatch/fieldwatch/rules"
	"github.com/fieldwatch/fieldwatch/watcher"
)

// pipeline is the watcher's handler: it evaluates a change against the
// current rules and hands each firing to the actions. Deliver blocks while
// an action's queue is full, which is how a slow receiver slows the watcher
// instead of losing firings.
//
// With attribution (an audit source, admission), who made the change must be known
// before the rules are evaluated (match.users, the CEL actor): Handle
// submits the change to the Attributor and returns; evaluation and
// delivery happen in its callback, once the change's audit event is in or
// its wait is over, in order per object. The change stays deferred until
// its actions are done, as without attribution. inflight bounds the
// changes between Submit and the end of their callback (waiting for their
// event or for room in an action's queue): when it is full, Handle blocks
// and the watcher slows down.
type pipeline struct {
	app *app
	// errLog lets one evaluation error a second through to the log.
	errLog rate.Sometimes
	// att is nil without an audit source.
	att *attribution
}

var _ watcher.Handler = &pipeline{}

// Handle implements watcher.Handler.
func (p *pipeline) Handle(ctx context.Context, c *watcher.Change) error {
	set := p.app.set.Load()
	if len(set.RulesFor(c.Resource)) == 0 {
		return nil // no rule watches this resource (any more)
	}
	rc := rulesChange(c)
	rc.Cluster = p.app.cfg.ClusterName
	if set.WantsCRDImpact(rc) {
		// From the cache as it is now, before any wait.
		p.app.crdImpact(ctx, c, rc)
	}
	if p.att == nil {
		p.app.recordState(set, rc, history.Delivered)
		firings := p.evaluate(set, c, rc)
		if len(firings) == 0 {
			return nil
		}
		return p.deliver(ctx, firings, c.Defer())
	}

	ac := auditChange(c, rc)
	select {
	case p.att.inflight <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err() // shutting down: the watcher keeps the change queued
	}
	done := c.Defer()
	err := p.att.at.Submit(ctx, ac, func(a change.Attribution) {
		defer func() { <-p.att.inflight }()
		if p.att.aborted.Load() {
			return // the Lease is lost: the change stays undone
		}
		rc.Attribution = &a
		// The rules may have been reloaded while the change waited.
		set := p.app.set.Load()
		p.app.recordState(set, rc, history.Delivered)
		firings := p.evaluate(set, c, rc)
		if len(firings) == 0 {
			done()
			return
		}
		if err := p.deliver(p.att.deliverCtx, firings, done); err != nil {
			o := c.Object()
			p.app.log.Warn("actions closed while delivering; what was not queued is dead-lettered or handed over", "gvr", c.Resource.String(),
				"namespace", o.GetNamespace(), "name", o.GetName(), "error", err)
		}
	})
	if err != nil {
		<-p.att.inflight
		return err // shutting down: the watcher keeps the change queued
	}
	return nil
}

// evaluate runs the rules on rc (the change c) and returns the firings,
// counting and logging evaluation errors.
func (p *pipeline) evaluate(set *rules.Set, c *watcher.Change, rc *rules.Change) []rules.Firing {
	if len(set.RulesFor(c.Resource)) == 0 {
		return nil
	}
	p.app.metrics.changeCounter(string(c.Type)).Inc()
	firings, errs := set.Eval(rc)
	for _, err := range errs {
		p.app.metrics.evalErrors.Inc()
		// Evaluation errors repeat for every object a broken rule sees:
		// log one a second, count all.
		p.errLog.Do(func() {
			o := c.Object()
			p.app.log.Warn("rule evaluation failed", "gvr", c.Resource.String(),
				"namespace", o.GetNamespace(), "name", o.GetName(), "error", err)
		})
	}
	return firings
}

// deliver hands the firings to the actions. done (the change's Defer) is
// called once every action of every firing is done: delivered, or
// dead-lettered. Each firing is then recorded in the history (which
// never blocks). An error means the actions are closing; what was not
// queued is dead-lettered.
func (p *pipeline) deliver(ctx context.Context, firings []rules.Firing, done func()) error {
	var remaining atomic.Int64
	remaining.Store(int64(len(firings)))
	each := func() {
		if remaining.Add(-1) == 0 {
			done()
		}
	}
	h := p.app.history
	for _, f := range firings {
		finished := each
		if h != nil {
			finished = func() {
				h.rec.RecordEntry(entryOf(&f, history.Delivered))
				each()
			}
		}
		if err := p.app.disp.Load().Deliver(ctx, f, finished); err != nil {
			return err
		}
	}
	return nil
}

// rulesChange turns a watcher change into what the rules evaluate. The
// maps are fresh copies: rules never see the cache.
func rulesChange(c *watcher.Change) *rules.Change {
	rc := &rules.Change{Type: c.Type, Resource: c.Resource, Time: c.Time, Observed: c.Observed}
	if c.New != nil {
		rc.New = c.New.Map()
	}
	if c.Old != nil {
		rc.Old = c.Old.Map()
	}
	return rc
}

// auditChange describes c (whose objects rc holds) for attribution. A
// change learned from a list does not wait for its audit event: it may be
// long past.
func auditChange(c *watcher.Change, rc *rules.Change) audit.Change {
	o := c.Object()
	ac := audit.Change{
		Group: c.Resource.Group, Resource: c.Resource.Resource,
		Namespace: o.GetNamespace(), Name: o.GetName(),
		UID: string(o.GetUID()), ResourceVersion: o.GetResourceVersion(),
		OldResourceVersion:     c.PreviousResourceVersion(),
		ContentHash:            c.ContentHash(),
		DeletedResourceVersion: c.DeletedResourceVersion(),
		Type:                   c.Type,
		Time:                   c.Time,
		Listed:                 c.Listed,
	}
	switch c.Type {
	case change.Updated:
		ac.DeletionStarted = deleting(rc.New) && !deleting(rc.Old)
		ac.Subresource, ac.SubresourceKnown = rules.WriteSubresource(rc)
	case change.Deleted:
		ac.WasTerminating = deleting(rc.Old)
	}
	return ac
}

// deleting reports whether obj has metadata.deletionTimestamp.
func deleting(obj map[string]any) bool {
	meta, _ := obj["metadata"].(map[string]any)
	ts, _ := meta["deletionTimestamp"].(string)
	return ts != ""
}
