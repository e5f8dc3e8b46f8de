package diff

import (
	"bytes"
	"encoding/json"
	"fmt"

	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// Severity says whether a change can break clients or objects.
type Severity string

const (
	// Breaking changes can invalidate stored objects, lose their data or
	// break the clients of the API.
	Breaking Severity = "breaking"
	// Safe changes only loosen the API: every object and request valid
	// before stays valid.
	Safe Severity = "safe"
	// Unknown changes are ones the comparison cannot classify. They count
	// as breaking (Result.Breaking), as OLM's CRD upgrade safety check
	// fails closed on them.
	Unknown Severity = "unknown"
)

// Check is one difference between the old and the new CRD. Its Check names
// the kind of difference, with the severity it has by default
// (docs/crd-checks.md sets each beside crdify's and OLM v1's):
//
// CRD-wide and per version:
//
//	crd-removed, crd-added        breaking, safe  (CompareAll: a CRD only in the old or
//	                                        the new set)
//	scope-changed                 breaking  Namespaced <-> Cluster
//	kind-changed                  breaking  names.kind, listKind or plural changed
//	names-changed                 safe      singular, shortNames or categories changed
//	preserve-unknown-fields-*     as below  spec.preserveUnknownFields changed
//	stored-version-removed        breaking  a version of the old status.storedVersions (the
//	                                        old storage version when the status is empty)
//	                                        is not in the new spec.versions: the apiserver
//	                                        refuses the update
//	stored-version-cleared        breaking  a version of the old status.storedVersions, still
//	                                        in spec.versions, is not in the new one (compared
//	                                        when the new CRD has a status): safe only once no
//	                                        object is stored at it
//	storage-version-changed       safe      the storage version switched; breaking or unknown
//	                                        with conversion None when the schema of a version
//	                                        objects are stored at has what the new storage
//	                                        version's drops or tightens (see Compare)
//	conversion-changed            unknown   webhook endpoint or ConversionReview versions
//	                                        changed; a strategy change by what it does:
//	                                        None -> Webhook safe while one version is served and
//	                                        stored, else unknown; Webhook -> None safe when one
//	                                        version is served and stored or their schemas are the
//	                                        same, else unknown
//	conversion-ca-bundle-changed  safe      only the webhook's CA bundle changed
//	served-version-removed        breaking  a served version was removed or is no longer served
//	version-removed               safe      a version neither served nor stored was removed
//	version-added, version-served safe      a version was added, or is served again
//	version-deprecated            safe
//	status-subresource-removed    breaking
//	status-subresource-added      unknown   status sent with the object is now ignored
//	scale-subresource-removed     breaking
//	scale-subresource-added       safe
//	scale-subresource-changed     unknown
//	selectable-field-removed      breaking
//	selectable-field-added        safe
//	printer-columns-changed       safe
//	schema-changed                unknown   a version's schema added or removed, or keys
//	                                        structural schemas forbid (id, $schema, $ref,
//	                                        definitions, dependencies, patternProperties,
//	                                        additionalItems, items as a list) changed
//
// Schema, for each version both CRDs serve, walking properties, items,
// additionalProperties, allOf, anyOf, oneOf and not:
//
//	field-removed                 breaking  a property was removed (the apiserver prunes it);
//	                                        safe when x-kubernetes-preserve-unknown-fields
//	                                        keeps it; unknown when additionalProperties now
//	                                        validates it
//	field-added                   safe
//	type-changed                  breaking  (nothing below a changed type is compared)
//	type-widened                  safe      integer -> number, integer or string ->
//	                                        int-or-string, anything -> any
//	required-added                breaking  field is the required property
//	required-removed              safe
//	default-added, -changed, -removed  breaking  (objects silently get another value)
//	enum-added                    breaking  an enum on a field that had none
//	enum-values-removed           breaking
//	enum-values-added             safe
//	enum-removed                  safe
//	<limit>-added, -tightened     breaking  limit: minimum, maximum (exclusiveMinimum and
//	<limit>-relaxed, -removed     safe        exclusiveMaximum count as tightening), min-length,
//	                                          max-length, min-items, max-items,
//	                                          min-properties, max-properties
//	multiple-of-added, -changed   breaking
//	multiple-of-relaxed, -removed safe      relaxed: the old value is a multiple of the new
//	pattern-added, format-added   breaking
//	pattern-changed, format-changed  unknown  (whether a new regular expression or format
//	                                        accepts every value the old one did is not decided)
//	pattern-removed, format-removed  safe
//	nullable-removed              breaking
//	nullable-added                safe      breaking when the field has a default: an explicit
//	                                        null then stays null instead of being defaulted
//	description-changed           safe      only under a Policy that compares descriptions
//	preserve-unknown-fields-removed  breaking  unknown fields are now pruned
//	preserve-unknown-fields-added    safe
//	embedded-resource-added       breaking  x-kubernetes-embedded-resource
//	embedded-resource-removed     unknown
//	unique-items-added            breaking
//	unique-items-removed          safe
//	list-type-changed             breaking atomic -> set or map; safe set or map -> atomic;
//	                                        unknown set <-> map
//	list-map-keys-changed         unknown
//	map-type-changed              unknown
//	validation-rule-added         breaking  x-kubernetes-validations, matched by rule text
//	validation-rule-changed       unknown   a rule's text (at the same index) or
//	                                        optionalOldSelf changed
//	validation-rule-message-changed  safe   message, messageExpression, reason, fieldPath
//	validation-rule-removed       safe
//	additional-properties-removed breaking  the map's keys are now pruned
//	additional-properties-added   safe
//	allof-added                   breaking  allOf elements added (allOf lists of equal length
//	allof-removed                 safe        are compared element by element instead)
//	anyof-added, oneof-added, not-added          breaking  where there was none
//	anyof-removed, oneof-removed, not-removed    safe
//	anyof-alternatives-added      safe
//	anyof-changed, oneof-changed, not-changed    unknown
//
// x-kubernetes-int-or-string is part of the type, with the anyOf of an
// integer and a string that generators put beside it. Descriptions, titles,
// examples and externalDocs are not compared. Inside allOf, anyOf, oneOf
// and not, a property, items or additionalProperties schema only one side
// has is compared with an empty schema, so that its constraints show as
// added or removed.
type Check struct {
	// Version is the CRD version the check is about ("" for checks of the
	// whole CRD: scope, names, conversion).
	Version string `json:"version,omitempty"`
	// Against is, for a check between two versions rather than between
	// the old and the new CRD, the version Version is compared with: a
	// served version of the new CRD whose objects are read at Version
	// unconverted (conversion None), or a version objects are stored at
	// (old values are Against's, new values Version's). "" otherwise.
	Against string `json:"against,omitempty"`
	// Path is a JSON pointer: inside the version's openAPIV3Schema for
	// schema checks ("/properties/spec/properties/size"; "" is the schema
	// root), inside the CRD for the others ("/spec/scope").
	Path string `json:"path"`
	// Field is the object field a schema check is about, in the rules
	// path syntax: spec.size, spec.items[*].name (every item of a list or
	// value of a map), metadata.annotations["a.b/c"]; "" for the object
	// root and for checks that are not about a field.
	Field string `json:"field,omitempty"`
	// Check names the kind of change, in kebab case (see Check for the
	// list, CheckNames for the names). Names are stable.
	Check string `json:"check"`
	// Old and New are the values before and after, as plain JSON values
	// (an enum's removed values, a limit, a default, a type name); absent
	// when there is none.
	Old any `json:"old,omitempty"`
	New any `json:"new,omitempty"`
	// Severity is breaking, safe or unknown.
	Severity Severity `json:"severity"`
	// Message says what changed and why it matters, in one sentence.
	Message string `json:"message"`
}

// Result is the comparison of two versions of one CRD, and optionally the
// impact of its breaking checks on custom resources (filled by the impact
// scan, package crd/impact).
type Result struct {
	// CRD is the name of the CustomResourceDefinition (plural.group).
	CRD string `json:"crd"`
	// Checks are every difference found, CRD-wide ones first, then per
	// version in the new CRD's version order, each schema walked depth
	// first with properties in name order.
	Checks []Check `json:"checks"`
	// Breaking counts the checks whose severity is breaking or unknown.
	Breaking int `json:"breaking"`
	// Unknown counts the checks whose severity is unknown (included in
	// Breaking).
	Unknown int `json:"unknown"`
	// Safe counts the checks whose severity is safe.
	Safe int `json:"safe"`
	// Scanned is how many custom resources the impact scan read (0 when
	// none was run).
	Scanned int `json:"scanned"`
	// Impact lists, for each breaking check that hits objects, the
	// objects it hits; see Impact.
	Impact []Impact `json:"impact"`
	// ImpactError says why the impact is incomplete or missing when the
	// scan could not read every object (a failed list, a time or object
	// limit reached): Impact and Scanned then count what was read, lower
	// bounds. "" when the scan was complete or none was asked for.
	ImpactError string `json:"impactError,omitempty"`
}

// Effect is what the apiserver does to an object hit by a change.
type Effect string

const (
	// Rejected objects fail the new schema's validation: the apiserver
	// rejects them when they are created again and on updates that change
	// the field; updates that leave it as it is still pass (CRD validation
	// ratcheting).
	Rejected Effect = "rejected"
	// Pruned objects set a field the new schema no longer has: the
	// apiserver drops it on every read and the next write deletes it from
	// storage; a create that asks for strict field validation (kubectl's
	// default) is rejected as setting an unknown field.
	Pruned Effect = "pruned"
	// Unserved objects are at a version that is no longer served.
	Unserved Effect = "unserved"
	// Unmigrated objects are, or may be, stored in etcd at a version the
	// change removes from spec.versions or status.storedVersions: they
	// must be rewritten at the storage version first. Package crd/impact
	// does not report it (it reads objects, not how they are stored);
	// fieldwatch's storage-version ledger does.
	Unmigrated Effect = "unmigrated"
)

// Impact is the set of objects one check hits.
type Impact struct {
	// Check, Version, Path and Field identify the check (Check is
	// "invalid" for validation errors that no check of the comparison
	// explains, such as an object that was already invalid).
	Check   string `json:"check"`
	Version string `json:"version,omitempty"`
	Path    string `json:"path,omitempty"`
	Field   string `json:"field,omitempty"`
	// Effect is what the apiserver does to these objects.
	Effect Effect `json:"effect"`
	// Count is how many objects the check hits.
	Count int `json:"count"`
	// Objects are the first MaxSamples of them in namespace/name order,
	// whatever the order they were scanned in.
	Objects []Hit `json:"objects"`
	// Message says what happens to these objects, ratcheting included.
	Message string `json:"message"`
	// Error says why this check's impact could not be computed (objects
	// read after the change no longer show a field it removes): Count
	// and Objects are then lower bounds. "" when it was computed.
	Error string `json:"error,omitempty"`
}

// MaxSamples is how many objects an Impact names.
const MaxSamples = 10

// Hit is one object a check hits.
type Hit struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// Field is the object's offending field path as the apiserver reports
	// it (spec.items[2].name).
	Field string `json:"field,omitempty"`
	// Error is the apiserver's error for it.
	Error string `json:"error"`
}

