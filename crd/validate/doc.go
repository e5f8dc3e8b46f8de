// Package validate checks CustomResourceDefinitions the way kube-apiserver
// checks a create, with the apiserver's own validation code, so that
// `fieldwatch crd-diff` refuses a CRD the cluster would refuse before it
// compares it:
//
//	docs, err := diff.ReadCRDs("new.yaml")
//	...
//	if err := validate.Documents(ctx, docs); err != nil {
//		// FILE:LINE:COL: FIELD: MESSAGE, one line per error
//	}
//
// CRD validates one CRD and returns the apiserver's field errors; Documents
// validates the CRDs read from files and also refuses a CRD that appears
// twice, each error located at the field the apiserver names or at the
// closest enclosing field the file has. Package crd/diff compares CRDs
// without this validation, so that it keeps to the API types.
//
// The apiserver's validation imports k8s.io/client-go (for webhook client
// configurations) and k8s.io/apiserver: the package is for the command, not
// for rules. It imports no fieldwatch package but crd/diff and the leaves
// crd/diff uses, fileerr and internal/fieldpath (deps_test.go checks it).
package validate
