// Package watchstream is the hand-written plumbing under the watcher's
// informer: the REST client its lists and watches go through (NewClient,
// over a transport that dials a new HTTP/2 connection only when those
// there are cannot take a request, one at a time), the reader of a
// watch's response body (Stream, which hands each event's object on as a
// RawObject and holds no buffer while the watch is idle), client-go's
// watch as the same Source (FromWatch), and the decoder that builds of an
// object only what a change.Projection keeps (DecodeProjected). It is
// used in place of client-go's informer machinery (Reflector, its stream
// decoder, the transport client-go builds) for as long as
// BenchmarkInformer in package watcher, which runs the watcher's informer
// side by side with its fair peer (client-go's dynamic informer with a
// SetTransform that keeps the same projection), shows it at least 1.5x
// better in heap per cached object or in CPU per change; `make bench
// -sections crds` measures what thousands of watched resources cost at a
// start and when quiet, and TestGatedTransportDials holds the transport
// to the fewest dials (docs/performance.md holds the figures). The
// informer's loop (listwatch.go) and its cache (informer.go) stay in
// package watcher, which owns the objects they write.
//
// Of fieldwatch, watchstream imports package change and internal/jsonscan
// only: TestDependencies keeps it so.
package watchstream
