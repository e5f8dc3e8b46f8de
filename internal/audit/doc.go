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
//     that differ between them (auditID at least) are left out. When every
//     candidate was held before the change was observed, the change is
//     decided only when its wait is over: such an event may be another
//     request's (a no-op write, an event posted ahead of the apiserver's),
//     and the change's own, when it comes, makes it ambiguous or exact;
//   - ambiguous: candidates by different identities: the usernames are
//     listed and no user is named. fieldwatch never guesses;
//   - none: nothing fitted within the wait bound (the policy does not audit
//     the resource, the event was lost or is later than the bound).
//
// Request and response bodies are never kept: of a responseObject only
// metadata.uid, metadata.resourceVersion and metadata.name are read (of a
// Status, details.uid), of a requestObject only metadata.generateName;
// everything else of a body is skipped while decoding.
//
// The verbs that fit: create for a creation (and, weakly, the update or
// patch of create-on-update and server-side apply); update and patch for
// an update, delete, deletecollection and pods/eviction for one that set
// metadata.deletionTimestamp; those for a deletion (and, weakly, the
// update or patch that removed the last finalizer of a terminating
// object). A change that only weak candidates fit is decided when its wait
// is over, in case its own request is still on its way.
//
// Attribution at Metadata level is as good as the timing: a no-op patch
// (audited, but producing no watch event) by another user shortly before a
// real change can be taken for it when its event arrives after the change
// was observed and before the real change's own (a no-op update is
// recognised when the change gives its previous resourceVersion). Exact
// matching (RequestResponse level for the resources where it matters) has
// no such limit.
//
// The webhook accepts only the apiserver: a client certificate of the
// client CA that names one of WebhookOptions.ClientNames, or the token.
// Whoever can post can name anyone as the author of a change. What a post
// may cost is bounded: MaxConcurrentRequests read at once (more get 429),
// MaxBodyBytes of body of which a quarter of events kept, MaxEventJSONBytes
// of JSON and MaxEventBytes kept an event (a larger event is dropped and
// counted), all or nothing per post; the Index bounds its events by count,
// bytes (IndexOptions.MaxBytes) and age.
//
// What each audit level tells (kube-apiserver v1.37, checked by the tests):
// every level has the user, the impersonated user, the user agent, the
// source IPs, the objectRef and the response code. objectRef.name is empty
// for a create with generateName and for deletecollection; objectRef.uid
// and objectRef.resourceVersion are set for an update only (from its body:
// the version it applies to). The response status of a delete that removed
// the object names its uid at every level, so deletions match exactly even
// at Metadata level. Only RequestResponse level has the responseObject,
// with the new resourceVersion (a no-op write returns the old one). Dry
// runs are audited like writes; they are dropped.
//
// The apiserver side: --audit-policy-file, and --audit-webhook-config-file
// (a kubeconfig whose cluster.server is the receiver, with its CA and the
// client certificate or token the receiver checks) or --audit-log-path
// (--audit-log-format=json, the default; written synchronously). The batch
// webhook backend (the default mode) sends a batch when it has
// --audit-webhook-batch-max-size events (400) or after
// --audit-webhook-batch-max-wait, 30s by default: longer than the
// Attributor's wait, so set it to about 1s. --audit-webhook-truncate-enabled
// keeps batches under 10 MB (below DefaultMaxBodyBytes) and events under
// 100 KB (below MaxEventJSONBytes) by dropping the bodies of large events,
// which then match by window instead of exactly.
//
// audit must not import fieldwatch's rules, watcher or app packages, nor
// client-go (TestDependencies keeps it so): it works on plain values
// (Change, whose Type is the shared change.Type) so that the pipeline can
// call it from anywhere.
package audit
