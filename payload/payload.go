package payload

import (
	"encoding/json"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
)

// TimeFormat is the format of a payload's time: RFC 3339 in UTC with
// microseconds. Any RFC 3339 parser reads it.
const TimeFormat = "2006-01-02T15:04:05.000000Z"

// Redacted is the string that replaces a redacted value wherever it
// appears in a payload (object, oldObject, change values).
const Redacted = "<redacted>"

// Payload is one firing of one rule on one change of one object. Its
// fields are in the order of the JSON keys, which fieldwatch always writes
// in this order; keys that are left out (omitempty) are absent from the
// JSON, not null.
type Payload struct {
	// ID is "<uid>/<resourceVersion>/<rule>", or "<uid>/deleted/<rule>"
	// for a deletion: the same for the same change of the same object seen
	// by the same rule. Delivery is at least once; a receiver drops
	// duplicates by ID (the webhook also sends it as Idempotency-Key).
	ID string `json:"id"`
	// Time is when fieldwatch observed the change, written in TimeFormat
	// (UTC, to the microsecond).
	Time time.Time `json:"time"`
	// Rule is the name of the rule that fired.
	Rule string `json:"rule"`
	// Type is what happened to the object: created, updated or deleted.
	Type change.Type `json:"type"`
	// Observed says how fieldwatch saw the change when it is the net effect
	// of writes it could not see one by one: relist, restart or takeover
	// (change.Observed). It is left out (empty) for a change one watch
	// event delivered, which is one write.
	Observed change.Observed `json:"observed,omitempty"`
	// Cluster names the cluster the object is in (fieldwatch run
	// --cluster-name), so that payloads of several clusters can share a
	// receiver or a history; absent when no name is set.
	Cluster string `json:"cluster,omitempty"`
	// Resource is the object's resource, at the version it was watched at.
	Resource Resource `json:"resource"`
	// Namespace is the object's namespace; "" for a cluster-scoped object.
	Namespace string `json:"namespace"`
	// Name is the object's name.
	Name string `json:"name"`
	// UID is the object's metadata.uid.
	UID string `json:"uid"`
	// ResourceVersion is the object's metadata.resourceVersion: of the new
	// state, or of the last state fieldwatch knew for a deletion.
	ResourceVersion string `json:"resourceVersion"`
	// Changes are the changes the rule reports, as RFC 6902 operations
	// with the replaced values beside them; never nil once decoded (the
	// key is always there), possibly empty.
	Changes []Change `json:"changes"`
	// Actor is who made the change; nil when nothing can tell (always for
	// a deletion without an audit source).
	Actor *Actor `json:"actor,omitempty"`
	// Guard says that fieldwatch's CRD guard refused this change of a
	// CustomResourceDefinition in deny mode and the
	// fieldwatch.io/allow-breaking annotation let it through: who made the
	// request, why, and what the guard refused. Only on a CRD change
	// attributed exactly from admission (the request the guard answered);
	// absent otherwise.
	Guard *Guard `json:"guard,omitempty"`
	// CRD is the CRD upgrade safety check of a change of a
	// CustomResourceDefinition, for rules with the crd key or whose when
	// reads crd; nil otherwise.
	CRD *CRD `json:"crd,omitempty"`
	// Object is the new state of the object, as a JSON object, for rules
	// with includeObject; absent for a deletion. Map keys are sorted;
	// each metadata.managedFields entry is reduced to manager, operation,
	// subresource, time and fieldsHash; redacted values are Redacted.
	Object json.RawMessage `json:"object,omitempty"`
	// OldObject is the previous state (the last one fieldwatch knew, for
	// a deletion), as Object is written, for rules with includeObject;
	// absent for a creation.
	OldObject json.RawMessage `json:"oldObject,omitempty"`
}

// Resource is the resource of a payload's object.
type Resource struct {
	// Group is the API group; "" in the core group.
	Group string `json:"group"`
	// Version is the API version the object was watched at, such as v1.
	Version string `json:"version"`
	// Resource is the plural resource name, such as configmaps.
	Resource string `json:"resource"`
	// Kind is the kind of the resource's objects, such as ConfigMap.
	Kind string `json:"kind"`
}

// APIVersion returns the apiVersion of the resource's objects: "v1" in the
// core group, "group/version" elsewhere.
func (r Resource) APIVersion() string {
	if r.Group == "" {
		return r.Version
	}
	return r.Group + "/" + r.Version
}
