package watcher

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fieldwatch/fieldwatch/change"
)

// Change is what happened to one object.
type Change struct {
	// Type is created, updated or deleted.
	Type change.Type
	// Resource is the resource the object belongs to.
	Resource change.Resource
	// Old is the object as last delivered for this key (nil for Created).
	// For Deleted it is the final state the watcher knew.
	Old *Object
	// New is the object now (nil for Deleted).
	New *Object
	// Initial is set on Created changes for objects found when the watcher
	// started (only delivered when Config.InitialSync is set).
	Initial bool
	// Time is when the watcher received the event.
	Time time.Time
	// Listed is set when the change was learned from a list rather than
	// from a watch event: the initial list (Initial changes, and those
	// found against the restart baseline), or a relist after the watch
	// broke off (an object created, changed or replaced meanwhile, a
	// deletion seen as a missing object). It may have happened long
	// before Time, and an update may span several writes.
	Listed bool
	// Observed says how the watcher saw the change: ObservedWatch for one
	// watch event (one write); otherwise the net effect of the writes
	// since the state Old is, which the watcher could not see one by one
	// (change.ObservedRelist, ObservedRestart, ObservedTakeover).
	Observed change.Observed

	// contentHash is jsonscan.ObjectHash of the new object's JSON as the
	// watch event carried it (Config.ContentHash); prevRV is, for a
	// deletion a watch event delivered, the resourceVersion the object had
	// before it.
	contentHash, prevRV string

	// deferred is set by Defer.
	deferred func()
	// mark is the change's entry in its informer's tracker (nil without
	// one).
	mark *mark
	// bound is the resourceVersion at or above the event behind the
	// change: a standby drops the change once the leader's watermark
	// reaches it. "" when no watermark can confirm it.
	bound string
	// uncertain marks a standby's Created change for an object found in
	// its initial list with no baseline: its previous state is unknown.
	uncertain bool
	// queued is the bytes the change counts for while it waits.
	queued int64
}

// PreviousResourceVersion returns the object's resourceVersion just before
// an update, when one watch event delivered it: then Old is the version
// the write applied to. It is "" for other changes and for an update that
// is a net effect (learned from a list, which may skip versions).
func (c *Change) PreviousResourceVersion() string {
	if c.Type != change.Updated || c.Listed || c.Old == nil {
		return ""
	}
	return c.Old.resourceVersion
}

// ContentHash returns the digest (jsonscan.ObjectHash) of the new object's
// whole JSON as the watch event delivered it, before the projection: set
// with Config.ContentHash on created and updated changes that one watch
// event delivered, "" otherwise.
func (c *Change) ContentHash() string { return c.contentHash }

// DeletedResourceVersion returns, for a deletion that a watch event
// delivered, the resourceVersion the object had just before it (the
// cache's; the event's object carries the deletion's own); "" otherwise.
func (c *Change) DeletedResourceVersion() string { return c.prevRV }

// finish marks the change done in its tracker.
func (c *Change) finish() {
	if c.mark != nil {
		c.mark.finish()
	}
}

// Defer tells the watcher that the handler finishes c after Handle returns
// (its actions run asynchronously): the watcher records c's object as
// handled, for the restart baseline, only when done is called. Call it
// from Handle, at most once; done must then be called exactly once.
// Without Defer, c counts as handled when Handle returns nil.
func (c *Change) Defer() (done func()) {
	finish := c.deferred
	c.deferred = nil
	if finish == nil {
		return func() {}
	}
	return finish
}

// Object returns New, or Old for a deletion.
func (c *Change) Object() *Object {
	if c.New != nil {
		return c.New
	}
	return c.Old
}

// Handler receives changes. Handle is called by one worker at a time per
// object, in the order the changes happened; an error re-queues the change
// (and the ones after it for the same object) with backoff. Handle must not
// modify the objects: they are the cache's.
type Handler interface {
	Handle(ctx context.Context, c *Change) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, c *Change) error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, c *Change) error { return f(ctx, c) }

// key identifies one object across versions of its resource, so that a
// version switch keeps its changes in order.
type key struct {
	gr        schema.GroupResource
	namespace string
	name      string
}

func (k key) String() string {
	if k.namespace == "" {
		return k.gr.String() + "/" + k.name
	}
	return k.gr.String() + "/" + k.namespace + "/" + k.name
}
