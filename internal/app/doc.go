// Package app is `fieldwatch run`: it ties the watcher, the rules and the
// actions together into the process people deploy. It loads the rules,
// tells the watcher which resources (and which of their fields) they need,
// evaluates every change (computing, for rules that ask for it, the custom
// resources a CRD change hits: impact.go), hands the firings to the actions, reloads the
// rules when their file changes, serves /metrics, /healthz and /readyz, and
// takes part in leader election and sharding. In a leader election every
// replica watches; the leader writes its watermarks on the Lease with each
// renewal, and a standby follows them and takes over from them (leader.go,
// lease.go). With an audit source (AuditConfig) it says who made each
// change: it runs the audit webhook receiver or log follower of package
// internal/audit, and each change waits, bounded, for its audit event
// before the rules see it (pipeline.go, audit.go; docs/attribution.md).
// With a state directory or a PostgreSQL DSN it keeps the history of what
// fired, recorded once each firing's actions are done (a standby records
// what the leader's watermarks confirm), and serves it on the HTTP
// server (history.go; packages internal/history and its web;
// docs/history.md).
//
// cmd/fieldwatch only parses flags and calls Run; the logic lives here so
// that it can be tested in process against the real control plane.
package app
