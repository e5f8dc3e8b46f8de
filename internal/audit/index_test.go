package audit

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fieldwatch/fieldwatch/change"
)

// fakeClock is a Clock whose time moves only when Step is called; Step
// runs the due AfterFunc callbacks on the caller's goroutine.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	c      *fakeClock
	at     time.Time
	f      func()
	active bool
}

var t0 = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

func newFakeClock() *fakeClock { return &fakeClock{now: t0} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, at: c.now.Add(d), f: f, active: true}
	c.timers = append(c.timers, t)
	return t
}

// pending is the number of timers that have not fired.
func (c *fakeClock) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if t.active {
			n++
		}
	}
	return n
}

func (c *fakeClock) Step(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []func()
	for _, t := range c.timers {
		if t.active && !t.at.After(c.now) {
			t.active = false
			due = append(due, t.f)
		}
	}
	c.mu.Unlock()
	for _, f := range due {
		f()
	}
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.active
	t.active = false
	return was
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.active
	t.at, t.active = t.c.now.Add(d), true
	return was
}

// rec builds a successful Metadata-level write to configmap ns/name.
func rec(id, user, verb, name string, completed time.Duration) Record {
	return Record{
		AuditID: id, Level: "Metadata", Verb: verb, Version: "v1", Resource: "configmaps",
		Namespace: "ns", Name: name, Code: 200,
		Received: t0.Add(completed - 10*time.Millisecond), Completed: t0.Add(completed),
		User: change.UserInfo{Username: user, Groups: []string{"system:authenticated"}}, UserAgent: "kubectl/" + user,
		SourceIPs: []string{"10.0.0.1"},
	}
}

func chg(kind change.Type, name string) Change {
	return Change{Resource: "configmaps", Namespace: "ns", Name: name, UID: "uid-" + name, ResourceVersion: "10", Type: kind, Time: t0}
}

// with applies edits to a copy of r.
func with(r Record, edits ...func(*Record)) Record {
	for _, e := range edits {
		e(&r)
	}
	return r
}

