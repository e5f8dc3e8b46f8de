package audit

import (
	"time"

	"github.com/fieldwatch/fieldwatch/change"
)

// Change is one watched change to attribute, in plain values.
type Change struct {
	// Group, Resource, Namespace and Name name the object (Namespace is
	// empty for a cluster-scoped one). The version does not matter: the
	// same object is audited under whichever version the client wrote.
	Group, Resource, Namespace, Name string
	// UID and ResourceVersion are the object's after the change (for a
	// deletion, the deleted object's as the watch delivered it). Exact
	// matching needs both; without them only window matching is tried.
	UID, ResourceVersion string
	// OldResourceVersion is the object's resourceVersion before an update,
	// when the change follows it directly (a watch event, not a relist that
	// may have skipped versions). An update request that names another
	// version in its body cannot have made the change.
	OldResourceVersion string
	// ContentHash is jsonscan.ObjectHash of the new object as the watch
	// event delivered it (watcher.Change.ContentHash): what an admission
	// request's object is compared with. "" when not known.
	ContentHash string
	// DeletedResourceVersion is, for a deletion a watch event delivered,
	// the resourceVersion the object had before it (the one a delete's
	// oldObject has); "" when not known.
	DeletedResourceVersion string
	// Type is created, updated or deleted.
	Type change.Type
	// DeletionStarted marks an update that set metadata.deletionTimestamp:
	// a delete request (or an eviction) on an object with finalizers or a
	// grace period, not an update.
	DeletionStarted bool
	// WasTerminating marks a deletion of an object that already had
	// metadata.deletionTimestamp: the request that removed it may be the
	// update or patch that removed its last finalizer.
	WasTerminating bool
	// Subresource is the subresource the write went through, as the
	// managedFields entry of the change says ("" for the main resource),
	// when SubresourceKnown. Without it an update is matched with writes to
	// the object and to any of its subresources.
	Subresource      string
	SubresourceKnown bool
	// Time is when the watch delivered the change.
	Time time.Time
	// Listed is set for a change learned from a list rather than from a
	// watch event (a relist after the watch broke off, the initial list
	// compared with a restart baseline): it may be long past, so its audit
	// event is not waited for. It is matched against the events held when
	// its turn comes (after the earlier changes of its object), and is
	// change.MatchNone when none fits.
	Listed bool
}

func (c *Change) key() objectKey {
	return objectKey{group: c.Group, resource: c.Resource, namespace: c.Namespace, name: c.Name}
}
