// Package diff compares two versions of a CustomResourceDefinition and
// says which differences can break the API's clients or its stored
// objects: the CRD upgrade safety checks OLM v1 runs as a preflight,
// for every CRD change rather than for the ones one installer makes.
//
// Compare takes the old and the new CRD as apiextensions.k8s.io/v1 types
// (FromMap converts the map[string]any the watcher hands rules; Parse and
// ReadCRDs read YAML or JSON manifests, files or directories, with
// FILE:LINE:COL errors, a *fileerr.Error) and returns a Result: every difference as a Check
// {version, path, field, check, old, new, severity, message}, and counts.
// A Result marshals to the JSON fieldwatch payloads carry and
// Result.Value gives the same as plain values for CEL. The impact of the breaking checks on custom
// resources is computed by package crd/impact, which fills
// Result.Impact.
//
// The package uses only the API types (k8s.io/apiextensions-apiserver's
// pkg/apis/apiextensions/v1 and k8s.io/apimachinery) and, of fieldwatch,
// internal/fieldpath (Check.Field's path syntax) and fileerr (the errors
// of its readers): it must not import k8s.io/client-go (deps_test.go
// checks it). Its cost is linear in the size of the two CRDs.
//
// # Checks
//
// Severity breaking: the change can invalidate objects, lose their data or
// break clients. Safe: the change only loosens. Unknown: the comparison
// cannot tell, and it counts as breaking (Result.Breaking), as OLM fails
// closed on what it cannot classify.
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
//	storage-version-changed       safe      the storage version switched; breaking or unknown
//	                                        with conversion None when the schema of a version
//	                                        objects are stored at has what the new storage
//	                                        version's drops or tightens (see below)
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
// integer and a string that generators put beside it. Descriptions,
// titles, examples and externalDocs are not compared. Inside allOf, anyOf,
// oneOf and not, a property, items or additionalProperties schema only one
// side has is compared with an empty schema, so that its constraints show
// as added or removed.
//
// # Between versions
//
// With conversion None the apiserver serves one stored object at every
// served version as it is and rewrites it at the storage version, pruned
// to its schema, on the next write. So the schema checks above also run,
// with Check.Against set to the other version and only the breaking and
// unknown ones reported, between: every pair of served versions of the
// new CRD, older against newer in Kubernetes version order (only what the
// old CRD did not already have: a difference it also had between two
// versions it served unconverted is not reported again); on a storage switch, each
// version objects are stored at (the old status.storedVersions, else the
// old storage version) against the new storage version; on a change from
// Webhook to None, each version objects are stored at and no longer
// served against each served version.
//
// # Policy
//
// CompareWith reports the checks under a Policy: another severity, or not
// at all (PolicySpec reads fieldwatch's checks map and the reference
// checker's, kubernetes-sigs/crdify's, configuration format;
// docs/crd-checks.md maps every check to crdify's validations).
//
// Checks come CRD-wide first, then per version in the new CRD's version
// order, each schema depth first with properties in name order, then the
// checks between versions: the same inputs always give the same Result.
//
// The input CRDs are not validated here: a CRD kube-apiserver would refuse
// gives a Result that may mean little. Package crd/validate runs the
// apiserver's own validation (it imports k8s.io/apiserver, which this
// package must not).
package diff