func TestMatch(t *testing.T) {
	rr := func(uid, rv string) func(*Record) {
		return func(r *Record) { r.Level, r.ResponseUID, r.ResponseResourceVersion = "RequestResponse", uid, rv }
	}
	sub := func(s string) func(*Record) { return func(r *Record) { r.Subresource = s } }
	code := func(c int32) func(*Record) { return func(r *Record) { r.Code = c } }
	as := func(u string) func(*Record) {
		return func(r *Record) { r.ImpersonatedUser = &change.UserInfo{Username: u} }
	}
	genName := func(prefix string) func(*Record) {
		return func(r *Record) { r.Name, r.GenerateName = "", prefix }
	}
	received := func(d time.Duration) func(*Record) { return func(r *Record) { r.Received = t0.Add(d) } }
	refUID := func(u string) func(*Record) { return func(r *Record) { r.RefUID = u } }
	edit := func(c Change, f func(*Change)) Change { f(&c); return c }

	for _, tc := range []struct {
		name    string
		recs    []Record
		changes []Change
		// want is, per change, "match user auditID" or "ambiguous a,b" or
		// "undecided"; "final " before it when only the final match (when
		// the wait is over) decides.
		want []string
	}{
		{"exact", []Record{with(rec("e1", "alice", "patch", "a", 0), rr("uid-a", "10"))},
			[]Change{chg(change.Updated, "a")}, []string{"exact alice e1"}},
		{"exact despite the window", []Record{with(rec("e1", "alice", "patch", "a", -time.Minute), rr("uid-a", "10"))},
			[]Change{chg(change.Updated, "a")}, []string{"exact alice e1"}},
		{"another version is no candidate", []Record{with(rec("e1", "alice", "patch", "a", 0), rr("uid-a", "9"))},
			[]Change{chg(change.Updated, "a")}, []string{"undecided"}},
		{"exact wins over window", []Record{rec("e0", "bob", "patch", "a", 0), with(rec("e1", "alice", "patch", "a", 0), rr("uid-a", "10"))},
			[]Change{chg(change.Updated, "a")}, []string{"exact alice e1"}},
		{"window", []Record{rec("e1", "alice", "patch", "a", 100*time.Millisecond)},
			[]Change{chg(change.Updated, "a")}, []string{"window alice e1"}},
		{"completed before the window", []Record{rec("e1", "alice", "patch", "a", -3*time.Second)},
			[]Change{chg(change.Updated, "a")}, []string{"undecided"}},
		{"completed after the window", []Record{rec("e1", "alice", "patch", "a", 3*time.Second)},
			[]Change{chg(change.Updated, "a")}, []string{"undecided"}},
		{"received after the change was seen", []Record{with(rec("e1", "alice", "patch", "a", 1500*time.Millisecond), received(1200*time.Millisecond))},
			[]Change{chg(change.Updated, "a")}, []string{"undecided"}},
		{"received within the skew", []Record{with(rec("e1", "alice", "patch", "a", 900*time.Millisecond), received(800*time.Millisecond))},
			[]Change{chg(change.Updated, "a")}, []string{"window alice e1"}},
		{"two users", []Record{rec("e1", "alice", "patch", "a", 0), rec("e2", "bob", "update", "a", 10*time.Millisecond)},
			[]Change{chg(change.Updated, "a"), chg(change.Updated, "a")}, []string{"ambiguous alice,bob", "ambiguous alice,bob"}},
		{"two impersonated users", []Record{with(rec("e1", "admin", "patch", "a", 0), as("alice")), with(rec("e2", "admin", "patch", "a", 0), as("bob"))},
			[]Change{chg(change.Updated, "a")}, []string{"ambiguous alice,bob"}},
		{"one user twice: the user, no auditID", []Record{rec("e1", "alice", "patch", "a", 0), rec("e2", "alice", "patch", "a", 10*time.Millisecond)},
			[]Change{chg(change.Updated, "a"), chg(change.Updated, "a"), chg(change.Updated, "a")}, []string{"window alice -", "window alice -", "undecided"}},
		{"consumed in turn", []Record{rec("e1", "alice", "patch", "a", 0)},
			[]Change{chg(change.Updated, "a"), chg(change.Updated, "a")}, []string{"window alice e1", "undecided"}},
		{"failure is no candidate", []Record{with(rec("e1", "alice", "patch", "a", 0), code(409))},
			[]Change{chg(change.Updated, "a")}, []string{"undecided"}},
		{"create does not fit an update", []Record{rec("e1", "alice", "create", "a", 0)},
			[]Change{chg(change.Updated, "a")}, []string{"undecided"}},
		{"create fits a creation", []Record{rec("e1", "alice", "create", "a", 0)},
			[]Change{chg(change.Created, "a")}, []string{"window alice e1"}},
		{"server-side apply creates", []Record{rec("e1", "alice", "patch", "a", 0)},
			[]Change{chg(change.Created, "a")}, []string{"final window alice e1"}},
		{"a create is preferred to a patch", []Record{rec("e1", "bob", "patch", "a", 10*time.Millisecond), rec("e2", "alice", "create", "a", 0)},
			[]Change{chg(change.Created, "a"), chg(change.Updated, "a")}, []string{"window alice e2", "window bob e1"}},
		{"other object", []Record{rec("e1", "alice", "patch", "b", 0)},
			[]Change{chg(change.Updated, "a")}, []string{"undecided"}},
		{"generateName", []Record{with(rec("e1", "alice", "create", "", 0), genName("gen-"))},
			[]Change{chg(change.Created, "gen-x1")}, []string{"window alice e1"}},
		{"generateName unknown at Metadata level", []Record{with(rec("e1", "alice", "create", "", 0), genName(""))},
			[]Change{chg(change.Created, "gen-x1")}, []string{"window alice e1"}},
		{"generateName of another prefix", []Record{with(rec("e1", "alice", "create", "", 0), genName("other-"))},
			[]Change{chg(change.Created, "gen-x1")}, []string{"undecided"}},
		{"generateName creates of two users", []Record{with(rec("e1", "alice", "create", "", 0), genName("")), with(rec("e2", "bob", "create", "", 0), genName(""))},
			[]Change{chg(change.Created, "gen-x1")}, []string{"ambiguous alice,bob"}},
		{"delete", []Record{rec("e1", "alice", "delete", "a", 0)},
			[]Change{chg(change.Deleted, "a")}, []string{"window alice e1"}},
		{"delete status names the uid", []Record{with(rec("e1", "alice", "delete", "a", -time.Minute), rr("uid-a", ""))},
			[]Change{chg(change.Deleted, "a")}, []string{"exact alice e1"}},
		{"delete status of another uid", []Record{with(rec("e1", "alice", "delete", "a", 0), rr("uid-old", ""))},
			[]Change{chg(change.Deleted, "a")}, []string{"undecided"}},
		{"deletecollection stands for several deletions", []Record{rec("e1", "alice", "deletecollection", "", 0)},
			[]Change{chg(change.Deleted, "a"), chg(change.Deleted, "b")}, []string{"window alice e1", "window alice e1"}},
		{"delete of an object with finalizers", []Record{rec("e1", "alice", "delete", "a", 0), rec("e2", "controller", "patch", "a", 50*time.Millisecond)},
			[]Change{edit(chg(change.Updated, "a"), func(c *Change) { c.DeletionStarted = true }), edit(chg(change.Deleted, "a"), func(c *Change) { c.WasTerminating = true })},
			[]string{"window alice e1", "final window controller e2"}},
		{"a delete is preferred to a finalizer removal", []Record{rec("e1", "kubelet", "delete", "a", 0), rec("e2", "controller", "patch", "a", 0)},
			[]Change{edit(chg(change.Deleted, "a"), func(c *Change) { c.WasTerminating = true })}, []string{"window kubelet e1"}},
		{"a patch does not delete a live object", []Record{rec("e1", "alice", "patch", "a", 0)},
			[]Change{chg(change.Deleted, "a")}, []string{"undecided"}},
		{"eviction", []Record{with(rec("e1", "alice", "create", "a", 0), sub("eviction"))},
			[]Change{chg(change.Deleted, "a")}, []string{"window alice e1"}},
		{"status write, change through status", []Record{with(rec("e1", "alice", "update", "a", 0), sub("status"))},
			[]Change{edit(chg(change.Updated, "a"), func(c *Change) { c.Subresource, c.SubresourceKnown = "status", true })}, []string{"window alice e1"}},
		{"status write, change through the main resource", []Record{with(rec("e1", "alice", "update", "a", 0), sub("status"))},
			[]Change{edit(chg(change.Updated, "a"), func(c *Change) { c.SubresourceKnown = true })}, []string{"undecided"}},
		{"status write, subresource unknown", []Record{with(rec("e1", "alice", "update", "a", 0), sub("status"))},
			[]Change{chg(change.Updated, "a")}, []string{"window alice e1"}},
		{"update of another version", []Record{with(rec("e1", "bob", "update", "a", 0), func(r *Record) { r.RefResourceVersion = "8" }), with(rec("e2", "alice", "update", "a", 0), func(r *Record) { r.RefResourceVersion = "9" })},
			[]Change{edit(chg(change.Updated, "a"), func(c *Change) { c.OldResourceVersion = "9" })}, []string{"window alice e2"}},
		{"update of another incarnation", []Record{with(rec("e1", "alice", "update", "a", 0), refUID("uid-old"))},
			[]Change{chg(change.Updated, "a")}, []string{"undecided"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			ix := NewIndex(IndexOptions{Clock: clk})
			ix.Add(SourceWebhook, slices.Clone(tc.recs), 0)
			for i, c := range tc.changes {
				a, ok := ix.match(&c, false)
				prefix := ""
				if !ok {
					a, ok = ix.match(&c, true)
					prefix = "final "
				}
				got := "undecided"
				switch {
				case ok && a.Match == change.MatchAmbiguous:
					got = fmt.Sprintf("%sambiguous %s", prefix, joinComma(a.Candidates))
					if a.User != nil || a.AuditID != "" {
						t.Errorf("ambiguous names a user: %+v", a)
					}
				case ok:
					id := a.AuditID
					if id == "" {
						id = "-"
					}
					got = fmt.Sprintf("%s%s %s %s", prefix, a.Match, a.Username(), id)
				}
				if got != tc.want[i] {
					t.Errorf("change %d: %s, want %s", i, got, tc.want[i])
				}
			}
		})
	}
}

