// Package watcher turns a Kubernetes cluster into a stream of changes of
// the resources it serves, built-in, aggregated or CRD-backed, and follows
// CRDs as they come and go.
//
// A program says which resources it wants (change.Selector), what of their
// objects to cache (change.Projection) and who receives the changes (a
// Handler), then runs the Watcher until its context ends:
//
//	w, err := watcher.New(restConfig, watcher.Config{
//		Selectors: []change.Selector{{Group: "apps", Kind: "Deployment"}},
//		Handler: watcher.HandlerFunc(func(ctx context.Context, c *watcher.Change) error {
//			fmt.Println(c.Type, c.Resource.Kind, c.Object().GetName())
//			return nil
//		}),
//	})
//	...
//	err = w.Run(ctx)
//
// The Handler receives each Change with the old and the new object, one at
// a time per object, in the order the changes happened: every write the
// watch delivers is a Change of its own. A Store keeps the restart
// baseline, so that the next run replays every write made while the
// program was down (or, when the apiserver no longer can, reports each
// object's net effect). For a leader election the watcher starts as a
// standby (Config.Standby) and follows the leader's Watermarks until it
// takes over (TakeOver). Resources, selectors, projections and change
// types are package change's, the vocabulary the watcher shares with
// package rules.
//
// Each resource is watched by an informer of the watcher's own: one
// goroutine that lists it (a watch-list where the apiserver serves one),
// reads its watch stream itself, decodes of each object what the
// projection keeps and writes it to a compact cache, handing each change on
// as it is applied. With the HTTP/2 stream's goroutine a watched resource
// costs two goroutines whose stacks stay small while the stream is idle,
// and no read buffer until an event arrives, so that clusters
// with thousands of CRDs, most holding few objects, cost little each.
//
// The informer's watch plumbing (its client and transport, the watch
// stream's reader, the projected decoder) is internal/watchstream's.
//
// watcher knows nothing of rules or actions: of fieldwatch it imports
// package change, the JSON scanner internal/jsonscan and its own
// internal/watchstream only (TestDependencies keeps it so).
package watcher
