package audit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/testenv"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// results collects callbacks in the order they ran.
type results struct {
	mu  sync.Mutex
	got []string
}

func (r *results) cb(label string) func(change.Attribution) {
	return func(a change.Attribution) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.got = append(r.got, fmt.Sprintf("%s:%s:%s", label, a.Match, a.Username()))
	}
}

func (r *results) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

func (r *results) waitFor(t *testing.T, n int) []string {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, fmt.Sprintf("%d callbacks", n), func() bool { return len(r.list()) >= n })
	return r.list()
}

func newTestAttributor(opts AttributorOptions) (*Index, *Attributor, *fakeClock) {
	clk := newFakeClock()
	m := NewMetrics(nil)
	ix := NewIndex(IndexOptions{Clock: clk, Metrics: m})
	opts.Clock, opts.Metrics = clk, m
	return ix, NewAttributor(ix, opts), clk
}

func TestAttributorFastPath(t *testing.T) {
	ix, a, clk := newTestAttributor(AttributorOptions{})
	defer a.Close()
	ix.Add(SourceWebhook, []Record{rec("e1", "alice", "patch", "a", 0)}, 0)
	var got change.Attribution
	called := false
	if err := a.Submit(context.Background(), chg(change.Updated, "a"), func(r change.Attribution) { got, called = r, true }); err != nil {
		t.Fatal(err)
	}
	if !called || got.Match != change.MatchWindow || got.Username() != "alice" {
		t.Fatalf("the callback did not run before Submit returned: called %v, %+v", called, got)
	}
	if clk.pending() != 0 {
		t.Errorf("the fast path armed %d timers", clk.pending())
	}
	if len(a.objects) != 0 {
		t.Errorf("the fast path left %d object queues", len(a.objects))
	}
}

func TestAttributorWaitsThenTimesOut(t *testing.T) {
	ix, a, clk := newTestAttributor(AttributorOptions{Wait: 2 * time.Second})
	defer a.Close()
	var r results
	ctx := context.Background()
	mustSubmit(t, a, ctx, chg(change.Updated, "a"), r.cb("a1"))
	mustSubmit(t, a, ctx, chg(change.Updated, "b"), r.cb("b1"))
	if got := r.list(); len(got) != 0 {
		t.Fatalf("called before any event: %v", got)
	}
	// b's event arrives: b resolves, a keeps waiting.
	ix.Add(SourceWebhook, []Record{rec("e1", "bob", "patch", "b", 0)}, 0)
	if got := r.waitFor(t, 1); got[0] != "b1:window:bob" {
		t.Fatalf("got %v", got)
	}
	clk.Step(1999 * time.Millisecond)
	if got := r.list(); len(got) != 1 {
		t.Fatalf("a resolved before its bound: %v", got)
	}
	clk.Step(time.Millisecond)
	if got := r.waitFor(t, 2); got[1] != "a1:none:" {
		t.Fatalf("got %v", got)
	}
	if v := testutil.ToFloat64(a.m.unmatched); v != 1 {
		t.Errorf("unmatched_total %v, want 1", v)
	}
	if v := testutil.ToFloat64(a.m.waiting); v != 0 {
		t.Errorf("waiting_changes %v, want 0", v)
	}
}

