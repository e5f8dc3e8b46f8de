package watcher

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// write is one change a test made: its type, the object's UID and the
// resourceVersion the write produced.
type write struct {
	typ  change.Type
	name string
	uid  types.UID
	rv   string
}

// writer creates, updates and deletes ConfigMaps until stopped, and
// records what it did.
type writer struct {
	mu     sync.Mutex
	writes []write
	live   map[string]types.UID // name -> uid
	final  map[types.UID]string // uid -> last resourceVersion (deleted: "")
}

// run writes one change every interval until ctx ends: it creates an
// object every third step, updates one the others, and deletes one every
// seventh.
func (wr *writer) run(t *testing.T, ctx context.Context, cms dynamic.ResourceInterface, ns, prefix string, interval time.Duration) {
	t.Helper()
	wr.live, wr.final = map[string]types.UID{}, map[types.UID]string{}
	var names []string
	for i := 0; ctx.Err() == nil; i++ {
		switch {
		case i%3 == 0 || len(names) < 3:
			name := fmt.Sprintf("%s-%03d", prefix, i)
			o, err := cms.Create(ctx, configMap(ns, name, map[string]any{"v": "0"}), metav1.CreateOptions{})
			if err != nil {
				continue
			}
			names = append(names, name)
			wr.record(write{change.Created, name, o.GetUID(), o.GetResourceVersion()})
		case i%7 == 0:
			name := names[0]
			names = names[1:]
			uid := wr.uid(name)
			var rv string
			err := cms.Delete(ctx, name, metav1.DeleteOptions{})
			if err != nil {
				continue
			}
			wr.record(write{change.Deleted, name, uid, rv})
		default:
			name := names[i%len(names)]
			patch := fmt.Appendf(nil, `{"data":{"v":%q}}`, strconv.Itoa(i))
			o, err := cms.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
			if err != nil {
				continue
			}
			wr.record(write{change.Updated, name, o.GetUID(), o.GetResourceVersion()})
		}
		select {
		case <-ctx.Done():
		case <-time.After(interval):
		}
	}
}

func (wr *writer) uid(name string) types.UID {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	return wr.live[name]
}

// count returns how many writes succeeded so far.
func (wr *writer) count() int {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	return len(wr.writes)
}

func (wr *writer) record(w write) {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	wr.writes = append(wr.writes, w)
	switch w.typ {
	case change.Deleted:
		delete(wr.live, w.name)
		wr.final[w.uid] = ""
	default:
		wr.live[w.name] = w.uid
		wr.final[w.uid] = w.rv
	}
}

// handled is what a handler saw of one change.
type handled struct {
	typ  change.Type
	uid  types.UID
	rv   string // New's, "" for a deletion
	from string // which watcher
}

// lost returns the writes no handled change covers: a creation or a
// deletion must be reported as such; an update by a change of the object
// to a resourceVersion at or above it, or by its deletion; and every
// object's final state must be reported.
func lost(t *testing.T, writes []write, final map[types.UID]string, seen []handled) []string {
	t.Helper()
	byUID := map[types.UID][]handled{}
	for _, h := range seen {
		byUID[h.uid] = append(byUID[h.uid], h)
	}
	above := func(uid types.UID, rv string) bool {
		for _, h := range byUID[uid] {
			if h.typ == change.Deleted {
				return true
			}
			if a, _ := strconv.ParseUint(h.rv, 10, 64); a > 0 {
				if b, _ := strconv.ParseUint(rv, 10, 64); a >= b {
					return true
				}
			}
		}
		return false
	}
	has := func(uid types.UID, typ change.Type, rv string) bool {
		for _, h := range byUID[uid] {
			if h.typ == typ && (rv == "" || h.rv == rv) {
				return true
			}
		}
		return false
	}
	var out []string
	for _, w := range writes {
		ok := true
		switch w.typ {
		case change.Created:
			ok = has(w.uid, change.Created, "")
		case change.Deleted:
			ok = has(w.uid, change.Deleted, "")
		case change.Updated:
			ok = above(w.uid, w.rv)
		}
		if !ok {
			out = append(out, fmt.Sprintf("%s %s %s", w.typ, w.name, w.rv))
		}
	}
	for uid, rv := range final {
		if rv != "" && !has(uid, change.Updated, rv) && !has(uid, change.Created, rv) {
			out = append(out, fmt.Sprintf("final state %s of %s", rv, uid))
		}
	}
	return out
}