// TestMatchEarlyEvents: events that were held before the change was
// observed decide it only at the bound (final), unless one that arrives
// after it joins them: another identity's makes the change ambiguous, an
// exact one wins. An event posted ahead of the apiserver's never outweighs
// the apiserver's.
func TestMatchEarlyEvents(t *testing.T) {
	exact := func(r Record) Record {
		r.Level, r.ResponseUID, r.ResponseResourceVersion = "RequestResponse", "uid-a", "10"
		return r
	}
	for _, tc := range []struct {
		name        string
		early, late []Record
		// before is the result of a match before the late events came,
		// final the one at the bound; after the one once they came.
		before, final, after string
	}{
		{"early alone: at the bound", []Record{rec("f", "alice", "patch", "a", 0)}, nil,
			"undecided", "window alice f", ""},
		{"a later one of another user: ambiguous", []Record{rec("f", "alice", "patch", "a", 0)}, []Record{rec("e", "bob", "patch", "a", 20*time.Millisecond)},
			"undecided", "", "ambiguous alice,bob"},
		{"a later exact one wins", []Record{rec("f", "alice", "patch", "a", 0)}, []Record{exact(rec("e", "bob", "patch", "a", 20*time.Millisecond))},
			"undecided", "", "exact bob e"},
		{"a later one of the same user", []Record{rec("f", "alice", "patch", "a", 0)}, []Record{rec("e", "alice", "patch", "a", 20*time.Millisecond)},
			"undecided", "", "window alice -"},
		{"two early users: ambiguous at the bound", []Record{rec("f", "alice", "patch", "a", 0), rec("g", "bob", "patch", "a", 0)}, nil,
			"undecided", "ambiguous alice,bob", ""},
		{"an early exact one decides at once", []Record{exact(rec("e", "alice", "patch", "a", 0))}, nil,
			"exact alice e", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			ix := NewIndex(IndexOptions{Clock: clk})
			ix.Add(SourceWebhook, slices.Clone(tc.early), 0)
			c := chg(change.Updated, "a")
			c.Time = t0.Add(10 * time.Millisecond)
			clk.Step(10 * time.Millisecond)
			describe := func(final bool) string {
				a, ok := ix.match(&c, final)
				switch {
				case !ok:
					return "undecided"
				case a.Match == change.MatchAmbiguous:
					return "ambiguous " + joinComma(a.Candidates)
				case a.AuditID == "":
					return fmt.Sprintf("%s %s -", a.Match, a.Username())
				}
				return fmt.Sprintf("%s %s %s", a.Match, a.Username(), a.AuditID)
			}
			if got := describe(false); got != tc.before {
				t.Fatalf("before the later events: %s, want %s", got, tc.before)
			}
			if tc.final != "" {
				if got := describe(true); got != tc.final {
					t.Errorf("at the bound: %s, want %s", got, tc.final)
				}
				return
			}
			if tc.after == "" {
				return
			}
			clk.Step(100 * time.Millisecond)
			ix.Add(SourceWebhook, slices.Clone(tc.late), 0)
			if got := describe(false); got != tc.after {
				t.Errorf("once the later events came: %s, want %s", got, tc.after)
			}
		})
	}
}

