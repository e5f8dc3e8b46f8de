// Package charts holds the tests of fieldwatch's Helm chart
// (charts/fieldwatch), in a module of its own so that Helm's SDK
// (helm.sh/helm/v4, with kubectl, kustomize and their dependencies) stays
// out of fieldwatch's go.mod: `make test` runs them too.
//
// The tests lint the chart, compare its render for the default values and
// for each option with golden files (-update rewrites them), hold the
// default render to what `kubectl apply -k deploy/` applies, the values
// table of its README to values.yaml, and the RBAC it renders from the
// values `fieldwatch rbac -o helm-values` prints to the manifests `fieldwatch
// rbac` prints; on the real control plane (internal/testenv) the apiserver
// accepts every render, and a namespaced install's RBAC lets fieldwatch,
// run as its service account with the chart's arguments, see changes in
// its namespaces and read nothing outside them. charts/e2e (build tag
// e2e, make e2e) installs, upgrades, rolls back and uninstalls the chart
// on the one-node cluster of make cluster.
//
// It holds no code but tests.
package charts