// collector is a Handler that records what it handled, slowly when told.
type collector struct {
	name  string
	delay time.Duration
	mu    *sync.Mutex
	seen  *[]handled
}

func (c collector) Handle(ctx context.Context, ch *Change) error {
	if c.delay > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(c.delay):
		}
	}
	h := handled{typ: ch.Type, uid: ch.Object().GetUID(), from: c.name}
	if ch.New != nil {
		h.rv = ch.New.GetResourceVersion()
	}
	c.mu.Lock()
	*c.seen = append(*c.seen, h)
	c.mu.Unlock()
	return nil
}

// TestStandbyFollowsLeader runs a leader and a standby watcher, each with
// its own baseline, the standby following the leader's watermarks, while
// ConfigMaps are created, updated and deleted. The leader falls behind (a
// slow handler), then stops abruptly without draining; the standby takes
// over with the last watermarks it had. The leader stops within seconds
// although its drain timeout is a minute. Together they handle every change
// made, the standby only what the leader had not confirmed.
func TestStandbyFollowsLeader(t *testing.T) {
	env := testenv.Shared(t)
	ns := namespace(t, env)
	cms := env.Dynamic(t).Resource(configMaps).Namespace(ns)
	sels := []change.Selector{{Resource: "configmaps"}}
	inNS := func(change.Resource) []string { return []string{ns} }
	var mu sync.Mutex
	var seen []handled
	open := func(name string) *Store {
		s, err := OpenStore(filepath.Join(t.TempDir(), name+".db"), testLogger(t))
		mustf(t, err, "open store")
		t.Cleanup(func() { _ = s.Close() })
		return s
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Both watchers are in the election: the leader took over at once.
	leader, err := New(env.Config(), Config{Selectors: sels, Namespaces: inNS, Workers: 1, Store: open("leader"), DrainTimeout: time.Minute, Standby: true,
		Handler: collector{name: "leader", delay: 25 * time.Millisecond, mu: &mu, seen: &seen}, Logger: testLogger(t)})
	mustf(t, err, "leader")
	leader.TakeOver(nil, nil)
	leaderCtx, stopLeader := context.WithCancel(ctx)
	leaderDone := make(chan error, 1)
	go func() { leaderDone <- leader.Run(leaderCtx) }()
	testenv.Eventually(t, time.Minute, "the leader to sync", leader.Synced)

	wctx, stopWriter := context.WithCancel(ctx)
	wr := &writer{}
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		wr.run(t, wctx, cms, ns, "cm", 5*time.Millisecond)
	}()

	standby, _ := startWatcher(t, env.Config(), Config{Selectors: sels, Namespaces: inNS, Standby: true, Store: open("standby"),
		Handler: collector{name: "standby", mu: &mu, seen: &seen}})
	var last Watermarks
	follow := func() {
		last = leader.Watermarks()
		standby.Confirm(last, nil)
	}
	testenv.Eventually(t, time.Minute, "the standby to confirm the leader's changes", func() bool {
		follow()
		return testutil.ToFloat64(standby.baseline.confirmed) > 20
	})
	more := testutil.ToFloat64(standby.baseline.confirmed) + 20
	testenv.Eventually(t, time.Minute, "the standby to follow 20 more changes", func() bool {
		follow()
		return testutil.ToFloat64(standby.baseline.confirmed) >= more
	})
	// The leader stops at once, as one that lost its Lease.
	leader.Abandon()
	stopLeader()
	select {
	case err := <-leaderDone:
		mustf(t, err, "leader")
	case <-time.After(5 * time.Second):
		t.Fatal("the abandoned leader still runs 5s later: it drains instead of stopping")
	}
	mu.Lock()
	byLeader := len(seen)
	mu.Unlock()
	standby.TakeOver(last, nil)

	after := wr.count() + 50
	testenv.Eventually(t, time.Minute, "50 writes after the takeover", func() bool { return wr.count() >= after })
	stopWriter()
	<-writerDone
	testenv.Eventually(t, time.Minute, "the standby to handle everything", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(lost(t, wr.writes, wr.final, seen)) == 0
	})
	fired := takeovers(standby)
	mu.Lock()
	dupes := map[handled]int{}
	for _, h := range seen {
		dupes[handled{typ: h.typ, uid: h.uid, rv: h.rv}]++
	}
	repeated := 0
	for _, n := range dupes {
		repeated += n - 1
	}
	t.Logf("%d writes; %d handled by the leader, %d by the standby (%d at its takeover), %d repeated",
		len(wr.writes), byLeader, len(seen)-byLeader, int(fired), repeated)
	mu.Unlock()
	if fired == 0 {
		t.Error("the standby fired nothing at its takeover, although the leader had fallen behind")
	}
}

