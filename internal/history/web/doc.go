// Package web serves the history (package history) over HTTP: the JSON
// API /api/v1/history and the pages under /history, a timeline
// filterable like the API and one object's history, rendered on the
// server from templates and assets embedded in the binary (nothing is
// loaded from elsewhere: it works in an air-gapped cluster).
//
// The history says who changed what about everything fieldwatch
// watches, so every request is authorized as kube-rbac-proxy and the
// kubelet authorize theirs: the caller's bearer token is authenticated
// with a TokenReview, and each entry is shown only when a
// SubjectAccessReview allows the caller to get that resource in that
// namespace (the custom resources a CRD change hits are filtered the
// same way). Decisions are cached briefly. A request without a token is
// served only when it comes from a loopback address (kubectl
// port-forward, a sidecar), and then sees everything.
package web
