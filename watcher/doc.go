// Package watcher turns a Kubernetes cluster into a stream of changes for
// any resource it serves, built-in, aggregated or CRD-backed.
//
// Discovery lists the resources; the caller's selectors pick some of them;
// one dynamic informer per GroupVersionResource watches each, caching
// compact projected objects (Object) rather than full unstructured ones.
// Resources, selectors, projections and change types are package change's,
// the vocabulary the watcher shares with the rules. The
// set of informers follows the cluster: a CRD created while running is
// watched within seconds, a CRD deleted is dropped without error loops. Events
// go through a rate-limited work queue keyed by resource/namespace/name, so
// that one key is handled by one worker at a time, in order, and a Handler
// receives each Change with the old and new objects.
//
// watcher knows nothing of rules or actions: it must not import
// fieldwatch's rules packages (package change is not one).
package watcher