func joinComma(ss []string) string {
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += ","
		}
		out += s
	}
	return out
}

// TestMatchFields checks the fields of a window match: the request's, and
// which ones are left out when several requests of one identity fit.
func TestMatchFields(t *testing.T) {
	ix := NewIndex(IndexOptions{Clock: newFakeClock()})
	r := rec("e1", "admin", "patch", "a", 0)
	r.ImpersonatedUser = &change.UserInfo{Username: "alice", Groups: []string{"devs"}}
	ix.Add(SourceLog, []Record{r}, 0)
	c := chg(change.Updated, "a")
	a, ok := ix.match(&c, false)
	if !ok || a.Match != change.MatchWindow || a.User.Username != "admin" || a.ImpersonatedUser.Username != "alice" ||
		a.Verb != "patch" || a.UserAgent != "kubectl/admin" || !slices.Equal(a.SourceIPs, []string{"10.0.0.1"}) || a.AuditID != "e1" {
		t.Errorf("window match %+v", a)
	}

	r2 := rec("e2", "alice", "patch", "b", 0)
	r3 := rec("e3", "alice", "update", "b", 0)
	r3.UserAgent = "other"
	ix.Add(SourceLog, []Record{r2, r3}, 0)
	c = chg(change.Updated, "b")
	a, _ = ix.match(&c, false)
	if a.Match != change.MatchWindow || a.Username() != "alice" || a.AuditID != "" || a.Verb != "" || a.UserAgent != "" ||
		!slices.Equal(a.SourceIPs, []string{"10.0.0.1"}) {
		t.Errorf("one identity, two requests: %+v", a)
	}
}

