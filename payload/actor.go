package payload

import "github.com/fieldwatch/fieldwatch/change"

// Actor is who made a change: the field manager and operation of the
// object's metadata.managedFields entry the write stamped, and, with an
// audit source, the user the apiserver's audit events name. Either part
// may be missing; a payload without either has no actor.
type Actor struct {
	// Manager is the field manager that made the write, such as
	// kubectl-client-side-apply or a controller's name; "" when
	// managedFields do not tell.
	Manager string `json:"manager,omitempty"`
	// Operation is the manager's operation, Apply or Update; "" with
	// Manager.
	Operation string `json:"operation,omitempty"`
	// Attribution is what the audit stream tells (user, impersonatedUser,
	// verb, userAgent, sourceIPs, auditID, match, candidates): all zero,
	// Match "", without an audit source; with one, Match is always set.
	// Fields added to change.Attribution appear here.
	change.Attribution
}

// Guard is the payload's guard: change.GuardOverride, whose doc comments
// say each key.
type Guard = change.GuardOverride
