package watcher

import (
	"fmt"
	"slices"
	"testing"
	"unique"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fieldwatch/fieldwatch/change"
)

// addCachedWatch adds to w a synced watch of res in namespace ns ("":
// cluster-wide) whose cache holds names, and foreign objects of another
// shard; unsynced leaves its initial list unfinished.
func addCachedWatch(w *Watcher, res change.Resource, ns string, names, foreign []string, unsynced bool) {
	typ := &objectType{gvk: schema.GroupVersionKind{Group: res.Group, Version: res.Version, Kind: res.Kind}}
	other := *typ
	other.foreign = true
	rw := &resourceWatch{res: res, typ: typ, fromList: typ, foreign: &other}
	rw.store = newObjectStore(rw)
	for _, n := range names {
		rw.store.put(&Object{ns: unique.Make("scale"), name: n, resourceVersion: "1", typ: typ})
	}
	for _, n := range foreign {
		rw.store.put(&Object{ns: unique.Make("scale"), name: n, resourceVersion: "1", typ: rw.foreign})
	}
	rw.store.synced.Store(!unsynced)
	rw.listed.Store(&listMark{resourceVersion: "1"})
	w.watches[watchKey{gvr: schema.GroupVersionResource{Group: res.Group, Version: res.Version, Resource: res.Resource}, namespace: ns}] = rw
}

func scaleResource(i int) change.Resource {
	return change.Resource{Group: fmt.Sprintf("g%03d.scale.example.org", i%300), Version: "v1", Resource: fmt.Sprintf("scale%04ds", i),
		Kind: fmt.Sprintf("Scale%04d", i), Namespaced: true, Custom: true}
}

// TestSnapshotsGather: a resource's snapshot gathers its watches of
// every namespace, leaves other shards' objects out, and is left out
// while a watch of it has not synced, when it is followed for metadata
// only, or when want refuses it.
func TestSnapshotsGather(t *testing.T) {
	for _, perNamespace := range []bool{false, true} {
		w := &Watcher{watches: map[watchKey]*resourceWatch{}}
		addCachedWatch(w, scaleResource(0), "", []string{"a1", "a2"}, []string{"x"}, false)
		if perNamespace {
			addCachedWatch(w, scaleResource(1), "ns1", []string{"b1"}, nil, false)
			addCachedWatch(w, scaleResource(1), "ns2", []string{"b2"}, nil, false)
			addCachedWatch(w, scaleResource(2), "ns1", []string{"c1"}, nil, false)
			addCachedWatch(w, scaleResource(2), "ns2", []string{"c2"}, nil, true)
		}
		addCachedWatch(w, scaleResource(3), "", []string{"d1"}, nil, false)
		w.watches[watchKey{gvr: schema.GroupVersionResource{Group: scaleResource(3).Group, Version: "v1", Resource: scaleResource(3).Resource}}].metaOnly = true
		addCachedWatch(w, scaleResource(4), "", []string{"e1"}, nil, false)
		got := map[string][]string{}
		for _, s := range w.Snapshots(func(r change.Resource) bool { return r.Resource != scaleResource(4).Resource }) {
			var names []string
			for _, o := range s.Objects {
				names = append(names, o.name)
			}
			slices.Sort(names)
			got[s.Resource.Resource] = names
		}
		want := map[string][]string{"scale0000s": {"a1", "a2"}}
		if perNamespace {
			want["scale0001s"] = []string{"b1", "b2"}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("with watches per namespace %v: %v, want %v", perNamespace, got, want)
		}
	}
}

// BenchmarkSnapshots is what a scrape of metrics from fields asks of the
// watcher at 3,000 custom resources of one object each (make bench's
// kube-state-metrics scenario): every resource's snapshot, with one in
// ten left out by want. It reports the CPU and the allocations a call.
func BenchmarkSnapshots(b *testing.B) {
	w := &Watcher{watches: map[watchKey]*resourceWatch{}}
	for i := range 3000 {
		addCachedWatch(w, scaleResource(i), "", []string{"one"}, nil, false)
	}
	want := func(r change.Resource) bool { return r.Resource[len(r.Resource)-2] != '9' }
	b.ReportAllocs()
	for b.Loop() {
		if n := len(w.Snapshots(want)); n != 2700 {
			b.Fatalf("%d snapshots, want 2700", n)
		}
	}
}
