// Package watcher turns a Kubernetes cluster into a stream of changes for
// any resource it serves, built-in, aggregated or CRD-backed.
//
// Discovery lists the resources; the caller's selectors pick some of them;
// one informer per GroupVersionResource watches each, caching compact
// projected objects (Object) rather than full unstructured ones. An
// informer is a client-go Reflector writing to the watcher's own cache
// (objectStore), which hands each change on as it is applied, in the
// reflector's goroutine: no DeltaFIFO, no processing goroutine and no
// string-keyed index per resource, so that thousands of CRDs, most with
// few objects, cost little each; the watches share the client's HTTP/2
// connections.
// Resources, selectors, projections and change types are package change's,
// the vocabulary the watcher shares with the rules. The
// set of informers follows the cluster: a CRD created while running is
// watched within seconds, a CRD deleted is dropped without error loops. Events
// go through a rate-limited work queue keyed by resource/namespace/name, so
// that one key is handled by one worker at a time, in order, and a Handler
// receives each Change with the old and new objects: every write the watch
// delivers is a Change of its own, never merged with another; what waits
// is bounded (QueueLimits), an informer's watch stream waiting at a bound.
//
// A Store keeps the restart baseline: what was handled for each object, and
// how far each informer got (its watermark), so that the next run has the
// apiserver replay every write since, or, when it no longer can, reports
// what changed meanwhile as each object's net effect. In a leader election
// the watcher starts as a standby (Config.Standby): it watches and keeps its
// changes without handing them on; the leader publishes its Watermarks (per
// informer, the resourceVersion up to which every change it received is
// handled) and the standby applies them (Confirm), recording in its own
// Store what they cover and dropping it; TakeOver hands the rest to the
// handler. A leader that loses its election calls Abandon and stops at
// once, leaving what it did not handle to the next one.
//
// The values a projection's Hashed paths select (what payloads redact: a
// Secret's data, say) are stored in the Store as salted hashes, never as
// values; at the next start a hash that still matches the object's value
// is put back as that value before comparing.
//
// watcher knows nothing of rules or actions: it must not import
// fieldwatch's rules packages (package change is not one).
package watcher
