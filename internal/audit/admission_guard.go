package audit

import (
	"context"

	"github.com/fieldwatch/fieldwatch/change"
)

// AdmissionGuard answers the reviews it takes in place of the endpoint's
// plain allowed answer: fieldwatch's CRD guard (package crdguard, wired
// by internal/app) for the updates and deletions of
// CustomResourceDefinitions. Its answer may take seconds, bounded by
// itself (AdmissionOptions.GuardTimeout says how long at most); every
// other review is still answered at once, each on its own connection's
// goroutine. It must be safe for concurrent use.
type AdmissionGuard interface {
	// Takes reports whether the guard answers the reviews of this
	// resource (group, plural resource, subresource) and operation
	// (CREATE, UPDATE, DELETE, CONNECT), whatever the rules select.
	Takes(group, resource, subresource, operation string) bool
	// Review answers the AdmissionReview body, one of admission.k8s.io/v1
	// for a review Takes took that the endpoint has read. ctx ends when
	// the apiserver gives up. An error makes the endpoint answer allowed
	// (logged): the guard must not turn its own trouble into a refusal.
	Review(ctx context.Context, body []byte) (GuardAnswer, error)
}

// GuardAnswer is an AdmissionGuard's answer to one review.
type GuardAnswer struct {
	// Review is the AdmissionReview to write back, JSON, with the
	// response for the request's uid.
	Review []byte
	// Allowed says whether Review allows the write: the record of a
	// refused write is not kept (no change can be its).
	Allowed bool
	// Override, when the guard refused the write in deny mode and its
	// annotation let it through, goes with the request's record, and so
	// to the payload of the change it is matched to.
	Override *change.GuardOverride
}
