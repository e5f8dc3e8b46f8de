package audit

import (
	"time"
	"unsafe"

	"github.com/fieldwatch/fieldwatch/change"
)

// Record is what attribution keeps of one audit event: no request or
// response body, only who, what, on which object and when.
//
// Request and response bodies are never kept: of a responseObject only
// metadata.uid, metadata.resourceVersion and metadata.name are read (of a
// Status, details.uid), of a requestObject only metadata.generateName;
// everything else of a body is skipped while decoding.
//
// What each audit level tells (kube-apiserver v1.37, checked by the tests):
// every level has the user, the impersonated user, the user agent, the
// source IPs, the objectRef and the response code. objectRef.name is empty
// for a create with generateName and for deletecollection; objectRef.uid
// and objectRef.resourceVersion are set for an update only (from its body:
// the version it applies to). The response status of a delete that removed
// the object names its uid at every level, so deletions match exactly even
// at Metadata level. Only RequestResponse level has the responseObject,
// with the new resourceVersion (a no-op write returns the old one). Dry
// runs are audited like writes; they are dropped.
type Record struct {
	// AuditID is the request's audit ID (the Audit-ID response header).
	AuditID string
	// Level is the audit level the policy gave the request.
	Level string
	// Verb is the Kubernetes verb: create, update, patch, delete,
	// deletecollection.
	Verb string
	// Group, Version, Resource, Subresource, Namespace and Name are the
	// event's objectRef. Name is empty for a create with generateName (unless
	// the response carried the object) and for deletecollection.
	Group, Version, Resource, Subresource, Namespace, Name string
	// Code is the HTTP response code; a Panic stage is recorded as 500.
	Code int32
	// Received and Completed are the request's requestReceivedTimestamp and
	// its ResponseComplete stageTimestamp.
	Received, Completed time.Time
	// User is the authenticated user; ImpersonatedUser the user it acted as,
	// when it impersonated one.
	User             change.UserInfo
	ImpersonatedUser *change.UserInfo
	// UserAgent and SourceIPs describe the client.
	UserAgent string
	SourceIPs []string
	// RefUID and RefResourceVersion are the objectRef's uid and
	// resourceVersion: those in the body of an update, when the client sent
	// them. A successful update with a resourceVersion applied to that
	// version of the object.
	RefUID, RefResourceVersion string
	// ResponseUID and ResponseResourceVersion are the responseObject's
	// metadata.uid and metadata.resourceVersion, present at RequestResponse
	// level only. A delete that removed the object at once answers with a
	// Status: ResponseUID is its details.uid, ResponseResourceVersion is
	// empty.
	ResponseUID, ResponseResourceVersion string
	// GenerateName is the requestObject's metadata.generateName of a create,
	// present at Request level and above.
	GenerateName string

	// Admission marks the record of an admission review (Admission): a
	// write request validating admission let through, before it was
	// stored. Such a record matches only by the fields below, never by
	// time (match.go); its User is the identity the request acted as
	// (admission is told the impersonated user, not who impersonated), its
	// Verb create, update (a patch too: admission is sent a patch's options
	// as UpdateOptions) or delete, its Received and Completed the
	// time the review arrived, its Code 200.
	Admission bool `json:",omitempty"`
	// RequestUID is the admission request's uid: a review forwarded twice
	// is held once.
	RequestUID string `json:",omitempty"`
	// ObjectUID is the object's metadata.uid (a create's is generated
	// before validating admission), OldResourceVersion oldObject's
	// metadata.resourceVersion: the version an update or a deletion
	// applied to.
	ObjectUID          string `json:",omitempty"`
	OldResourceVersion string `json:",omitempty"`
	// ContentHash is jsonscan.ObjectHash of the object a create or an
	// update stores; "" when the request's object is not the resource's
	// own (a Scale of a scale subresource).
	ContentHash string `json:",omitempty"`
	// Guard is set when the CRD guard answered the review in deny mode
	// and its annotation let the write through (AdmissionGuard): an exact
	// match of this record carries it to the change's attribution.
	Guard *change.GuardOverride `json:",omitempty"`
}

// Username returns the identity the request acted as: the impersonated
// user's name when there is one, otherwise the authenticated user's.
func (r *Record) Username() string {
	if r.ImpersonatedUser != nil {
		return r.ImpersonatedUser.Username
	}
	return r.User.Username
}

