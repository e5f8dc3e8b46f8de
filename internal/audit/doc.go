// Package audit attributes watched changes to the authenticated users who
// made them, from the Kubernetes audit stream.
//
// A watch event says what changed, never who changed it; the apiserver
// writes the user into its audit events (audit.k8s.io/v1 Event). This
// package reads those events from two sources, an HTTPS webhook receiver
// for the apiserver's webhook backend (Webhook) and a follower of the
// apiserver's JSON audit log (Follower), keeps the few fields attribution
// needs of every successful write in a bounded Index, and matches each
// watched change against it (Attributor):
//
//   - exact: the audit event's responseObject (RequestResponse level)
//     carries the object's uid and the change's resourceVersion;
//   - window: Metadata or Request level, so no resourceVersion: one audit
//     event of a verb that fits the change, with a 2xx response, on the
//     same object, whose request was received no later than the change
//     was observed (plus the allowed clock skew) and which completed within
//     the match window of it. When the candidates are several writes by
//     the same identity, the user is certain and the request-level fields
//     that differ between them (auditID at least) are left out;
//   - ambiguous: candidates by different identities: the usernames are
//     listed and no user is named. fieldwatch never guesses;
//   - none: nothing fitted within the wait bound (the policy does not audit
//     the resource, the event was lost or is later than the bound).
//
// Request and response bodies are never kept: of a responseObject only
// metadata.uid, metadata.resourceVersion and metadata.name are read, of a
// requestObject only metadata.generateName; everything else of a body is
// skipped while decoding.
//
// Attribution at Metadata level is as good as the timing: a no-op write
// (audited, but producing no watch event) by another user shortly before a
// real change can be taken for it when the real change's own audit event
// has not arrived yet. Exact matching (RequestResponse level for the
// resources where it matters) has no such limit.
//
// audit must not import fieldwatch's rules or watcher packages: it works on
// plain values (Change) so that the pipeline can call it from anywhere.
package audit
