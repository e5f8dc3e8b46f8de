// Package testenv starts the real local control plane (kube-apiserver and
// etcd built into bin/ by `make controlplane`) for fieldwatch's integration
// tests and demo, through controller-runtime's envtest.
//
// A test package normally starts one control plane for all its tests from
// TestMain with Main, and reads it with Shared; tests that stop or reconfigure
// the apiserver start their own with Start. When the binaries are missing the
// start fails with a message that says to run `make controlplane`: tests that
// need Kubernetes are never skipped.
//
// testenv is for tests and hack/ programs only; production packages must not
// import it.
package testenv
