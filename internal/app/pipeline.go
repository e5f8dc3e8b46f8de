package app

import (
	"context"
	"sync/atomic"

	"github.com/fieldwatch/fieldwatch/rules"
	"github.com/fieldwatch/fieldwatch/watcher"
	"golang.org/x/time/rate"
)

// pipeline is the watcher's handler: it evaluates a change against the
// current rules and hands each firing to the actions. Deliver blocks while
// an action's queue is full, which is how a slow receiver slows the watcher
// instead of losing firings.
type pipeline struct {
	app *App
	// errLog lets one evaluation error a second through to the log.
	errLog rate.Sometimes
}

var _ watcher.Handler = &pipeline{}

// Handle implements watcher.Handler.
func (p *pipeline) Handle(ctx context.Context, c *watcher.Change) error {
	set := p.app.set.Load()
	if len(set.RulesFor(c.Resource)) == 0 {
		return nil // no rule watches this resource (any more)
	}
	p.app.metrics.changeCounter(string(c.Type)).Inc()
	rc := rulesChange(c)
	if set.WantsCRDImpact(rc) {
		p.app.crdImpact(ctx, c, rc)
	}
	firings, errs := set.Eval(rc)
	for _, err := range errs {
		p.app.metrics.evalErrors.Inc()
		// Evaluation errors repeat for every object a broken rule sees:
		// log one a second, count all.
		p.errLog.Do(func() {
			o := c.Object()
			p.app.log.Warn("rule evaluation failed", "gvr", c.Resource.String(),
				"namespace", o.GetNamespace(), "name", o.GetName(), "err", err)
		})
	}
	if len(firings) == 0 {
		return nil
	}
	// The change counts as handled (for the restart baseline) once every
	// action of every firing is done: delivered, or dead-lettered.
	done := c.Defer()
	var remaining atomic.Int64
	remaining.Store(int64(len(firings)))
	each := func() {
		if remaining.Add(-1) == 0 {
			done()
		}
	}
	for _, f := range firings {
		if err := p.app.disp.Load().Deliver(ctx, f, each); err != nil {
			return err // shutting down: the watcher keeps the change queued
		}
	}
	return nil
}

// rulesChange turns a watcher change into what the rules evaluate. The
// maps are fresh copies: rules never see the cache.
func rulesChange(c *watcher.Change) *rules.Change {
	rc := &rules.Change{Type: c.Type, Resource: c.Resource, Time: c.Time}
	if c.New != nil {
		rc.Object = c.New.Map()
	}
	if c.Old != nil {
		rc.OldObject = c.Old.Map()
	}
	return rc
}
