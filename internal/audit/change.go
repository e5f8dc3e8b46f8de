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
	// Observed is when the watch delivered the change.
	Observed time.Time
}

func (c *Change) key() objectKey {
	return objectKey{group: c.Group, resource: c.Resource, namespace: c.Namespace, name: c.Name}
}

// Match says how a change was attributed.
type Match string

// The match kinds.
const (
	// MatchExact: the audit event's responseObject has the object's uid and
	// the change's resourceVersion.
	MatchExact Match = "exact"
	// MatchWindow: one identity made every write that fits the change in
	// the match window.
	MatchWindow Match = "window"
	// MatchAmbiguous: writes by different identities fit; Candidates lists
	// them and no user is named.
	MatchAmbiguous Match = "ambiguous"
	// MatchNone: no audit event fitted within the wait bound.
	MatchNone Match = "none"
)

// Attribution is who made a change, as the audit stream tells. Its slices
// are shared with the index: callers must not modify them.
type Attribution struct {
	// Match says how the change was attributed.
	Match Match `json:"match"`
	// User is the authenticated user (exact and window matches only).
	User *UserInfo `json:"user,omitempty"`
	// ImpersonatedUser is the user the request acted as, when User
	// impersonated one.
	ImpersonatedUser *UserInfo `json:"impersonatedUser,omitempty"`
	// Verb is the request's verb.
	Verb string `json:"verb,omitempty"`
	// UserAgent and SourceIPs describe the client.
	UserAgent string   `json:"userAgent,omitempty"`
	SourceIPs []string `json:"sourceIPs,omitempty"`
	// AuditID is the request's audit ID; it is left out of a window match
	// that had several candidate requests of the same identity (the user is
	// certain, the request is not).
	AuditID string `json:"auditID,omitempty"`
	// Candidates are the usernames (impersonated ones where a request
	// impersonated) of an ambiguous match, sorted.
	Candidates []string `json:"candidates,omitempty"`
}

// Username returns the identity the change was made as: the impersonated
// user's name when there is one, otherwise the user's; "" unless the match
// is exact or window.
func (a *Attribution) Username() string {
	if a.ImpersonatedUser != nil {
		return a.ImpersonatedUser.Username
	}
	if a.User != nil {
		return a.User.Username
	}
	return ""
}
