// Package validate checks CustomResourceDefinitions the way kube-apiserver
// checks a create, with the apiserver's own validation
// (k8s.io/apiextensions-apiserver's pkg/apis/apiextensions/validation, the
// release in go.mod): names (metadata.name must be plural.group), scope,
// versions (exactly one storage version, served versions with a schema),
// structural schemas (every node with a type, defaults pruned and valid,
// list types, CEL rules that compile within their cost budget), the
// conversion and the subresources. The defaults the apiserver applies
// before it validates (listKind, conversion None, status.storedVersions
// from the storage version) are applied to a copy first; the status of
// the input is ignored, as the apiserver ignores it on a create.
//
// Documents validates the CRDs read from files (package crd/diff's
// Documents) and also refuses a CRD that appears twice: its errors are
// FILE:LINE:COL: FIELD: MESSAGE, located at the field the apiserver names
// or at the closest enclosing field the file has.
//
// Package crd/diff compares CRDs without this validation, so that it keeps
// to the API types (its deps_test.go); fieldwatch crd-diff runs both.
//
// The apiserver's validation imports k8s.io/client-go (for webhook client
// configurations) and k8s.io/apiserver: the package is for the command,
// not for rules. It imports no fieldwatch package but crd/diff and the
// leaves crd/diff uses, fileerr and internal/fieldpath (deps_test.go
// checks it).
package validate
