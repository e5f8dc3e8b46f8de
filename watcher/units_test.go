package watcher

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fieldwatch/fieldwatch/change"
)

func TestGroupResources(t *testing.T) {
	g := &metav1.APIGroup{
		Name: "example.com",
		Versions: []metav1.GroupVersionForDiscovery{
			{GroupVersion: "example.com/v2", Version: "v2"},
			{GroupVersion: "example.com/v1", Version: "v1"},
		},
		PreferredVersion: metav1.GroupVersionForDiscovery{GroupVersion: "example.com/v1", Version: "v1"},
	}
	lists := map[string]*metav1.APIResourceList{
		"example.com/v1": {GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{
			{Name: "widgets", Kind: "Widget", Namespaced: true, Verbs: []string{"get", "list", "watch"}},
			{Name: "widgets/status", Kind: "Widget", Verbs: []string{"get", "patch"}},
			{Name: "reviews", Kind: "Review", Verbs: []string{"create"}},
		}},
		"example.com/v2": {GroupVersion: "example.com/v2", APIResources: []metav1.APIResource{
			{Name: "widgets", Kind: "Widget", Namespaced: true, Verbs: []string{"list", "watch"}},
			{Name: "gizmos", Kind: "Gizmo", Verbs: []string{"list", "watch"}},
		}},
	}
	got := groupResources(g, lists, func(gr schema.GroupResource) bool { return gr.Resource == "widgets" })
	want := []string{"widgets.v1.example.com pref=true custom=true", "widgets.v2.example.com pref=false custom=true", "gizmos.v2.example.com pref=true custom=false"}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i, r := range got {
		if s := fmt.Sprintf("%s pref=%v custom=%v", r, r.Preferred, r.Custom); s != want[i] {
			t.Errorf("[%d] %s, want %s", i, s, want[i])
		}
	}
}

func TestShard(t *testing.T) {
	if (Shard{}).owns("anything") != true || (Shard{}).Selector() != "" {
		t.Error("the zero shard must own everything")
	}
	s := Shard{Index: 1, Total: 4}
	if got, want := s.Selector(), "shardRange(object.metadata.uid, '0x4000000000000000', '0x8000000000000000')"; got != want {
		t.Errorf("selector %s, want %s", got, want)
	}
	if got := (Shard{Index: 2, Total: 3}).Selector(); got != "shardRange(object.metadata.uid, '0xaaaaaaaaaaaaaaaa', '0x10000000000000000')" {
		t.Errorf("last shard selector %s", got)
	}
	// Every UID belongs to exactly one shard, and random UIDs (as the
	// apiserver makes them) split evenly.
	const total, n = 3, 30000
	counts := make([]int, total)
	rnd := rand.New(rand.NewPCG(1, 2))
	for range n {
		uid := types.UID(fmt.Sprintf("%08x-%04x-4%03x-%04x-%012x", rnd.Uint32(), rnd.Uint32()&0xffff, rnd.Uint32()&0xfff, rnd.Uint32()&0xffff, rnd.Uint64()&0xffffffffffff))
		owners := 0
		for idx := range total {
			if (Shard{Index: idx, Total: total}).owns(uid) {
				owners++
				counts[idx]++
			}
		}
		if owners != 1 {
			t.Fatalf("%s has %d owners", uid, owners)
		}
	}
	for idx, c := range counts {
		if math.Abs(float64(c)-n/total) > n/total*0.05 {
			t.Errorf("shard %d owns %d of %d", idx, c, n)
		}
	}
	for _, bad := range []Shard{{Index: 3, Total: 3}, {Index: -1, Total: 2}, {Total: -1}} {
		if bad.Validate() == nil {
			t.Errorf("%+v validates", bad)
		}
	}
}

// TestPendingSequence: every change is kept as its own, in order, and
// counted; a change put back goes before the newer ones; the bounds say
// when one more may come.
func TestPendingSequence(t *testing.T) {
	typ := &objectType{}
	obj := func(uid, rv string) *Object {
		o := &Object{name: "x", resourceVersion: rv, typ: typ, rest: []byte(`{"data":{"v":"` + rv + `"}}`)}
		o.setUID(types.UID(uid))
		return o
	}
	limits := QueueLimits{Changes: 100, Bytes: 1 << 20, ObjectChanges: 6, ObjectBytes: 1 << 20}
	p := newPending(false, limits)
	k := key{name: "x"}
	changes := []*Change{
		{Type: change.Created, New: obj("a", "1")},
		{Type: change.Updated, Old: obj("a", "1"), New: obj("a", "2")},
		{Type: change.Updated, Old: obj("a", "2"), New: obj("a", "3")},
		{Type: change.Deleted, Old: obj("a", "3")},
		{Type: change.Created, New: obj("b", "4")},
		{Type: change.Updated, Old: obj("b", "4"), New: obj("b", "5")},
	}
	var bytes int64
	var prev *Object
	for _, c := range changes {
		p.add(k, c)
		bytes += c.size(prev)
		prev = c.New
	}
	if n, b := p.totals(); n != 6 || b != bytes {
		t.Errorf("totals %d changes, %d bytes; want 6, %d", n, b, bytes)
	}
	if ok, room := p.admits(k, 0, 0); ok || room == nil {
		t.Errorf("a 7th change of one object admitted under a bound of 6")
	}
	if ok, _ := p.admits(key{name: "y"}, 0, 0); !ok {
		t.Errorf("another object's change refused")
	}
	first := p.next(k)
	if ok, _ := p.admits(k, 0, 0); !ok {
		t.Errorf("no room after a change left")
	}
	if ok, _ := p.admits(k, 1, 0); ok {
		t.Errorf("admitted with one in flight at the bound")
	}
	got := fmt.Sprintf("%s(%s->%s) ", first.Type, rv(first.Old), rv(first.New))
	for _, c := range p.drain(k) {
		got += fmt.Sprintf("%s(%s->%s) ", c.Type, rv(c.Old), rv(c.New))
	}
	if want := "created(->1) updated(1->2) updated(2->3) deleted(3->) created(->4) updated(4->5) "; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	// A failed change goes back before newer ones, none merged.
	p.add(k, &Change{Type: change.Updated, Old: obj("b", "5"), New: obj("b", "6")})
	p.putBack(k, changes[5])
	got = ""
	for _, c := range p.drain(k) {
		got += fmt.Sprintf("%s->%s ", rv(c.Old), rv(c.New))
	}
	if want := "4->5 5->6 "; got != want {
		t.Errorf("after putBack: %s, want %s", got, want)
	}
	if n, b := p.totals(); p.len() != 0 || n != 0 || b != 0 {
		t.Errorf("%d keys, %d changes, %d bytes left after taking all", p.len(), n, b)
	}
}

// drain takes every change of k.
func (p *pending) drain(k key) []*Change {
	var out []*Change
	for c := p.next(k); c != nil; c = p.next(k) {
		out = append(out, c)
	}
	return out
}

func rv(o *Object) string {
	if o == nil {
		return ""
	}
	return o.resourceVersion
}
