// Package impact finds the custom resources a CRD change hits: for the
// breaking checks of a diff comparison, the objects each one makes the
// apiserver reject or prune, counted and sampled, plus the objects that
// fail the new schema for reasons no check explains.
//
// Each object is run through what kube-apiserver does to a create under
// the new CRD, with the apiserver's own code
// (k8s.io/apiextensions-apiserver/pkg/apiserver, the release of
// client-go): pruning of unknown fields (unless the schema preserves
// them), coercion of embedded objects' metadata, defaulting, then the
// OpenAPI schema validator, embedded-object metadata validation,
// x-kubernetes-list-type uniqueness and the CEL x-kubernetes-validations
// rules (skipped when one of the errors that block them in the apiserver
// is present). The answer is therefore what the apiserver rejects when
// the object is created again, and on an update that changes the field.
// An update that leaves the field as it is still passes: CRD validation
// ratcheting (GA since Kubernetes 1.33) lets unchanged invalid values
// through, so nothing fails at the moment of the CRD change. Impact
// messages say so.
//
// Each validation error (and each pruned field) is attributed to the
// breaking or unknown check of the object's version whose field is the
// longest prefix of the error's path; errors no check explains go to an
// Impact with check "invalid". Effects:
//
//	rejected  the object fails the new schema (enum, limits, required,
//	          type, pattern, CEL rules, list uniqueness...)
//	pruned    the object sets a field the new schema drops
//	          (field-removed, preserve-unknown-fields-removed,
//	          additional-properties-removed): the apiserver prunes it on
//	          every read, so the impact must be computed from objects as
//	          they were before the change; a create with strict field
//	          validation, kubectl's default, is rejected
//	unserved  the object is at a version that is no longer served
//
// An object is checked at the version in its apiVersion and, when the new
// CRD does not convert (conversion None: the apiserver serves the stored
// object at every served version as it is), at every other served
// version too, each error attributed to the checks of the version it
// fails at. With a conversion webhook the other versions are not checked:
// what the webhook returns is not known here.
//
// Not covered: metadata (name, labels, ...)
// and the scale subresource's paths are not validated, as no CRD change
// affects them; with the status subresource, a create drops status, so
// errors under status show on the next status update that changes the
// field rather than on a re-create; stored-version-removed has no object
// impact (the apiserver refuses the CRD update itself); default changes
// are not counted (objects silently get the new value on their next read).
//
// The cost is linear in the number of objects times the schema size: each
// object is deep-copied once, then pruned, defaulted and validated.
//
// The package must not import k8s.io/client-go (deps_test.go checks it),
// so that rules can use it; of fieldwatch it imports package diff and
// internal/fieldpath (the path syntax of a check's field) only.
package impact