// String returns namespace/name, or name for a cluster-scoped object.
func (h Hit) String() string {
	if h.Namespace == "" {
		return h.Name
	}
	return h.Namespace + "/" + h.Name
}

// add appends a check and counts it.
func (r *Result) add(c Check) {
	switch c.Severity {
	case Breaking:
		r.Breaking++
	case Unknown:
		r.Breaking++
		r.Unknown++
	case Safe:
		r.Safe++
	}
	r.Checks = append(r.Checks, c)
}

// Value returns r as plain JSON values (map[string]any, []any, string,
// bool, int64, float64, nil), the form CEL expressions and the payload
// take: checks and impact are lists even when empty.
func (r *Result) Value() (map[string]any, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode crd result: %w", err)
	}
	var out map[string]any
	if err := utiljson.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("decode crd result: %w", err)
	}
	return out, nil
}

// MarshalJSON writes checks and impact as [] rather than null. It does
// not escape <, > and & (encoding/json's HTML escaping), so that the
// result reads as written inside a payload; json.Marshal of a Result
// escapes them as usual.
func (r Result) MarshalJSON() ([]byte, error) {
	type plain Result
	if r.Checks == nil {
		r.Checks = []Check{}
	}
	if r.Impact == nil {
		r.Impact = []Impact{}
	}
	impact := make([]Impact, len(r.Impact))
	for i, im := range r.Impact {
		if im.Objects == nil {
			im.Objects = []Hit{}
		}
		impact[i] = im
	}
	r.Impact = impact
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(plain(r)); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
