// Package change is the vocabulary package watcher and package rules share,
// so that a change observed by one is evaluated by the other without
// conversions: what happened to an object (Type), how it was seen
// (Observed: one write, or the net effect of several), which resource it
// belongs to (Resource), which resources are selected (Selector), which
// parts of their objects are read and cached (Projection), and who made a
// change (Attribution).
//
// A program that watches with package watcher and evaluates with package
// rules passes these values from one to the other:
//
//	set, err := rules.Load("rules.yaml")
//	...
//	w, err := watcher.New(restConfig, watcher.Config{
//		Selectors:  set.Selectors(),  // []change.Selector
//		Projection: set.Projection,   // func(change.Resource) change.Projection
//		Handler:    handler,          // receives the change.Type and change.Resource of each change
//	})
//
// Everything here is plain strings and slices. change must not import
// k8s.io packages nor any other fieldwatch package: rules.TestNoClientGo
// keeps it so.
package change
