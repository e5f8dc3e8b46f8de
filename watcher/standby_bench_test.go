package watcher

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
)

// BenchmarkChangeBookkeeping reports the watcher's own cost per change,
// from the informer's callback to the handler's return (a handler that
// does nothing), for a single replica and for the leader of a leader
// election (watermark marks, completions, the done prefix), side by side
// in one run. No apiserver: changes are handed on as an informer would.
func BenchmarkChangeBookkeeping(b *testing.B) {
	for _, tc := range []struct {
		name     string
		election bool
	}{{"single-replica", false}, {"leader-election", true}} {
		b.Run(tc.name, func(b *testing.B) {
			w, err := newForClients(nil, nil, Config{Handler: HandlerFunc(func(context.Context, *Change) error { return nil }),
				Standby: tc.election, Logger: testLoggerB()})
			if err != nil {
				b.Fatal(err)
			}
			if tc.election {
				w.TakeOver(nil, nil)
				w.takeOver()
			}
			res := change.Resource{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespaced: true, Preferred: true}
			rw := &resourceWatch{w: w, res: res, track: w.tracker(watchKey{configMaps, "ns"})}
			rw.store = newObjectStore(rw)
			rw.track.initialDone()
			rw.track.setActive(true)
			typ := &objectType{gvk: configMaps.GroupVersion().WithKind("ConfigMap"), apiVersion: "v1", projection: change.Projection{Full: true}}
			const objects = 1000
			base := make([]*Object, objects)
			for i := range base {
				o, err := newObject(map[string]any{
					"metadata": map[string]any{"name": fmt.Sprintf("cm-%04d", i), "namespace": "ns", "uid": fmt.Sprintf("uid-%04d", i)},
					"data":     map[string]any{"v": "x"},
				}, typ)
				if err != nil {
					b.Fatal(err)
				}
				base[i] = o
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				prev := base[i%objects]
				o := *prev
				o.resourceVersion = strconv.Itoa(i + 1)
				rw.store.put(&o) // the cache is at the event's resourceVersion
				c := &Change{Type: change.Updated, Resource: res, Old: prev, New: &o, Time: time.Time{}}
				w.enqueue(c, rw, boundObject)
				rw.observed(o.resourceVersion, false)
				w.processNext(ctx)
				if tc.election && i%1000 == 999 {
					w.Watermarks() // a renewal
				}
			}
			b.StopTimer()
			if tc.election && w.Watermarks()[rw.track.key] != strconv.Itoa(b.N) {
				b.Fatalf("watermark %v after %d changes", w.Watermarks(), b.N)
			}
		})
	}
}
