package watcher

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestTrackerWatermark drives a tracker through callbacks, lists and
// completions in various orders and checks the watermark after each step.
// Steps: "add S" registers a change at cache version S (mark #n in order);
// "obs S O" ends a callback at cache version S for an object at O; "init S"
// ends an initial-list callback; "list V" records a list; "progress S" is
// the cache read from outside; "done N" finishes mark #N; "ready" ends the
// initial list; "stopped" stops the informer.
func TestTrackerWatermark(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []string // "op args => watermark"
	}{
		{"watch events done in order", []string{
			"ready => ",
			"add 10 => ", "obs 10 10 => ",
			"add 11 => ", "obs 11 11 => ",
			"done 0 => 10", "done 1 => 11",
		}},
		{"out-of-order completions wait for the oldest", []string{
			"ready => ",
			"add 10 => ", "obs 10 10 => ",
			"add 11 => ", "obs 11 11 => ",
			"add 12 => ", "obs 12 12 => ",
			"done 2 => ", "done 1 => ", "done 0 => 12",
		}},
		{"a batch completes with its last event only", []string{
			"ready => ",
			"add 20 => ", "obs 20 18 => ",
			"add 20 => ", "obs 20 19 => ",
			"done 0 => ", "done 1 => ", // 20's last event not handed on yet
			"add 20 => ", "obs 20 20 => ",
			"done 2 => 20",
		}},
		{"the cache moving on completes the previous seq", []string{
			"ready => ",
			"add 20 => ", "obs 20 18 => ",
			"done 0 => ",
			"progress 20 => ", // same seq: callbacks may still run
			"progress 25 => 20",
		}},
		{"a relist's objects never complete their seq by themselves", []string{
			"ready => ",
			"add 10 => ", "obs 10 10 => ", "done 0 => 10",
			"list 30 => 10",
			"add 30 => 10", "obs 30 30 => 10", // carries the list's version, yet not the last
			"add 30 => 10", "obs 30 22 => 10",
			"done 1 => 10", "done 2 => 10",
			"add 31 => 30", "obs 31 31 => 30", // the next event completes 30
			"done 3 => 31",
		}},
		{"a waiting change holds the watermark below its seq", []string{
			"ready => ",
			"add 10 => ", "obs 10 10 => ", "done 0 => 10",
			"add 12 => 10", "add 12 => 10", "obs 12 12 => 10",
			"done 1 => 10", // the other change of 12 waits
			"add 14 => 10", "obs 14 14 => 10", "done 3 => 10",
			"done 2 => 14",
		}},
		{"nothing moves before the initial list is handed on", []string{
			"list 5 => ",
			"init 5 5 => ", "init 5 3 => ",
			"add 6 => ", "obs 6 6 => ", "done 0 => ",
			"ready => 6",
		}},
		{"the initial list's seq completes when it is handed on", []string{
			"list 5 => ",
			"add 5 => ", "init 5 5 => ", "done 0 => ",
			"ready => 5",
		}},
		{"a stopped informer completes its last seq", []string{
			"ready => ",
			"add 40 => ", "obs 40 39 => ", "done 0 => ",
			"stopped => 40",
		}},
		{"the watermark never goes back", []string{
			"ready => ",
			"add 10 => ", "obs 10 10 => ", "done 0 => 10",
			"add 9 => 10", // an older cache (clamped to 10)
			"obs 9 9 => 10",
		}},
		{"resourceVersions that do not compare: no watermark", []string{
			"ready => ",
			"add 10 => ", "obs 10 10 => ", "done 0 => 10",
			"add abc => ", "obs abc abc => ",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTracker("test", nil)
			var marks []*mark
			for i, step := range tc.steps {
				op, want, _ := strings.Cut(step, "=>")
				args := strings.Fields(op)
				switch args[0] {
				case "add":
					marks = append(marks, tr.add(args[1], time.Now()))
				case "obs":
					tr.observed(args[1], args[2], false)
				case "init":
					tr.observed(args[1], args[2], true)
				case "list":
					tr.listed(args[1])
				case "progress":
					tr.progress(args[1])
				case "done":
					n, err := strconv.Atoi(args[1])
					if err != nil {
						t.Fatal(err)
					}
					marks[n].finish()
				case "ready":
					tr.initialDone()
				case "stopped":
					tr.stopped()
				default:
					t.Fatalf("step %d: unknown op %q", i, args[0])
				}
				if got, want := tr.watermark(), strings.TrimSpace(want); got != want {
					t.Fatalf("step %d %q: watermark %q, want %q", i, step, got, want)
				}
			}
		})
	}
}

// TestTrackerOldest: the lag is measured from the oldest change not done.
func TestTrackerOldest(t *testing.T) {
	tr := newTracker("test", nil)
	t0 := time.Unix(1000, 0)
	a := tr.add("1", t0)
	tr.add("2", t0.Add(time.Second))
	if got := tr.oldest(); !got.Equal(t0) {
		t.Errorf("oldest %v, want %v", got, t0)
	}
	a.finish()
	if got := tr.oldest(); !got.Equal(t0.Add(time.Second)) {
		t.Errorf("oldest after the first is done %v, want %v", got, t0.Add(time.Second))
	}
}

// TestTrackerEmptyList: an informer whose initial list had no object has
// the list's resourceVersion as its watermark once the list is handed on,
// unless a change found at its end waits.
func TestTrackerEmptyList(t *testing.T) {
	tr := newTracker("test", nil)
	tr.restart()
	tr.listed("40")
	if wm := tr.watermark(); wm != "" {
		t.Errorf("watermark %q before the initial list is handed on", wm)
	}
	tr.initialDone()
	if wm := tr.watermark(); wm != "40" {
		t.Errorf("watermark %q after an empty initial list at 40, want 40", wm)
	}

	tr = newTracker("test", nil)
	tr.restart()
	tr.listed("50")
	deleted := tr.add("50", time.Now()) // a baseline object missing from the list
	tr.initialDone()
	if wm := tr.watermark(); wm != "" {
		t.Errorf("watermark %q while the list's deletion waits", wm)
	}
	deleted.finish()
	if wm := tr.watermark(); wm != "50" {
		t.Errorf("watermark %q once the deletion is done, want 50", wm)
	}
}

// TestWatermarkKey: informers are named by resource, version, group and
// namespace.
func TestWatermarkKey(t *testing.T) {
	for _, tc := range []struct {
		k    watchKey
		want string
	}{
		{watchKey{gvr: configMaps}, "configmaps.v1"},
		{watchKey{gvr: configMaps, namespace: "ns"}, "configmaps.v1/ns"},
		{watchKey{gvr: widgets, namespace: "shop"}, "widgets.v1.example.com/shop"},
	} {
		if got := tc.k.watermarkKey(); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.k, got, tc.want)
		}
	}
}

// TestTrackerForgetsDoneMarks: marks done at complete seqs are dropped as
// they finish, so that a long-running standby or leader does not keep one
// per change.
func TestTrackerForgetsDoneMarks(t *testing.T) {
	tr := newTracker("test", nil)
	tr.initialDone()
	for i := 1; i <= 1000; i++ {
		rv := strconv.Itoa(i)
		m := tr.add(rv, time.Now())
		tr.observed(rv, rv, false)
		m.finish()
	}
	tr.mu.Lock()
	n := len(tr.marks)
	tr.mu.Unlock()
	if n > 1 {
		t.Errorf("%d marks kept after 1000 changes were done", n)
	}
	if got := tr.watermark(); got != "1000" {
		t.Errorf("watermark %q, want 1000", got)
	}
}
