package change

// Match says how a change was attributed to the user who made it, from the
// Kubernetes audit stream: the payload's actor.match.
type Match string

// The match kinds.
const (
	// MatchExact: the audit event's responseObject has the object's uid and
	// the change's resourceVersion (or, for a deletion, the delete's
	// response names the object's uid).
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

// Attributed reports whether m names a user (exact or window).
func (m Match) Attributed() bool { return m == MatchExact || m == MatchWindow }

// UserInfo is an authenticated identity as the apiserver records it in its
// audit events. Its extra attributes are never kept.
type UserInfo struct {
	Username string   `json:"username"`
	UID      string   `json:"uid,omitempty"`
	Groups   []string `json:"groups,omitempty"`
}

// Attribution is who made a change, as the audit stream tells: the
// payload's actor beside the field manager, its fields in the order of the
// actor's keys. Its slices and pointers may be shared with whoever produced
// it: readers must not modify them.
type Attribution struct {
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
	// Match says how the change was attributed; "" only where there is no
	// attribution (a payload without an audit source).
	Match Match `json:"match,omitempty"`
	// Candidates are the usernames (impersonated ones where a request
	// impersonated) of an ambiguous match, sorted.
	Candidates []string `json:"candidates,omitempty"`
}

// Effective returns the identity the change was made as: the impersonated
// user when there is one, otherwise the authenticated user; nil unless the
// match names a user.
func (a *Attribution) Effective() *UserInfo {
	if a.ImpersonatedUser != nil {
		return a.ImpersonatedUser
	}
	return a.User
}

// Username returns the effective identity's username ("" when no user is
// named).
func (a *Attribution) Username() string {
	if u := a.Effective(); u != nil {
		return u.Username
	}
	return ""
}
