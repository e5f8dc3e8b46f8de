package watcher

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fieldwatch/fieldwatch/change"
)

// TestCommitsInOrder is a property test of commits: changes of several
// objects start in order per object (as workers take them) and their
// handler finishes them in a random order, interleaved with the starts. At
// every step the Store holds, for each object, exactly the state after the
// longest prefix of its changes that is done: never a later state while an
// earlier change is pending, never an older one once a later prefix is
// done. Each change's tracker mark is finished in the same order.
func TestCommitsInOrder(t *testing.T) {
	t.Parallel()
	store, err := OpenStore(filepath.Join(t.TempDir(), "baseline.db"), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	store.db.NoSync = true // thousands of small transactions; durability is not what is tested
	res := change.Resource{Group: widgets.Group, Version: widgets.Version, Resource: widgets.Resource, Kind: "Widget", Namespaced: true, Custom: true, Preferred: true}
	typ := &objectType{gvk: widgets.GroupVersion().WithKind("Widget"), apiVersion: "example.com/v1"}

	tr := newTracker("widgets", func(string, string) {})
	finished := func(m *mark) bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return m.done
	}
	seeds := uint64(300)
	if testing.Short() {
		seeds = 30 // the unit tier: a tenth of the seeds, the same properties
	}
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(seed, 1))
		cs := newCommits(store)
		// Each object: created, updated a few times, maybe deleted.
		type step struct {
			c    *Change
			mark *mark
			pc   *commit
			done bool
		}
		type object struct {
			k     key
			uid   types.UID
			steps []*step
			next  int // the next step to start
		}
		objs := make([]*object, 1+rng.IntN(4))
		for i := range objs {
			o := &object{k: key{gr: widgets.GroupResource(), namespace: "ns", name: fmt.Sprintf("s%d-o%d", seed, i)}, uid: types.UID(fmt.Sprintf("s%d-u%d", seed, i))}
			var prev *Object
			n := 1 + rng.IntN(6)
			for v := range n {
				cur := &Object{ns: intern("ns"), name: o.k.name, resourceVersion: fmt.Sprint(v + 1), typ: typ}
				cur.setUID(o.uid)
				c := &Change{Type: change.Updated, Resource: res, Old: prev, New: cur}
				switch {
				case v == 0:
					c.Type = change.Created
				case v == n-1 && rng.IntN(2) == 0:
					c = &Change{Type: change.Deleted, Resource: res, Old: prev}
				}
				m := &mark{t: tr}
				c.mark = m
				o.steps = append(o.steps, &step{c: c, mark: m})
				prev = cur
			}
			objs[i] = o
		}
		// want is the state of o after its longest done prefix: the
		// resourceVersion stored, "" for none.
		want := func(o *object) string {
			rv := ""
			for _, s := range o.steps {
				if !s.done {
					break
				}
				rv = ""
				if s.c.Type != change.Deleted {
					rv = s.c.New.resourceVersion
				}
			}
			return rv
		}
		var started []*step // started, not finished
		for {
			var startable []*object
			for _, o := range objs {
				if o.next < len(o.steps) {
					startable = append(startable, o)
				}
			}
			if len(startable) == 0 && len(started) == 0 {
				break
			}
			if len(started) == 0 || len(startable) > 0 && rng.IntN(2) == 0 {
				o := startable[rng.IntN(len(startable))]
				s := o.steps[o.next]
				o.next++
				s.pc = cs.start(o.k, s.c)
				started = append(started, s)
				continue
			}
			i := rng.IntN(len(started))
			s := started[i]
			started = append(started[:i], started[i+1:]...)
			s.done = true
			var o *object
			for _, x := range objs {
				if x.k.name == s.c.Object().name {
					o = x
				}
			}
			cs.finish(o.k, s.pc)

			store.flush()
			stored, err := store.load(widgets.GroupResource(), res)
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range objs {
				got := ""
				if st := stored[x.uid]; st != nil {
					got = st.resourceVersion
				}
				if w := want(x); got != w {
					t.Fatalf("seed %d: after finishing %s %s rv %s, the Store holds %s at rv %q, want %q (the longest done prefix)",
						seed, s.c.Type, o.k, s.c.Object().resourceVersion, x.k, got, w)
				}
				for j, st := range x.steps {
					inPrefix := true
					for _, before := range x.steps[:j+1] {
						inPrefix = inPrefix && before.done
					}
					if finished := finished(st.mark); finished != inPrefix {
						t.Fatalf("seed %d: %s step %d: mark finished %v, want %v (in the done prefix)", seed, x.k, j, finished, inPrefix)
					}
				}
			}
		}
		if len(cs.m) != 0 {
			t.Fatalf("seed %d: commits keep %d keys after every change finished", seed, len(cs.m))
		}
	}
}
