// Package audit attributes watched changes to the authenticated users who
// made them, from the Kubernetes audit stream: a watch event says what
// changed, never who changed it, and the apiserver writes the user into its
// audit events (audit.k8s.io/v1 Event).
//
// `fieldwatch run` (internal/app) feeds an Index from one of two sources,
// an HTTPS receiver for the apiserver's webhook backend (Webhook) or a
// follower of its JSON audit log (Follower), and submits every watched
// change to an Attributor, which calls back with the change's Attribution
// once a fitting audit event is in the Index, or when a bounded wait is
// over:
//
//	ix := audit.NewIndex(audit.IndexOptions{})
//	wh, err := audit.NewWebhook(audit.WebhookOptions{CertFile: crt, KeyFile: key, ClientCAFile: ca, ClientNames: names}, ix)
//	go wh.ListenAndServe(ctx, ":8443")
//	at := audit.NewAttributor(ix, audit.AttributorOptions{})
//	err = at.Submit(ctx, audit.Change{...}, func(a change.Attribution) { /* evaluate the rules */ })
//
// An attribution is exact (the audit event names the change's
// resourceVersion), by window (one identity made every write that fits),
// ambiguous (writes by different identities fit: no user is named,
// fieldwatch never guesses) or none; Attributor says how each is decided,
// Record what each audit level tells, Webhook what the apiserver must be
// told. docs/attribution.md documents it for users.
//
// audit must not import fieldwatch's rules, watcher or app packages, nor
// client-go (TestDependencies keeps it so): it works on plain values
// (Change, whose Type is the shared change.Type) so that the pipeline can
// call it from anywhere.
package audit
