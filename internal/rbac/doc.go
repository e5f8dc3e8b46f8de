// Package rbac is `fieldwatch rbac`: it turns a rules Set into the
// least-privilege RBAC that `fieldwatch run` needs for it, as YAML
// manifests to apply.
//
//	set, err := rules.Load("rules.yaml")
//	crds, err := rbac.CRDResources("crds/") // offline: the CRDs rules for every custom resource get
//	out, err := rbac.Generate(set, rbac.Options{LeaderElection: true, CRDs: crds})
//
// Generate grants get, list and watch on what the rules select (in the
// namespaces a rule is restricted to, as Roles; cluster-wide otherwise)
// and on CRDs and APIServices, create on events.k8s.io Events where an
// event action is used, patch where a patch action is used, and with
// leader election get, create and update on Leases. Kinds become resource
// names as discovery (Options.Resources) gives them, or offline by the
// usual plural rules. A wildcard selector is never granted "*" where that
// would include Secrets: it gets the resources discovery (or the CRDs
// given) shows it matches, or is refused.
//
// CRDResources reads CRD manifests with package crd/diff's file walker,
// the one `fieldwatch crd-diff` reads its files with.
package rbac