// TestStandbyCRDsAndReload: a CRD created while a replica stands by is
// followed like any resource (its objects confirmed by the leader's
// watermarks, not held), a rules reload on the standby restarts its
// informers without losing its place, and when a CRD is deleted while it
// stands by, the deletions of its objects are confirmed like any change,
// or, those its informer did not see as events, reported again when it
// takes over (the leader's watermark cannot vouch for them), and nothing
// else.
func TestStandbyCRDsAndReload(t *testing.T) {
	env := testenv.Shared(t)
	ns := namespace(t, env)
	ctx := context.Background()
	res := schema.GroupVersionResource{Group: "standby.example.org", Version: "v1", Resource: "doohickeys"}
	sels := []change.Selector{{Group: "standby.example.org"}}
	inNS := func(r change.Resource) []string { return []string{ns} }
	var mu sync.Mutex
	var seen []handled
	open := func(name string) *Store {
		s, err := OpenStore(filepath.Join(t.TempDir(), name+".db"), testLogger(t))
		mustf(t, err, "open store")
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	leader, err := New(env.Config(), Config{Selectors: sels, Namespaces: inNS, Store: open("leader"), Standby: true,
		RediscoveryInterval: time.Second, Handler: collector{name: "leader", mu: &mu, seen: &seen}, Logger: testLogger(t)})
	mustf(t, err, "leader")
	leader.TakeOver(nil, nil)
	leaderCtx, stopLeader := context.WithCancel(ctx)
	leaderDone := make(chan error, 1)
	go func() { leaderDone <- leader.Run(leaderCtx) }()
	testenv.Eventually(t, time.Minute, "the leader to sync", leader.Synced)
	standby, _ := startWatcher(t, env.Config(), Config{Selectors: sels, Namespaces: inNS, Standby: true, Store: open("standby"),
		RediscoveryInterval: time.Second, Handler: collector{name: "standby", mu: &mu, seen: &seen}})

	var lastMu sync.Mutex
	var last Watermarks
	followCtx, stopFollowing := context.WithCancel(ctx)
	following := make(chan struct{})
	go func() {
		defer close(following)
		// As a leader's Lease renewals do, every 100ms.
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			wm := leader.Watermarks()
			standby.Confirm(wm, nil)
			lastMu.Lock()
			last = wm
			lastMu.Unlock()
			select {
			case <-followCtx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	handledBy := func(who string, typ change.Type) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, h := range seen {
			if h.from == who && h.typ == typ {
				n++
			}
		}
		return n
	}
	caughtUp := func(what string) {
		t.Helper()
		testenv.Eventually(t, 30*time.Second, "the standby to confirm "+what, func() bool {
			return testutil.ToFloat64(standby.metrics.pendingKeys) == 0
		})
	}

	crd := simpleCRD(res, "Doohickey")
	mustf(t, env.InstallCRD(crd), "install CRD")
	client := env.Dynamic(t).Resource(res).Namespace(ns)
	var writes []write
	const n = 5
	for i := range n {
		o, err := client.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "standby.example.org/v1", "kind": "Doohickey",
			"metadata": map[string]any{"name": fmt.Sprintf("d%d", i), "namespace": ns},
			"spec":     map[string]any{"size": int64(0)},
		}}, metav1.CreateOptions{})
		mustf(t, err, "create")
		writes = append(writes, write{change.Created, o.GetName(), o.GetUID(), o.GetResourceVersion()})
	}
	update := func(size int) {
		t.Helper()
		for i := range n {
			o, err := client.Patch(ctx, fmt.Sprintf("d%d", i), types.MergePatchType, fmt.Appendf(nil, `{"spec":{"size":%d}}`, size), metav1.PatchOptions{})
			mustf(t, err, "update")
			writes = append(writes, write{change.Updated, o.GetName(), o.GetUID(), o.GetResourceVersion()})
		}
	}
	update(1)
	testenv.Eventually(t, 30*time.Second, "the leader to handle the new CRD's objects", func() bool {
		return handledBy("leader", change.Created) == n
	})
	caughtUp("the new CRD's objects")

	// A reload that changes what the standby keeps restarts its informer.
	spec := change.Projection{Paths: [][]string{{"spec"}}}
	standby.SetSelectors(sels, func(change.Resource) change.Projection { return spec }, inNS)
	testenv.Eventually(t, 30*time.Second, "the standby's informer to restart with the new projection", func() bool {
		standby.mu.Lock()
		defer standby.mu.Unlock()
		rw := standby.watches[watchKey{res, ns}]
		return rw != nil && rw.typ.projection.Equal(spec) && rw.hasSynced()
	})
	update(2)
	caughtUp("the changes after its reload")

	mustf(t, env.Clientset(t).Discovery().RESTClient().Delete().
		AbsPath("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd.Name).Do(ctx).Error(), "delete CRD")
	uids := map[string]types.UID{}
	for _, w := range writes {
		uids[w.name] = w.uid
	}
	for name, uid := range uids {
		writes = append(writes, write{change.Deleted, name, uid, ""})
	}
	testenv.Eventually(t, 30*time.Second, "the leader to report the objects deleted with their CRD", func() bool {
		return handledBy("leader", change.Deleted) == n
	})
	testenv.Eventually(t, 30*time.Second, "the standby to drop the CRD", func() bool {
		return testutil.ToFloat64(standby.metrics.resources) == 0
	})

	stopFollowing()
	<-following
	leader.Abandon()
	stopLeader()
	mustf(t, <-leaderDone, "leader")
	lastMu.Lock()
	standby.TakeOver(last, nil)
	lastMu.Unlock()
	testenv.Eventually(t, 30*time.Second, "the standby to take over", func() bool { return !standby.standby.Load() })
	mu.Lock()
	missing := lost(t, writes, nil, seen)
	mu.Unlock()
	if len(missing) > 0 {
		t.Errorf("lost: %v", missing)
	}
	// The deletions came as watch events (the apiserver deletes a CRD's
	// objects first), confirmed by the leader's watermark, or, when the
	// informer stopped before, from the cache: then they fire again.
	if got := takeovers(standby); got > n || got != testutil.ToFloat64(standby.baseline.takeover.WithLabelValues(string(change.Deleted))) {
		t.Errorf("the standby fired %v changes at its takeover, want at most the %d deletions", got, n)
	}
	testenv.Eventually(t, 30*time.Second, "what the standby fired to be handled", func() bool {
		return float64(handledBy("standby", change.Deleted)) == takeovers(standby)
	})
}
