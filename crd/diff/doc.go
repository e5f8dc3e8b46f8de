// Package diff compares two versions of a CustomResourceDefinition and says
// which differences can break the API's clients or its stored objects: the
// CRD upgrade safety checks OLM v1 runs as a preflight, for every CRD
// change rather than for the ones one installer makes.
//
// A program reads or receives the old and the new CRD and compares them:
//
//	docs, err := diff.ReadCRDs("old.yaml", "new.yaml") // or FromMap, for the watcher's objects
//	...
//	res := diff.Compare(docs[0].CRD, docs[1].CRD)
//	if res.Breaking > 0 {
//		for _, c := range res.Checks {
//			fmt.Println(c.Severity, c.Check, c.Field, c.Message)
//		}
//	}
//
// A Result lists every difference as a Check (see Check for every check and
// its severity), counts them, marshals to the JSON fieldwatch payloads
// carry, and gives the same as plain values for CEL (Result.Value).
// CompareWith reports the checks under a Policy: another severity, or not
// at all (ReadPolicy reads fieldwatch's checks map and the configuration
// format of crdify, the reference checker; docs/crd-checks.md maps every
// check to crdify's validations). Package crd/impact fills Result.Impact
// with the custom resources the breaking checks hit; package crd/validate
// runs the apiserver's own validation of the input CRDs, which Compare does
// not: a CRD kube-apiserver would refuse gives a Result that may mean
// little.
//
// ReadCRDs and ReadManifests are the one file walker of fieldwatch (files,
// directories, Lists), whose errors are FILE:LINE:COL, a *fileerr.Error.
//
// The package uses only the API types (k8s.io/apiextensions-apiserver's
// pkg/apis/apiextensions/v1 and k8s.io/apimachinery) and, of fieldwatch,
// internal/fieldpath (Check.Field's path syntax) and fileerr: it must not
// import k8s.io/client-go nor k8s.io/apiserver (deps_test.go checks it).
// Its cost is linear in the size of the two CRDs.
package diff
