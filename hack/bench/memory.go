package main

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/rules"
	"github.com/fieldwatch/fieldwatch/watcher"
)

// heapAfterGC returns the live heap after full collections.
func heapAfterGC() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// cacher starts something that caches the objects of one resource and
// returns how many it holds and whether it has synced; ctx stops it and
// stopped closes once it has.
type cacher func(ctx context.Context) (count func() int, synced func() bool, stopped <-chan struct{}, err error)

// bytesPerObject measures the live heap a cacher adds per cached object.
func bytesPerObject(want int, start cacher) (float64, error) {
	before := heapAfterGC()
	ctx, cancel := context.WithCancel(context.Background())
	count, synced, stopped, err := start(ctx)
	if err != nil {
		cancel()
		return 0, err
	}
	deadline := time.Now().Add(5 * time.Minute)
	for !synced() || count() < want {
		if time.Now().After(deadline) {
			cancel()
			return 0, fmt.Errorf("not synced after 5m: %d of %d objects", count(), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
	after := heapAfterGC()
	n := count()
	cancel()
	<-stopped
	return float64(after-before) / float64(n), nil
}

// bareCacher is a client-go dynamic informer on one namespace, optionally
// stripping managedFields.
func bareCacher(dyn dynamic.Interface, gvr schema.GroupVersionResource, ns string, strip bool) cacher {
	return func(ctx context.Context) (func() int, func() bool, <-chan struct{}, error) {
		inf := dynamicinformer.NewFilteredDynamicInformer(dyn, gvr, ns, 0, cache.Indexers{}, nil).Informer()
		if strip {
			if err := inf.SetTransform(func(obj any) (any, error) {
				if u, ok := obj.(*unstructured.Unstructured); ok {
					u.SetManagedFields(nil)
				}
				return obj, nil
			}); err != nil {
				return nil, nil, nil, err
			}
		}
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			inf.RunWithContext(ctx)
		}()
		return func() int { return len(inf.GetStore().ListKeys()) }, inf.HasSynced, stopped, nil
	}
}

// peerCacher is the fair peer: a client-go dynamic informer on one
// namespace whose transform keeps what fieldwatch's cache keeps under a
// rule reading paths.
func peerCacher(dyn dynamic.Interface, gvr schema.GroupVersionResource, ns string, paths ...string) cacher {
	return func(ctx context.Context) (func() int, func() bool, <-chan struct{}, error) {
		inf := dynamicinformer.NewFilteredDynamicInformer(dyn, gvr, ns, 0, cache.Indexers{}, nil).Informer()
		if err := inf.SetTransform(projectTransform(paths)); err != nil {
			return nil, nil, nil, err
		}
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			inf.RunWithContext(ctx)
		}()
		return func() int { return len(inf.GetStore().ListKeys()) }, inf.HasSynced, stopped, nil
	}
}

// fieldwatchCacher is fieldwatch's watcher on one resource, caching what
// the rules read (the projection the command computes).
func fieldwatchCacher(config *rest.Config, sel change.Selector, set *rules.Set) cacher {
	return func(ctx context.Context) (func() int, func() bool, <-chan struct{}, error) {
		w, err := watcher.New(config, watcher.Config{
			Selectors:  []change.Selector{sel},
			Projection: set.Projection,
			Handler:    watcher.HandlerFunc(func(context.Context, *watcher.Change) error { return nil }),
			Logger:     slog.New(slog.DiscardHandler),
		})
		if err != nil {
			return nil, nil, nil, err
		}
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			_ = w.Run(ctx)
		}()
		return w.CachedObjects, w.Synced, stopped, nil
	}
}
