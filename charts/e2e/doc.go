// Package e2e holds the tests of fieldwatch's Helm chart on the real
// one-node cluster of make cluster (kubelet, containerd, the CNI bridge,
// kube-proxy, the local volume provisioner): the chart installed,
// upgraded, rolled back and uninstalled with Helm's SDK (helm.sh/helm/v4,
// as `helm` does), the image of make image running in its pods, the
// results read from the pods' logs through the apiserver.
//
// The tests carry the build tag e2e: make e2e runs them after the
// end-to-end tests of ../../e2e, on the same cluster, with
// FIELDWATCH_IMAGE naming the image it loaded. They live here, in the
// chart's module, so that Helm's SDK stays out of fieldwatch's go.mod;
// the helpers they share with ../../e2e (following the pods' logs, the
// writers and the comparison of their writes with the payloads) are test
// files there, which another module cannot import, so they are repeated
// here, cut to what the chart's tests use. They remove what they create
// but the cluster itself. Nothing but tests lives here.
package e2e
