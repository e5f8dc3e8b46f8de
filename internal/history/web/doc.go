// Package web serves the history (package history) over HTTP: the JSON
// API /api/v1/history and the pages under /history, a timeline
// filterable like the API and one object's history, rendered on the
// server from templates and assets embedded in the binary (nothing is
// loaded from elsewhere: it works in an air-gapped cluster). For objects
// whose states the history keeps, ObjectsPath answers an object as it
// was at a time and what changed between two times, and the object page
// has a time control that shows the same.
//
// The history says who changed what about everything fieldwatch
// watches, so every request is authenticated and authorized as the
// apiserver would its own: the caller's bearer token (or, from a
// browser, the password of HTTP Basic credentials) by a TokenReview, and
// what it may read by SubjectAccessReviews, through k8s.io/apiserver's
// webhook authenticator and authorizer and their caches. `list` on a
// resource (in a namespace, or everywhere) shows its entries; `get`
// alone those of an object the query names; the actor details take `get`
// on ActorsPath. Access is decided before the store reads an entry,
// within the query (history.Access).
//
// The reviews go through a client of their own that never queues: past
// its rate or its requests in flight a request is refused at once (429),
// and so are the requests of a source address that failed too often, so
// that forged tokens cannot slow the process's other requests to the
// apiserver (its Lease renewals). A response holds at most
// Options.MaxResponseBytes of payloads, reserved from
// Options.MaxBytesInFlight before they are read; the store goes through
// at most its scan window of entries a request; cursors are sealed.
//
// A request without credentials is served only with
// Options.InsecureLoopback, from a loopback address to a loopback Host,
// and then sees everything.
//
// The package imports client-go and k8s.io/apiserver's authentication
// and authorization; it must not import the watcher, the rules, the
// actions or the app.
package web
