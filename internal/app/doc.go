// Package app is `fieldwatch run`: it ties the watcher, the rules and the
// actions together into the process people deploy. cmd/fieldwatch parses
// the flags into a Config and calls Run, which returns when its context
// ends:
//
//	err := app.Run(ctx, app.Config{RulesFiles: []string{"rules.yaml"}, Rest: restConfig, StateDir: dir})
//
// Run loads the rules, tells the watcher which resources (and which of
// their fields) they need, evaluates every change (computing, for rules
// that ask for it, the custom resources a CRD change hits: crdimpact.go),
// hands the firings to the actions, reloads the rules when their file
// changes, serves /metrics, /healthz and /readyz, and takes part in leader
// election (Config.LeaderElect: leader.go, lease.go) and sharding. With an
// audit source (Config.Audit) it says who made each change: it runs the
// audit webhook receiver or log follower of package internal/audit, and
// each change waits, bounded, for its audit event before the rules see it
// (pipeline.go, audit.go; docs/attribution.md). With Config.Admission it
// also, or instead, serves fieldwatch's own validating admission webhook,
// which every cluster can call, keeping its certificate itself if asked
// (admission.go, admissioncert.go), and on it the CRD guard of
// Config.CRDGuard (crdguard.go; package internal/crdguard). With a state
// directory or a PostgreSQL DSN (Config.History) it keeps the history of
// what fired, recorded once each firing's actions are done (a standby
// records what the leader's watermarks confirm), and serves it on the
// HTTP server (history.go; package internal/history; docs/history.md).
//
// The logic of run lives here rather than in cmd/fieldwatch so that tests
// call Run in process against the real control plane and get what the
// binary gets (defaults.go holds the defaults of both). The other commands
// have packages of their own: `fieldwatch rbac` is internal/rbac,
// `fieldwatch test` internal/cases, `fieldwatch crd-diff` crd/diff,
// crd/impact and crd/validate.
package app
