package payload

import "encoding/json"

// CRD is the CRD upgrade safety check of a change of a
// CustomResourceDefinition: the comparison of the old and the new CRD and,
// for rules with crd: {impact: true}, the custom resources its breaking
// checks hit. It is what `fieldwatch crd-diff -o json` prints.
type CRD struct {
	// Name is the CRD's name, plural.group.
	Name string `json:"crd"`
	// Checks are every difference, possibly none: CRD-wide ones first,
	// then per version in the new CRD's version order. A creation has the
	// one check crd-added, a deletion crd-removed.
	Checks []CRDCheck `json:"checks"`
	// Breaking counts the checks whose severity is breaking or unknown.
	Breaking int `json:"breaking"`
	// Unknown counts the checks whose severity is unknown (included in
	// Breaking).
	Unknown int `json:"unknown"`
	// Safe counts the checks whose severity is safe.
	Safe int `json:"safe"`
	// Scanned is how many custom resources the impact scan read: 0
	// without impact, for a creation or a deletion, and when no check is
	// breaking.
	Scanned int `json:"scanned"`
	// Impact has, with impact, one entry per breaking check that hits
	// objects, in the order of the checks, then one entry "invalid" per
	// version for objects that fail the new schema for reasons no check
	// explains; empty otherwise.
	Impact []CRDImpact `json:"impact"`
	// ImpactError says why the scan is incomplete (an object or time
	// limit, a failed list, a CRD that does not compile): Scanned and the
	// counts are then lower bounds. "" when it is complete or was not
	// asked for.
	ImpactError string `json:"impactError,omitempty"`
}

// CRDCheck is one difference between the old and the new CRD.
type CRDCheck struct {
	// Version is the CRD version the check is about; "" for CRD-wide
	// checks (scope, names, conversion).
	Version string `json:"version,omitempty"`
	// Against is, for a check between two versions rather than between
	// the old and the new CRD, the version Version is compared with, Old
	// being its value there; "" otherwise.
	Against string `json:"against,omitempty"`
	// Path is a JSON Pointer: inside the version's openAPIV3Schema for
	// schema checks ("" is the schema root), inside the CRD for the others
	// (/spec/scope).
	Path string `json:"path"`
	// Field is the object field a schema check is about, in the rules path
	// syntax (spec.items[*].name); "" when the check is not about a field.
	Field string `json:"field,omitempty"`
	// Check names the kind of difference in kebab case, such as
	// field-removed or enum-values-removed (docs/crd-checks.md lists
	// them). Names are stable.
	Check string `json:"check"`
	// Old is the value before, as JSON (removed enum values, a limit, a
	// default, a type name): Against's value for a check between versions;
	// absent (nil) when there is none.
	Old json.RawMessage `json:"old,omitempty"`
	// New is the value after, as JSON; absent (nil) when there is none.
	New json.RawMessage `json:"new,omitempty"`
	// Severity is breaking, safe or unknown (counted as breaking).
	Severity string `json:"severity"`
	// Message says what changed and why it matters, in one sentence.
	Message string `json:"message"`
}

// CRDImpact is the set of custom resources one check hits.
type CRDImpact struct {
	// Check is the CRDCheck's name, or "invalid" for objects that fail the
	// new schema for reasons no check explains.
	Check string `json:"check"`
	// Version is the check's version; absent when "".
	Version string `json:"version,omitempty"`
	// Path is the check's path; absent when "".
	Path string `json:"path,omitempty"`
	// Field is the check's field; absent when "".
	Field string `json:"field,omitempty"`
	// Effect is what the apiserver does to these objects: rejected (they
	// fail the new schema), pruned (they set a field the new schema drops)
	// or unserved (they are read at a version no longer served).
	Effect string `json:"effect"`
	// Count is how many objects the check hits.
	Count int `json:"count"`
	// Objects are the first 10 of them in namespace/name order.
	Objects []CRDObject `json:"objects"`
	// Message says what happens to these objects.
	Message string `json:"message"`
	// Error says why this check's impact could not be computed, Count then
	// being a lower bound; "" when it was.
	Error string `json:"error,omitempty"`
	// Hidden is set only in the payloads the history API serves: how many
	// of Objects it left out because the caller may not read them. Actions
	// never see it.
	Hidden int `json:"hidden,omitempty"`
}

// CRDObject is one custom resource a check hits.
type CRDObject struct {
	// Namespace is the object's namespace; absent for a cluster-scoped
	// object.
	Namespace string `json:"namespace,omitempty"`
	// Name is the object's name.
	Name string `json:"name"`
	// Field is the offending field as the apiserver reports it
	// (spec.items[2].name); absent when it names none.
	Field string `json:"field,omitempty"`
	// Error is the apiserver's error for the object, cut to 300
	// characters.
	Error string `json:"error"`
}
