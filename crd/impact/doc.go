// Package impact finds the custom resources a CRD change hits: for the
// breaking checks of a crd/diff comparison, the objects each one makes the
// apiserver reject or prune, counted and sampled, plus the objects that
// fail the new schema for reasons no check explains.
//
// A program compares the old and the new CRD, then scans the objects of the
// CRD's kind as they were before the change:
//
//	res := diff.Compare(oldCRD, newCRD)
//	err := impact.Scan(ctx, newCRD, res, objects) // objects: an iter.Seq[map[string]any]
//	for _, im := range res.Impact {
//		fmt.Println(im.Check, im.Effect, im.Count, im.Objects)
//	}
//
// Each object runs through what kube-apiserver does to a create under the
// new CRD, with the apiserver's own code (see Scanner), so the answer is
// what the apiserver rejects when the object is created again, and on an
// update that changes the field; CRD validation ratcheting lets an update
// that leaves the field as it is through, and the impact's messages say so.
// A Scanner takes the objects one at a time (Add) where Scan's iterator
// does not fit. The cost is linear in the number of objects times the
// schema size: each object is deep-copied once, then pruned, defaulted and
// validated.
//
// The package reads no cluster: its caller lists the objects (`fieldwatch
// run` from the watcher's cache, `fieldwatch crd-diff --cluster` in paged
// lists, internal/cases from a case's objects). It must not import
// k8s.io/client-go (deps_test.go checks it); of fieldwatch it imports
// package crd/diff and internal/fieldpath (the path syntax of a check's
// field) only.
package impact