// TestAttributorOrderPerObject: a change whose event is held waits behind
// an earlier change of its object; other objects go on.
func TestAttributorOrderPerObject(t *testing.T) {
	ix, a, clk := newTestAttributor(AttributorOptions{Wait: 2 * time.Second})
	defer a.Close()
	var r results
	ctx := context.Background()
	exact := func(id, user, rv string) Record {
		x := rec(id, user, "patch", "a", 0)
		x.ResponseUID, x.ResponseResourceVersion = "uid-a", rv
		return x
	}
	c1, c2, c3 := chg(change.Updated, "a"), chg(change.Updated, "a"), chg(change.Updated, "a")
	c1.ResourceVersion, c2.ResourceVersion, c3.ResourceVersion = "11", "12", "13"
	ix.Add(SourceWebhook, []Record{exact("e2", "bob", "12")}, 0)
	mustSubmit(t, a, ctx, c1, r.cb("a11"))
	mustSubmit(t, a, ctx, c2, r.cb("a12"))
	clk.Step(time.Second)
	mustSubmit(t, a, ctx, c3, r.cb("a13"))
	ix.Add(SourceWebhook, []Record{rec("x", "carol", "patch", "other", 0)}, 0)
	mustSubmit(t, a, ctx, chg(change.Updated, "other"), r.cb("other"))
	if got := r.list(); len(got) != 1 || got[0] != "other:window:carol" {
		t.Fatalf("got %v, want only other's (a's first change waits)", got)
	}
	ix.Add(SourceWebhook, []Record{exact("e3", "carol", "13")}, 0)
	clk.Step(time.Second) // a11's bound
	got := r.waitFor(t, 4)
	want := []string{"other:window:carol", "a11:none:", "a12:exact:bob", "a13:exact:carol"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestAttributorLateEventResolvesInOrder: the event of the first change
// arrives after the second's: both resolve when the first's does.
func TestAttributorLateEventResolvesInOrder(t *testing.T) {
	ix, a, clk := newTestAttributor(AttributorOptions{})
	defer a.Close()
	var r results
	ctx := context.Background()
	c1, c2 := chg(change.Created, "a"), chg(change.Updated, "a")
	c2.Time = t0.Add(100 * time.Millisecond)
	mustSubmit(t, a, ctx, c1, r.cb("created"))
	clk.Step(100 * time.Millisecond)
	mustSubmit(t, a, ctx, c2, r.cb("updated"))
	clk.Step(50 * time.Millisecond) // the events come after both changes
	ix.Add(SourceWebhook, []Record{rec("e2", "bob", "patch", "a", 120*time.Millisecond)}, 0)
	if got := r.list(); len(got) != 0 {
		t.Fatalf("got %v before the creation's event", got)
	}
	ix.Add(SourceWebhook, []Record{rec("e1", "alice", "create", "a", 0)}, 0)
	got := r.waitFor(t, 2)
	if fmt.Sprint(got) != "[created:window:alice updated:window:bob]" {
		t.Errorf("got %v", got)
	}
}

// TestAttributorEarlyEventWaits: an event posted ahead of a change (alice
// named for bob's patch) does not decide it when it is submitted: the
// change waits, and the apiserver's event, when it comes, makes it
// ambiguous; alone, an early event decides at the bound.
func TestAttributorEarlyEventWaits(t *testing.T) {
	ix, a, clk := newTestAttributor(AttributorOptions{Wait: 2 * time.Second})
	defer a.Close()
	var r results
	ctx := context.Background()
	ix.Add(SourceWebhook, []Record{rec("forged", "alice", "patch", "a", 0), rec("early", "carol", "patch", "b", 0)}, 0)
	clk.Step(10 * time.Millisecond)
	ca, cb := chg(change.Updated, "a"), chg(change.Updated, "b")
	ca.Time, cb.Time = clk.Now(), clk.Now()
	mustSubmit(t, a, ctx, ca, r.cb("a"))
	mustSubmit(t, a, ctx, cb, r.cb("b"))
	if got := r.list(); len(got) != 0 {
		t.Fatalf("decided on events held before the changes: %v", got)
	}
	clk.Step(300 * time.Millisecond)
	ix.Add(SourceWebhook, []Record{rec("real", "bob", "patch", "a", 20*time.Millisecond)}, 0)
	if got := r.waitFor(t, 1); got[0] != "a:ambiguous:" {
		t.Fatalf("got %v, want a ambiguous as soon as bob's event came", got)
	}
	clk.Step(1699 * time.Millisecond)
	if got := r.list(); len(got) != 1 {
		t.Fatalf("b decided before its bound: %v", got)
	}
	clk.Step(time.Millisecond)
	if got := r.waitFor(t, 2); got[1] != "b:window:carol" {
		t.Fatalf("got %v, want b a window match of carol's at its bound", got)
	}
}

// TestAttributorGenerateNameWakes: an event that names no object (a create
// with generateName) resolves the waiting creation it fits.
func TestAttributorGenerateNameWakes(t *testing.T) {
	ix, a, _ := newTestAttributor(AttributorOptions{})
	defer a.Close()
	var r results
	mustSubmit(t, a, context.Background(), chg(change.Created, "gen-abc"), r.cb("gen"))
	x := rec("e1", "alice", "create", "", 0)
	x.GenerateName = "gen-"
	ix.Add(SourceWebhook, []Record{x}, 0)
	if got := r.waitFor(t, 1); got[0] != "gen:window:alice" {
		t.Errorf("got %v", got)
	}
}

func TestAttributorBackPressure(t *testing.T) {
	ix, a, _ := newTestAttributor(AttributorOptions{MaxWaiting: 2})
	defer a.Close()
	var r results
	ctx := context.Background()
	mustSubmit(t, a, ctx, chg(change.Updated, "a"), r.cb("a"))
	mustSubmit(t, a, ctx, chg(change.Updated, "b"), r.cb("b"))
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := a.Submit(short, chg(change.Updated, "c"), r.cb("c")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Submit with %d waiting: %v, want a deadline error", 2, err)
	}
	// A change whose event is held needs no slot.
	ix.Add(SourceWebhook, []Record{rec("e", "erin", "patch", "e", 0)}, 0)
	if err := a.Submit(short, chg(change.Updated, "e"), r.cb("e")); err != nil {
		t.Fatalf("fast path while full: %v", err)
	}
	done := make(chan error)
	go func() { done <- a.Submit(ctx, chg(change.Updated, "d"), r.cb("d")) }()
	select {
	case err := <-done:
		t.Fatalf("Submit returned %v while full", err)
	case <-time.After(50 * time.Millisecond):
	}
	ix.Add(SourceWebhook, []Record{rec("e1", "alice", "patch", "a", 0)}, 0)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	a.Close()
	got := r.list()
	slices.Sort(got)
	if fmt.Sprint(got) != "[a:window:alice b:none: d:none: e:window:erin]" {
		t.Errorf("got %v: every submitted change once, none lost", got)
	}
	if err := a.Submit(ctx, chg(change.Updated, "x"), r.cb("x")); !errors.Is(err, ErrClosed) {
		t.Errorf("Submit after Close: %v", err)
	}
}

// TestAttributorConcurrent: writers on many objects, events arriving
// concurrently and late: every callback once, in order per object, with
// the right user, and none after waiting for its bound: the fake clock
// never moves, so a change that waited for it would never be called back.
func TestAttributorConcurrent(t *testing.T) {
	ix, a, clk := newTestAttributor(AttributorOptions{Wait: 5 * time.Second, MaxWaiting: 64})
	const objects, perObject = 40, 25
	var mu sync.Mutex
	seen := map[string][]int{}
	wrong := 0
	var wg, adds sync.WaitGroup
	for o := range objects {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprint("obj", o)
			user := fmt.Sprint("user", o%7)
			for i := range perObject {
				now := clk.Now()
				c := Change{Resource: "configmaps", Namespace: "ns", Name: name, UID: name, ResourceVersion: fmt.Sprint(i), Type: change.Updated, Time: now}
				r := Record{AuditID: fmt.Sprint(name, "/", i), Verb: "patch", Resource: "configmaps", Namespace: "ns", Name: name, Code: 200,
					Received: now, Completed: now, User: change.UserInfo{Username: user}, ResponseUID: name, ResponseResourceVersion: fmt.Sprint(i)}
				early := rand.IntN(2) == 0
				if early {
					ix.Add(SourceWebhook, []Record{r}, 0)
				}
				err := a.Submit(context.Background(), c, func(at change.Attribution) {
					mu.Lock()
					defer mu.Unlock()
					seen[name] = append(seen[name], i)
					if at.Match != change.MatchExact || at.Username() != user {
						wrong++
					}
				})
				if err != nil {
					t.Error(err)
					return
				}
				if !early {
					adds.Add(1)
					go func() {
						defer adds.Done()
						ix.Add(SourceWebhook, []Record{r}, 0)
					}()
				}
			}
		}()
	}
	wg.Wait()
	adds.Wait()
	testenv.Eventually(t, 30*time.Second, "every callback, none after its bound", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, v := range seen {
			n += len(v)
		}
		return n == objects*perObject
	})
	a.Close()
	if wrong != 0 {
		t.Errorf("%d wrong attributions", wrong)
	}
	for o := range objects {
		name := fmt.Sprint("obj", o)
		got := seen[name]
		if len(got) != perObject {
			t.Errorf("%s: %d callbacks, want %d", name, len(got), perObject)
			continue
		}
		for i, v := range got {
			if v != i {
				t.Errorf("%s: callbacks in order %v", name, got)
				break
			}
		}
	}
}