func TestIndexBounds(t *testing.T) {
	clk := newFakeClock()
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	ix := NewIndex(IndexOptions{Clock: clk, Metrics: m, MaxEvents: 3, MaxAge: 10 * time.Second,
		Keep: func(group, resource string) bool { return resource == "configmaps" }})

	var recs []Record
	for i := range 5 {
		recs = append(recs, rec(fmt.Sprint("e", i), "alice", "patch", fmt.Sprint("o", i), 0))
	}
	ix.Add(SourceWebhook, recs, 7)
	if ix.Len() != 3 {
		t.Errorf("held %d, want 3", ix.Len())
	}
	if got := testutil.ToFloat64(m.evictedCount); got != 2 {
		t.Errorf("count evictions %v, want 2", got)
	}
	for i, want := range []bool{false, false, true, true, true} {
		c := chg(change.Updated, fmt.Sprint("o", i))
		if _, ok := ix.match(&c, false); ok != want {
			t.Errorf("o%d matched %v, want %v (the oldest are evicted)", i, ok, want)
		}
	}

	// duplicates, failures and filtered resources are counted, not held
	other := rec("x", "alice", "patch", "w", 0)
	other.Resource = "widgets"
	failed := rec("f", "alice", "patch", "o9", 0)
	failed.Code = 422
	ix.Add(SourceWebhook, []Record{rec("d", "alice", "patch", "o8", 0), rec("d", "alice", "patch", "o8", 0), other, failed}, 0)
	if ix.Len() != 1 {
		t.Errorf("held %d, want 1", ix.Len())
	}
	for result, want := range map[string]float64{"indexed": 6, "ignored": 7, "duplicate": 1, "filtered": 1, "failed": 1} {
		if got := testutil.ToFloat64(m.events.WithLabelValues(SourceWebhook, result)); got != want {
			t.Errorf("events_total{result=%s} = %v, want %v", result, got, want)
		}
	}

	// a consumed event is not held again when redelivered
	ix.Add(SourceWebhook, []Record{rec("e4", "alice", "patch", "o4", 0)}, 0)
	c := chg(change.Updated, "o4")
	if _, ok := ix.match(&c, false); ok {
		t.Error("a consumed event was held again when its auditID came back")
	}

	// age
	clk.Step(11 * time.Second)
	ix.expire()
	if ix.Len() != 0 || testutil.ToFloat64(m.evictedAge) != 1 || testutil.ToFloat64(m.held) != 0 {
		t.Errorf("after MaxAge: held %d, age evictions %v, gauge %v", ix.Len(), testutil.ToFloat64(m.evictedAge), testutil.ToFloat64(m.held))
	}
	if len(ix.byID) != 0 || len(ix.byKey) != 0 || len(ix.fifo)-ix.head != 0 {
		t.Errorf("after MaxAge: byID %d byKey %d fifo %d", len(ix.byID), len(ix.byKey), len(ix.fifo)-ix.head)
	}
}