// identity distinguishes who made a request for ambiguity: two requests by
// the same user through different impersonators are different identities.
func (r *Record) identity() string {
	if r.ImpersonatedUser != nil {
		return r.User.Username + "\x00" + r.ImpersonatedUser.Username
	}
	return r.User.Username
}

// recordBytes is what a Record takes besides the bytes of its strings and
// lists; stringBytes a string header, userBytes an impersonated user,
// guardBytes a guard override.
const (
	recordBytes = int(unsafe.Sizeof(Record{}))
	stringBytes = int(unsafe.Sizeof(""))
	userBytes   = int(unsafe.Sizeof(change.UserInfo{}))
	guardBytes  = int(unsafe.Sizeof(change.GuardOverride{}))
)

// keptBytes is what r holds beside the Record itself: the bytes of its
// strings, and of its lists and impersonated user, counted as if none were
// shared (the most they can take).
func (r *Record) keptBytes() int {
	n := len(r.AuditID) + len(r.Level) + len(r.Verb) + len(r.Group) + len(r.Version) + len(r.Resource) +
		len(r.Subresource) + len(r.Namespace) + len(r.Name) + userInfoBytes(&r.User) + len(r.UserAgent) +
		listBytes(r.SourceIPs) + len(r.RefUID) + len(r.RefResourceVersion) + len(r.ResponseUID) +
		len(r.ResponseResourceVersion) + len(r.GenerateName) + len(r.RequestUID) + len(r.ObjectUID) +
		len(r.OldResourceVersion) + len(r.ContentHash)
	if r.ImpersonatedUser != nil {
		n += userBytes + userInfoBytes(r.ImpersonatedUser)
	}
	if g := r.Guard; g != nil {
		n += guardBytes + len(g.Reason) + len(g.User) + listBytes(g.Groups) + len(g.Operation) + len(g.RequestUID) + listBytes(g.Checks)
	}
	return n
}

func userInfoBytes(u *change.UserInfo) int {
	n := len(u.Username) + len(u.UID) + listBytes(u.Groups)
	for k, vs := range u.Extra {
		n += extraEntryBytes + len(k) + listBytes(vs)
	}
	return n
}

// extraEntryBytes is what an entry of a UserInfo's Extra takes besides
// its strings: its key's header, its list's and the map's own share.
const extraEntryBytes = 64

func listBytes(ss []string) int {
	n := stringBytes * len(ss)
	for _, s := range ss {
		n += len(s)
	}
	return n
}

// Succeeded is true for a 2xx response.
func (r *Record) Succeeded() bool { return r.Code >= 200 && r.Code < 300 }

// writeVerbs are the verbs attribution keeps.
var writeVerbs = map[string]bool{
	"create": true, "update": true, "patch": true, "delete": true, "deletecollection": true,
}

// IsWriteVerb reports whether verb is one attribution keeps.
func IsWriteVerb(verb string) bool { return writeVerbs[verb] }

// interner shares equal values between held records: usernames, groups,
// user agents, resources and namespaces repeat across thousands of them.
type interner interface {
	// str returns a string equal to s, shared when possible.
	str(s string) string
	// list returns a list equal to ss, shared when possible.
	list(ss []string) []string
	// user returns a *UserInfo equal to u, shared when possible.
	user(u *change.UserInfo) *change.UserInfo
}

// compact interns the fields that repeat across events, so that a held
// record costs as little memory as possible.
func (r *Record) compact(in interner) {
	r.Level = in.str(r.Level)
	r.Verb = in.str(r.Verb)
	r.Group = in.str(r.Group)
	r.Version = in.str(r.Version)
	r.Resource = in.str(r.Resource)
	r.Subresource = in.str(r.Subresource)
	r.Namespace = in.str(r.Namespace)
	r.Name = in.str(r.Name) // an object is written many times
	if r.User.Extra != nil {
		r.User = *in.user(&r.User)
	} else {
		r.User = change.UserInfo{Username: in.str(r.User.Username), UID: in.str(r.User.UID), Groups: in.list(r.User.Groups)}
	}
	if r.ImpersonatedUser != nil {
		r.ImpersonatedUser = in.user(r.ImpersonatedUser)
	}
	r.UserAgent = in.str(r.UserAgent)
	r.SourceIPs = in.list(r.SourceIPs)
	r.GenerateName = in.str(r.GenerateName)
	r.OldResourceVersion = in.str(r.OldResourceVersion)
}
