package watcher

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fieldwatch/fieldwatch/change"
)

// standbyFixture is a standby Watcher without informers: changes are put
// into its pending set as an informer of ConfigMaps in namespace ns would.
type standbyFixture struct {
	t     *testing.T
	w     *Watcher
	store *Store
	res   change.Resource
	track *tracker
	typ   *objectType
}

func newStandbyFixture(t *testing.T) *standbyFixture {
	t.Helper()
	store, err := OpenStore(filepath.Join(t.TempDir(), "baseline.db"), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := store.Close(); err != nil {
			t.Error(err)
		}
	})
	w, err := newForClients(nil, nil, Config{Handler: &recorder{}, Standby: true, Store: store, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	res := change.Resource{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespaced: true, Preferred: true}
	f := &standbyFixture{t: t, w: w, store: store, res: res, track: w.tracker(watchKey{configMaps, "ns"}),
		typ: &objectType{gvk: configMaps.GroupVersion().WithKind("ConfigMap"), apiVersion: "v1", projection: change.Projection{Full: true}}}
	f.track.initialDone()
	return f
}

func (f *standbyFixture) obj(name, uid, rv, v string) *Object {
	f.t.Helper()
	o, err := newObject(map[string]any{
		"metadata": map[string]any{"name": name, "namespace": "ns", "uid": uid, "resourceVersion": rv},
		"data":     map[string]any{"v": v},
	}, f.typ)
	if err != nil {
		f.t.Fatal(err)
	}
	return o
}

// add hands a change on as the informer would, at cache version seq with
// the given bound ("" for none).
func (f *standbyFixture) add(c *Change, seq, bound string) {
	c.Resource = f.res
	c.Time = time.Now()
	m := f.track.add(seq, c.Time)
	f.track.observed(seq, seq, false)
	c.mark = m
	c.bound = bound
	o := c.Object()
	k := key{gr: groupResource(f.res), namespace: o.GetNamespace(), name: o.name}
	if f.w.pending.add(k, c) {
		f.w.queue.Add(k)
	}
}

// waiting describes the changes waiting for name, as "type(oldRV->newRV)".
func (f *standbyFixture) waiting(name string) string {
	f.w.pending.mu.Lock()
	defer f.w.pending.mu.Unlock()
	var parts []string
	for _, c := range f.w.pending.m[key{gr: groupResource(f.res), namespace: "ns", name: name}].list {
		parts = append(parts, string(c.Type)+"("+rv(c.Old)+"->"+rv(c.New)+")")
	}
	return strings.Join(parts, " ")
}

// recorded returns the resourceVersion the Store records for uid ("" for
// none).
func (f *standbyFixture) recorded(uid string) string {
	f.t.Helper()
	f.store.flush()
	objs, err := f.store.load(groupResource(f.res), f.res)
	if err != nil {
		f.t.Fatal(err)
	}
	if o := objs[types.UID(uid)]; o != nil {
		return o.resourceVersion
	}
	return ""
}

// TestStandbyConfirm: the leader's watermark drops, in order per object,
// the changes at or below it and records their state in the baseline;
// changes above it, of informers without a watermark, of resources that
// are gone, and after an unconfirmed change of the same object wait.
func TestStandbyConfirm(t *testing.T) {
	f := newStandbyFixture(t)
	const wk = "configmaps.v1/ns"
	a4, a5, a7, a9 := f.obj("a", "ua", "4", "x"), f.obj("a", "ua", "5", "y"), f.obj("a", "ua", "7", "z"), f.obj("a", "ua", "9", "w")
	f.add(&Change{Type: change.Updated, Old: a4, New: a5}, "5", "5")
	f.add(&Change{Type: change.Updated, Old: a5, New: a7}, "7", "7")
	f.add(&Change{Type: change.Updated, Old: a7, New: a9}, "9", "9")
	b3, b8 := f.obj("b", "ub", "3", "x"), f.obj("c", "uc", "8", "x")
	f.add(&Change{Type: change.Created, New: b3, uncertain: true}, "9", "3")
	f.add(&Change{Type: change.Created, New: b8, uncertain: true}, "9", "8")
	gone := f.obj("d", "ud", "2", "x")
	f.add(&Change{Type: change.Deleted, Old: gone}, "9", "") // its resource is gone

	f.w.Confirm(Watermarks{"other.v1": "100"}, nil)
	if got := f.waiting("a"); got != "updated(4->5) updated(5->7) updated(7->9)" {
		t.Fatalf("a waiting without a watermark for its informer: %s", got)
	}

	f.w.Confirm(Watermarks{wk: "7"}, nil)
	for _, tc := range []struct{ name, want string }{
		{"a", "updated(7->9)"},
		{"b", ""},
		{"c", "created(->8)"},
		{"d", "deleted(2->)"},
	} {
		if got := f.waiting(tc.name); got != tc.want {
			t.Errorf("%s waiting after watermark 7: %q, want %q", tc.name, got, tc.want)
		}
	}
	for uid, want := range map[string]string{"ua": "7", "ub": "3", "uc": "", "ud": ""} {
		if got := f.recorded(uid); got != want {
			t.Errorf("baseline of %s: %q, want %q", uid, got, want)
		}
	}
	if got := f.track.watermark(); got != "7" {
		// 9 is not confirmed: the standby's own watermark stays below.
		t.Errorf("standby watermark %q, want 7", got)
	}

	// A change after an unconfirmed one of the same object waits with it.
	e1, e2 := f.obj("e", "ue", "20", "x"), f.obj("e", "ue", "21", "y")
	f.add(&Change{Type: change.Created, New: e1}, "20", "") // not confirmable
	f.add(&Change{Type: change.Updated, Old: e1, New: e2}, "21", "21")
	f.w.Confirm(Watermarks{wk: "30"}, nil)
	if got := f.waiting("e"); got != "created(->20) updated(20->21)" {
		t.Errorf("e waiting: %q, want both: the first blocks the second", got)
	}
	if got := f.waiting("a"); got != "" {
		t.Errorf("a waiting after watermark 30: %q", got)
	}
	if got := f.recorded("ua"); got != "9" {
		t.Errorf("baseline of a after watermark 30: %q, want 9", got)
	}
}

// TestStandbyTakeOver: at the takeover the changes still waiting are
// queued, each its own; uncertain objects of informers without a
// watermark become the baseline, those of informers with one fire.
func TestStandbyTakeOver(t *testing.T) {
	for _, tc := range []struct {
		name         string
		leader       Watermarks
		wantQueued   []string
		wantBaseline map[string]string // uid -> recorded resourceVersion
		wantNote     string
	}{
		{
			name:         "with a watermark",
			leader:       Watermarks{"configmaps.v1/ns": "5"},
			wantQueued:   []string{"a:updated(5->7)", "a:updated(7->9)", "u:created(->8)"},
			wantBaseline: map[string]string{"ua": "5", "uu": ""},
		},
		{
			name:         "without a watermark",
			leader:       nil,
			wantQueued:   []string{"a:updated(4->5)", "a:updated(5->7)", "a:updated(7->9)"},
			wantBaseline: map[string]string{"ua": "", "uu": "8"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newStandbyFixture(t)
			a4, a5, a7, a9 := f.obj("a", "ua", "4", "x"), f.obj("a", "ua", "5", "y"), f.obj("a", "ua", "7", "z"), f.obj("a", "ua", "9", "w")
			f.add(&Change{Type: change.Updated, Old: a4, New: a5}, "5", "5")
			f.add(&Change{Type: change.Updated, Old: a5, New: a7}, "7", "7")
			f.add(&Change{Type: change.Updated, Old: a7, New: a9}, "9", "9")
			f.add(&Change{Type: change.Created, New: f.obj("u", "uu", "8", "x"), uncertain: true}, "9", "8")

			f.w.TakeOver(tc.leader, nil)
			f.w.takeOver()
			var got []string
			for f.w.queue.Len() > 0 {
				k, _ := f.w.queue.Get()
				for _, c := range f.w.pending.drain(k) {
					got = append(got, k.name+":"+string(c.Type)+"("+rv(c.Old)+"->"+rv(c.New)+")")
				}
				f.w.queue.Done(k)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.wantQueued) {
				t.Errorf("queued %v, want %v", got, tc.wantQueued)
			}
			for uid, want := range tc.wantBaseline {
				if got := f.recorded(uid); got != want {
					t.Errorf("baseline of %s: %q, want %q", uid, got, want)
				}
			}
			if f.w.standby.Load() {
				t.Error("still a standby after the takeover")
			}
			// Confirm after the takeover does nothing.
			f.w.Confirm(Watermarks{"configmaps.v1/ns": "100"}, nil)
			c := &Change{Type: change.Updated, Old: a9, New: f.obj("a", "ua", "10", "v")}
			f.add(c, "10", "10")
			if f.w.queue.Len() != 1 {
				t.Errorf("a change after the takeover is not queued for a worker")
			}
		})
	}
}

// TestStandbyGap: a leader whose watch began after the writes the
// previous leader confirmed publishes that gap; a standby keeps the writes
// of it that it saw one by one, whatever the leader's watermark (the
// leader never received them), and counts them as held; net effects and
// objects of its initial list are confirmed as before. When it takes over,
// it delivers them in order, and the writes of its objects after them.
func TestStandbyGap(t *testing.T) {
	f := newStandbyFixture(t)
	const wk = "configmaps.v1/ns"
	a4, a5, a7, a9 := f.obj("a", "ua", "4", "x"), f.obj("a", "ua", "5", "y"), f.obj("a", "ua", "7", "z"), f.obj("a", "ua", "9", "w")
	f.add(&Change{Type: change.Updated, Old: a4, New: a5, Observed: change.ObservedWatch}, "5", "5")
	f.add(&Change{Type: change.Updated, Old: a5, New: a7, Observed: change.ObservedWatch}, "7", "7")
	f.add(&Change{Type: change.Updated, Old: a7, New: a9, Observed: change.ObservedWatch}, "9", "9")
	b6 := f.obj("b", "ub", "6", "x")
	f.add(&Change{Type: change.Created, New: b6, Observed: change.ObservedWatch}, "6", "6")
	f.add(&Change{Type: change.Deleted, Old: f.obj("b", "ub", "8", "x"), Observed: change.ObservedWatch}, "8", "8")
	f.add(&Change{Type: change.Created, New: f.obj("u", "uu", "6", "x"), Observed: change.ObservedTakeover, uncertain: true}, "9", "6")
	f.add(&Change{Type: change.Updated, Old: f.obj("r", "ur", "3", "x"), New: f.obj("r", "ur", "7", "y"), Observed: change.ObservedRelist}, "9", "7")

	gaps := Gaps{wk: {After: "5", Through: "8"}}
	f.w.Confirm(Watermarks{wk: "9"}, gaps)
	for _, tc := range []struct{ name, want string }{
		{"a", "updated(5->7) updated(7->9)"}, // 7 is the gap's; 9 waits behind it
		{"b", "created(->6) deleted(8->)"},
		{"u", ""}, // not one write: the leader's list covered it
		{"r", ""},
	} {
		if got := f.waiting(tc.name); got != tc.want {
			t.Errorf("%s waiting after watermark 9 with gap (5, 8]: %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := f.w.Held(); got != 3 {
		t.Errorf("held %d changes of the leader's gap, want 3", got)
	}
	if got := f.recorded("ua"); got != "5" {
		t.Errorf("baseline of a: %q, want 5 (what the leader confirmed before the gap)", got)
	}
	// Without the gap, the same watermark confirms them.
	f.w.Confirm(Watermarks{wk: "5"}, nil)
	if got := f.w.Held(); got != 0 {
		t.Errorf("held %d without a gap", got)
	}

	f.w.TakeOver(Watermarks{wk: "9"}, gaps)
	f.w.takeOver()
	var got []string
	for f.w.queue.Len() > 0 {
		k, _ := f.w.queue.Get()
		for _, c := range f.w.pending.drain(k) {
			got = append(got, k.name+":"+string(c.Type)+"("+rv(c.Old)+"->"+rv(c.New)+")")
		}
		f.w.queue.Done(k)
	}
	slices.Sort(got)
	want := []string{"a:updated(5->7)", "a:updated(7->9)", "b:created(->6)", "b:deleted(8->)"}
	if !slices.Equal(got, want) {
		t.Errorf("queued at the takeover %v, want %v", got, want)
	}
}

// TestTrackerGap: the gap a replica takes over with runs from the highest
// watermark handled (the previous leader's or its own) to where its watch
// began, and keeps the part of the previous leader's gap below that.
func TestTrackerGap(t *testing.T) {
	const k = "configmaps.v1"
	for _, tc := range []struct {
		name     string
		from     string // the informer's last list
		replayed string // the watermark its watch replayed from ("" none)
		leader   Watermarks
		gaps     Gaps
		want     Gap
		wantsGap bool
	}{
		{name: "watch began before the leader's watermark", from: "10", leader: Watermarks{k: "20"}},
		{name: "watch began after it", from: "30", leader: Watermarks{k: "20"}, want: Gap{"20", "30"}, wantsGap: true},
		{name: "replayed from the previous run's watermark", from: "25", replayed: "25", leader: Watermarks{k: "20"}},
		{name: "relisted since a replay", from: "30", replayed: "25", leader: Watermarks{k: "20"}, want: Gap{"25", "30"}, wantsGap: true},
		{name: "no watermark of a previous leader", from: "30"},
		{name: "previous gap seen one by one", from: "10", leader: Watermarks{k: "40"}, gaps: Gaps{k: {"15", "35"}}},
		{name: "previous gap partly seen", from: "20", leader: Watermarks{k: "40"}, gaps: Gaps{k: {"15", "35"}}, want: Gap{"15", "20"}, wantsGap: true},
		{name: "previous gap not seen, and a gap of its own", from: "50", leader: Watermarks{k: "40"}, gaps: Gaps{k: {"15", "35"}}, want: Gap{"15", "50"}, wantsGap: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTracker(k, nil)
			if tc.replayed != "" {
				tr.replayed(tc.replayed)
			}
			tr.listed(tc.from)
			tr.initialDone() // no object: its own watermark is the list's
			if tr.watermark() != tc.from {
				t.Fatalf("watermark %q", tr.watermark())
			}
			got, ok := tr.gap(tc.leader, tc.gaps)
			if ok != tc.wantsGap || got != tc.want {
				t.Errorf("gap %v (%v), want %v (%v)", got, ok, tc.want, tc.wantsGap)
			}
		})
	}
}
