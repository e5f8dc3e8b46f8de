// Package rbac is `fieldwatch rbac`: it turns a rules Set into the
// least-privilege RBAC that `fieldwatch run` needs for it, as YAML
// manifests to apply.
//
//	set, err := rules.Load("rules.yaml")
//	crds, err := rbac.CRDResources("crds/") // offline: the CRDs rules for every custom resource get
//	out, err := rbac.Generate(set, rbac.Options{LeaderElection: true, CRDs: crds})
//
// Generate grants what the rules read and write (Generate says what each
// grant is for), in the namespaces a rule is restricted to where it is, and
// never grants "*" where that would include Secrets. Kinds become resource
// names as discovery (Options.Resources) gives them, or offline by the
// usual plural rules. AdmissionWebhook turns the same Set into the
// ValidatingWebhookConfiguration of fieldwatch's admission webhook (the
// writes of what the rules select), and AdmissionHelmValues into the
// chart's admission.rules. CRDResources reads CRD manifests with package
// crd/diff's file walker, the one `fieldwatch crd-diff` reads its files
// with.
package rbac