// TestIndexMemoryStaysBounded: events consumed as fast as they come leave
// no growing queue behind.
func TestIndexMemoryStaysBounded(t *testing.T) {
	clk := newFakeClock()
	ix := NewIndex(IndexOptions{Clock: clk, MaxEvents: 100, MaxAge: time.Second})
	for i := range 10000 {
		name := fmt.Sprint("o", i%50)
		r := rec(fmt.Sprint("e", i), "alice", "patch", name, 0)
		r.Completed, r.Received = clk.Now(), clk.Now()
		ix.Add(SourceLog, []Record{r}, 0)
		c := chg(change.Updated, name)
		c.Time = clk.Now()
		if _, ok := ix.match(&c, false); !ok {
			t.Fatalf("event %d not matched", i)
		}
		clk.Step(time.Millisecond)
	}
	if n := len(ix.fifo); n > 2100 {
		t.Errorf("fifo holds %d entries after 10000 consumed events with a 1s age limit", n)
	}
	if ix.Len() != 0 {
		t.Errorf("held %d", ix.Len())
	}
}

// TestIndexBytes: the index evicts the oldest events past MaxBytes
// (counted by reason bytes), matched ones included, keeps its gauge, and
// drops a record that would keep more than MaxEventBytes; the interning
// maps never hold more than maxInternedBytes of strings that held events
// no longer share.
func TestIndexBytes(t *testing.T) {
	clk := newFakeClock()
	m := NewMetrics(nil)
	one := entryBytes(ptr(rec("e00", "alice", "patch", "o00", 0)))
	ix := NewIndex(IndexOptions{Clock: clk, Metrics: m, MaxBytes: 10*one + one/2})
	for i := range 20 {
		ix.Add(SourceWebhook, []Record{rec(fmt.Sprintf("e%02d", i), "alice", "patch", fmt.Sprintf("o%02d", i), 0)}, 0)
		if i == 4 {
			c := chg(change.Updated, "o04")
			if _, ok := ix.match(&c, false); !ok {
				t.Fatal("o04 not matched")
			}
		}
	}
	if ix.Bytes() > 10*one+one/2 || ix.Bytes() != 10*one || testutil.ToFloat64(m.heldBytes) != float64(ix.Bytes()) {
		t.Errorf("%d bytes (gauge %v), want 10 events' %d", ix.Bytes(), testutil.ToFloat64(m.heldBytes), 10*one)
	}
	// The ten oldest went, o04 (matched) among them: nine were evicted.
	if ix.Len() != 10 || testutil.ToFloat64(m.evictedBytes) != 9 {
		t.Errorf("held %d, %v evicted by bytes; want 10, 9", ix.Len(), testutil.ToFloat64(m.evictedBytes))
	}
	big := rec("big", strings.Repeat("u", MaxEventBytes), "patch", "o20", 0)
	ix.Add(SourceWebhook, []Record{big}, 0)
	if ix.Len() != 10 || testutil.ToFloat64(m.tooLargeBy[SourceWebhook]) != 1 {
		t.Errorf("a record over MaxEventBytes: held %d, too_large %v", ix.Len(), testutil.ToFloat64(m.tooLargeBy[SourceWebhook]))
	}

	// Distinct 60 KiB user agents: held events are evicted by bytes, and
	// the interning maps start over rather than keep them all.
	ix = NewIndex(IndexOptions{Clock: clk, Metrics: NewMetrics(nil), MaxBytes: 1 << 20})
	for i := range 200 {
		r := rec(fmt.Sprint("u", i), "alice", "patch", fmt.Sprint("o", i), 0)
		r.UserAgent = fmt.Sprintf("%06d", i) + strings.Repeat("a", 60<<10)
		ix.Add(SourceWebhook, []Record{r}, 0)
		interned := 0
		for s := range ix.strs {
			interned += len(s)
		}
		if interned > maxInternedBytes || ix.interned > maxInternedBytes || ix.Bytes() > 1<<20 {
			t.Fatalf("after %d events: %d bytes interned (counted %d), %d held", i+1, interned, ix.interned, ix.Bytes())
		}
	}
}

// TestEntryBytesBound: what the index counts for an event is at least
// what it takes on the heap (BenchmarkIndexMemory measures that).
func TestEntryBytesBound(t *testing.T) {
	r, keep, err := DecodeEvent(benchEvent(t, 1, "config-1", "user-1", t0))
	if err != nil || !keep {
		t.Fatal(keep, err)
	}
	// An apiserver event's record as held: measured 595 bytes an event
	// (30,000 of them, interned).
	if got := entryBytes(&r); got < 600 {
		t.Errorf("entryBytes %d, less than the 595 bytes an event takes", got)
	}
}
