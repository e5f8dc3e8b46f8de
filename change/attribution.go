package change

// Match says how a change was attributed to the user who made it, from the
// Kubernetes audit stream or fieldwatch's admission webhook: the payload's
// actor.match.
type Match string

// The match kinds.
const (
	// MatchExact: the audit event's responseObject has the object's uid and
	// the change's resourceVersion (or, for a deletion, the delete's
	// response names the object's uid); or an admission request names the
	// object's uid, the resourceVersion the change applied to and the
	// content it made.
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

// The sources of an Attribution.
const (
	// SourceAudit: the apiserver's audit stream (its webhook backend or its
	// log).
	SourceAudit = "audit"
	// SourceAdmission: fieldwatch's validating admission webhook.
	SourceAdmission = "admission"
	// SourceBoth: both, for a change each had an answer for (an ambiguous
	// one when they differ), and for an unmatched change when both are on.
	SourceBoth = "admission+audit"
)

// UserInfo is an authenticated identity as the apiserver records it in its
// audit events or sends it to admission webhooks. Of its extra attributes
// only those that name a credential or the pod or node it was bound to,
// never secrets, are kept (from admission only).
type UserInfo struct {
	Username string   `json:"username"`
	UID      string   `json:"uid,omitempty"`
	Groups   []string `json:"groups,omitempty"`
	// Extra holds the allowed extra attributes
	// (authentication.kubernetes.io/credential-id, .../pod-name, ...).
	Extra map[string][]string `json:"extra,omitempty"`
}

// Attribution is who made a change, as the audit stream or admission
// tells: the payload's actor beside the field manager, its fields in the
// order of the actor's keys. Its slices and pointers may be shared with
// whoever produced it: readers must not modify them.
type Attribution struct {
	// User is the authenticated user (exact and window matches only). From
	// admission it is the identity the request acted as: admission is told
	// the impersonated user, never who impersonated it.
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
	// Source says where the answer came from: SourceAudit, SourceAdmission
	// or SourceBoth; for MatchNone, the sources that were asked.
	Source string `json:"source,omitempty"`
	// Match says how the change was attributed; "" only where there is no
	// attribution (a payload without an audit source).
	Match Match `json:"match,omitempty"`
	// Candidates are the usernames (impersonated ones where a request
	// impersonated) of an ambiguous match, sorted.
	Candidates []string `json:"candidates,omitempty"`
	// Guard is set when the change is a CRD change that fieldwatch's CRD
	// guard refused in deny mode and its annotation let through: what
	// admission told of the request that made it (exact admission matches
	// only). A payload writes it as its own "guard" key beside actor,
	// never inside actor.
	Guard *GuardOverride `json:"-"`
}

// GuardOverride records that fieldwatch's CRD guard refused a change of a
// CustomResourceDefinition in deny mode and the fieldwatch.io/allow-breaking
// annotation let it through: who made the request and why. The payload
// of that change carries it as "guard", its fields in this order.
type GuardOverride struct {
	// Overridden is always true: the guard refused and was overridden.
	Overridden bool `json:"overridden"`
	// Reason is the annotation's value.
	Reason string `json:"reason"`
	// User and Groups are who made the request (its userInfo): the
	// identity it acted as.
	User   string   `json:"user"`
	Groups []string `json:"groups,omitempty"`
	// Operation is UPDATE or DELETE, RequestUID the admission request's
	// uid.
	Operation  string `json:"operation"`
	RequestUID string `json:"requestUID"`
	// Checks are what deny mode refused, each once: check names,
	// crd-removed for a deletion, incomplete for a check that could not
	// finish.
	Checks []string `json:"checks"`
	// Objects is how many objects the change strands (a lower bound when
	// the check was incomplete).
	Objects int `json:"objects"`
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
