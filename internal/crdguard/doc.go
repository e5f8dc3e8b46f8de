// Package crdguard stops breaking CustomResourceDefinition changes at
// admission, and keeps the storage-version ledger they are judged with.
//
// A Guard answers the admission reviews of CRD updates and deletions that
// fieldwatch's admission endpoint receives: the checks of package
// crd/diff, their impact on the live objects (package crd/impact), read
// from fieldwatch's cache or listed in pages (Source), and, for the
// versions a change takes out of spec.versions or status.storedVersions,
// the objects still stored at them. Its mode says what it does: warn
// (allowed, with warnings kubectl, Helm and client-go print) or deny
// (refused with an Invalid status, unless the CRD carries
// AllowAnnotation). It answers within its time whatever the cluster's
// size, and says so when it could not finish.
//
//	g, err := crdguard.New(crdguard.Options{Mode: crdguard.Deny, Source: src, Ledger: ledger})
//	...
//	if crdguard.Handles(review.Request) {
//		d := g.Review(ctx, review.Request) // d.Response answers; d.Override is for the payload
//	}
//
// A Ledger follows the CRDs and tells, from an object's resourceVersion,
// the version the object is stored at (Classifier); its Collector exports
// the counts per CRD and version. `fieldwatch crd-diff --cluster` and
// `fieldwatch crd-migrate` use NewClassifier, what a ledger that has just
// seen a CRD knows, and crd-migrate leaves its record on the CRD
// (MigrationAnnotation) for the ledger to read.
//
// Of fieldwatch the package imports crd/diff, crd/impact and watcher (the
// cache's objects); it must not import rules, action, internal/app nor
// cmd (TestDependencies keeps it so): the admission endpoint and `fieldwatch
// run` call it, never the other way round.
package crdguard
