// Package e2e holds the end-to-end tests of fieldwatch as its users run
// it: the image of make image, deploy/ rendered by kustomize and applied
// server-side to the real one-node cluster of make cluster (kubelet,
// containerd, runc, the CNI bridge, kube-proxy), its pods, volumes,
// probes, service account, Services, leader election, rules reload,
// rolling update, audit webhook and memory limit exercised as a user
// would, with the results read from the pods' logs through the apiserver.
//
// The tests carry the build tag e2e, so that `go test ./...` does not
// build them: make e2e starts the cluster when it is not running, runs
// them with FIELDWATCH_IMAGE naming the image it loaded, and stops the
// cluster again (make test runs make e2e). They remove what they create.
// Nothing but tests lives here.
package e2e
