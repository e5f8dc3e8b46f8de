package watcher

import "context"

// source fills a resourceWatch's cache (its objectStore) from the
// apiserver and keeps it current until ctx ends, in one goroutine,
// through the store's client-go cache.ReflectorStore methods, so that a
// client-go cache.Reflector on the store is a source too (the queueing
// benchmark uses one). The watcher's own source is listAndWatch
// (listwatch.go, over internal/watchstream): it decodes of each watch
// event only what the projection keeps, straight from the stream into
// the compact cache, with no DeltaFIFO, indexer or goroutine of its own
// besides the stream's. It is kept in place of client-go's informer for
// as long as BenchmarkInformer, which runs it side by side with its fair
// peer (client-go's dynamic informer whose SetTransform keeps the same
// projection), shows it at least 1.5x better in heap per cached object
// or in CPU per change (internal/watchstream's doc says the same of the
// plumbing under it).
type source func(ctx context.Context)
