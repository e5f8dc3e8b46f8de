// Package audit attributes watched changes to the authenticated users who
// made them: a watch event says what changed, never who changed it. Two
// kinds of sources say who: the Kubernetes audit stream, into which the
// apiserver writes the user of each request (audit.k8s.io/v1 Event), and
// fieldwatch's own validating admission webhook, to which the apiserver
// sends each write with its user before it is stored (AdmissionReview).
//
// `fieldwatch run` (internal/app) feeds an Index from its sources, an
// HTTPS receiver for the apiserver's audit webhook backend (Webhook), a
// follower of its JSON audit log (Follower), the admission endpoint
// (Admission), and submits every watched change to an Attributor, which
// calls back with the change's Attribution once a fitting audit event or
// admission record is in the Index, or when a bounded wait is over:
//
//	ix := audit.NewIndex(audit.IndexOptions{})
//	wh, err := audit.NewWebhook(audit.WebhookOptions{CertFile: crt, KeyFile: key, ClientCAFile: ca, ClientNames: names}, ix)
//	go wh.ListenAndServe(ctx, ":8443")
//	at := audit.NewAttributor(ix, audit.AttributorOptions{})
//	err = at.Submit(ctx, audit.Change{...}, func(a change.Attribution) { /* evaluate the rules */ })
//
// An attribution is exact (the audit event names the change's
// resourceVersion; or an admission record names the object's uid, the
// resourceVersion the change applied to and the content it stored),
// by window (one identity made every write that fits), ambiguous (writes
// by different identities fit: no user is named, fieldwatch never
// guesses) or none; Attributor says how each is decided, Record what each
// audit level tells, Webhook and Admission what the apiserver must be
// told, admissionFits how an admission record is matched and why it can
// be exact. The admission endpoint hands the reviews an AdmissionGuard
// takes (fieldwatch's CRD guard, package crdguard, wired by internal/app)
// to it for their answer, and carries its override to the record.
// docs/attribution.md documents it for users, with the threat model of
// the admission endpoint.
//
// audit must not import fieldwatch's rules, watcher or app packages, nor
// client-go (TestDependencies keeps it so): it works on plain values
// (Change, whose Type is the shared change.Type) so that the pipeline can
// call it from anywhere.
package audit
