package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// runBareCRDsChild is the bare informers of the CRD-count scenario: one
// discovery (its requests counted), then a client-go dynamic informer
// factory with an informer on every custom resource and no handler. It
// prints "synced" once all have synced, then "goroutines N" and
// "discovery N" every second.
func runBareCRDsChild(ctx context.Context, kubeconfig string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 200, 400 // fieldwatch's in the bench
	var requests atomic.Int64
	dcfg := *cfg
	dcfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			requests.Add(1)
			return rt.RoundTrip(r)
		})
	})
	disc, err := discovery.NewDiscoveryClientForConfig(&dcfg)
	if err != nil {
		return err
	}
	_, lists, err := disc.ServerGroupsAndResources()
	if err != nil {
		return fmt.Errorf("discovery: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	factory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	var informers []cache.SharedIndexInformer
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil || !strings.Contains(gv.Group, ".") || strings.HasSuffix(gv.Group, ".k8s.io") {
			continue // built-in
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") {
				continue
			}
			informers = append(informers, factory.ForResource(gv.WithResource(r.Name)).Informer())
		}
	}
	factory.Start(ctx.Done())
	for _, inf := range informers {
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			return ctx.Err()
		}
	}
	fmt.Println("synced")
	reportHeapOnSignal(ctx)
	for {
		fmt.Printf("goroutines %d\ndiscovery %d\n", runtime.NumGoroutine(), requests.Load())
		select {
		case <-ctx.Done():
			factory.Shutdown()
			return nil
		case <-time.After(time.Second):
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// reportHeapOnSignal prints "heap N", the heap after a collection, on
// each SIGUSR1.
func reportHeapOnSignal(ctx context.Context) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-sig:
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				fmt.Printf("heap %d\n", ms.HeapAlloc)
			}
		}
	}()
}