func TestAttributorRejectsIncompleteChanges(t *testing.T) {
	_, a, _ := newTestAttributor(AttributorOptions{})
	defer a.Close()
	for _, c := range []Change{{Resource: "configmaps", Name: "a"}, {Type: change.Updated, Name: "a"}, {Type: change.Deleted, Resource: "configmaps"}} {
		if err := a.Submit(context.Background(), c, func(change.Attribution) { t.Error("called") }); err == nil || !strings.Contains(err.Error(), "cannot be attributed") {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

func mustSubmit(t *testing.T, a *Attributor, ctx context.Context, c Change, cb func(change.Attribution)) {
	t.Helper()
	if err := a.Submit(ctx, c, cb); err != nil {
		t.Fatal(err)
	}
}

// TestAttributorListed: a change learned from a list never waits for its
// event: alone it is matched with what is held (or none) at once; behind
// a waiting change of its object it resolves as soon as that one does, in
// order.
func TestAttributorListed(t *testing.T) {
	ix, a, clk := newTestAttributor(AttributorOptions{Wait: 2 * time.Second})
	defer a.Close()
	ctx := context.Background()
	var r results

	listed := func(kind change.Type, name string) Change {
		c := chg(kind, name)
		c.Listed = true
		return c
	}
	// Nothing held: none, before Submit returns, and no timer.
	mustSubmit(t, a, ctx, listed(change.Deleted, "gone"), r.cb("gone"))
	if got := r.list(); len(got) != 1 || got[0] != "gone:none:" {
		t.Fatalf("got %v", got)
	}
	// Held: matched (a delete's Status names the uid: exact).
	del := rec("e1", "alice", "delete", "held", 0)
	del.ResponseUID = "uid-held"
	ix.Add(SourceWebhook, []Record{del}, 0)
	mustSubmit(t, a, ctx, listed(change.Deleted, "held"), r.cb("held"))
	if got := r.list(); len(got) != 2 || got[1] != "held:exact:alice" {
		t.Fatalf("got %v", got)
	}
	if clk.pending() != 0 {
		t.Errorf("Listed changes armed %d timers", clk.pending())
	}

	// Behind a waiting update of the same object: resolves right after it.
	mustSubmit(t, a, ctx, chg(change.Updated, "busy"), r.cb("busy-update"))
	mustSubmit(t, a, ctx, listed(change.Deleted, "busy"), r.cb("busy-delete"))
	if got := r.list(); len(got) != 2 {
		t.Fatalf("the listed deletion overtook the waiting update: %v", got)
	}
	ix.Add(SourceWebhook, []Record{rec("e2", "bob", "patch", "busy", 0)}, 0)
	got := r.waitFor(t, 4)
	if got[2] != "busy-update:window:bob" || got[3] != "busy-delete:none:" {
		t.Fatalf("got %v", got)
	}
}

// TestAttributorDrain: Drain returns once the waiting changes have had
// their events or their bounds, and at once when nothing waits.
func TestAttributorDrain(t *testing.T) {
	ix, a, clk := newTestAttributor(AttributorOptions{Wait: 2 * time.Second})
	defer a.Close()
	ctx := context.Background()
	a.Drain(ctx, time.Millisecond) // nothing waits
	var r results
	mustSubmit(t, a, ctx, chg(change.Updated, "a"), r.cb("a"))
	mustSubmit(t, a, ctx, chg(change.Updated, "b"), r.cb("b"))
	drained := make(chan struct{})
	go func() {
		a.Drain(ctx, time.Millisecond)
		close(drained)
	}()
	ix.Add(SourceWebhook, []Record{rec("e1", "alice", "patch", "a", 0)}, 0)
	r.waitFor(t, 1)
	select {
	case <-drained:
		t.Fatal("Drain returned while b waits")
	default:
	}
	clk.Step(2 * time.Second)
	select {
	case <-drained:
	case <-time.After(5 * time.Second):
		t.Fatal("Drain did not return after the bound")
	}
	if got := r.waitFor(t, 2); got[1] != "b:none:" {
		t.Errorf("got %v", got)
	}
	// A context that ends stops it.
	mustSubmit(t, a, ctx, chg(change.Updated, "c"), r.cb("c"))
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	a.Drain(cctx, time.Millisecond)
}
