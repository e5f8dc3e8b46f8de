package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/history"
	"github.com/fieldwatch/fieldwatch/internal/history/web"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// historyOf reads a state directory's history with `fieldwatch history
// --state-dir DIR --all -o json` (offline, read only: the replica may be
// running) and returns each id's source.
func historyOf(t *testing.T, dir string) map[string]string {
	t.Helper()
	return historyFrom(t, "--state-dir", dir)
}

// historyFrom is historyOf for the history that from names (--state-dir
// DIR or --dsn DSN).
func historyFrom(t *testing.T, from ...string) map[string]string {
	t.Helper()
	dir := strings.Join(from, " ")
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), append(append([]string{"history"}, from...), "--all", "--limit", "1000", "-o", "json"), &stdout, &stderr); code != 0 {
		t.Fatalf("fieldwatch history %s: exit %d: %s", dir, code, stderr.String())
	}
	var page web.APIPage
	if err := json.Unmarshal(stdout.Bytes(), &page); err != nil {
		t.Fatalf("not a page: %v", err)
	}
	out := map[string]string{}
	for _, e := range page.Entries {
		var p struct{ ID string }
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			t.Fatal(err)
		}
		if _, dup := out[p.ID]; dup {
			t.Errorf("id %s twice in the history of %s", p.ID, dir)
		}
		out[p.ID] = string(e.Source)
	}
	return out
}

// TestFailoverHistory runs two replicas with leader election, each with
// its own state directory and so its own embedded history, while
// ConfigMaps and Widgets change, and SIGKILLs the leader mid-stream. The
// standby's history then holds every payload the killed leader delivered
// and confirmed (those delivered more than 2 s before the kill: its
// watermarks go on the Lease every 500 ms), recorded by the standby from
// those watermarks (source confirmed), and everything it delivered
// itself; what the killed leader delivered after its last watermark is
// there as the new leader delivered it: with the same id, or, where
// several changes of an object waited, as one entry for their net
// effect, a later one of the same object. The rules keep states: the
// standby's rebuild every version written outside those 2 s and the
// takeover, and every object's last state (checkFailoverStates).
func TestFailoverHistory(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	ns := namespace(t, env, "failover-history")
	kc := env.WriteKubeconfig(t)
	h := newHooks(t)
	dirs := map[string]string{"a": t.TempDir(), "b": t.TempDir()}
	reps := map[string]*proc{}
	for _, name := range []string{"a", "b"} {
		rules := h.rulesWith(t, ns, name, "    history: {states: true}\n")
		reps[name] = startFieldwatch(t, kc, replicaArgsWith(rules, ns, name, dirs[name])...)
	}
	w := startWriters(t, env, ns, 30*time.Millisecond, 0)
	leader := leaderOf(t, 30*time.Second, reps["a"], reps["b"])
	name, other := "a", "b"
	if leader == reps["b"] {
		name, other = "b", "a"
	}
	standby := reps[other]
	testenv.Eventually(t, 30*time.Second, "the standby to record what the leader confirmed", func() bool {
		return standby.metric(`fieldwatch_history_entries_total{result="written"}`) > 20
	})
	w.waitWrites(t, 30) // mid-stream
	killedAt := time.Now()
	leader.kill()
	testenv.Eventually(t, 30*time.Second, "the standby to take over", func() bool {
		return standby.metric("fieldwatch_leader ") == 1
	})
	tookOver := time.Now()
	w.waitWrites(t, 150) // under the new leader
	w.finish()
	o := settle(t, h, w, time.Minute)
	var missing []string
	var got map[string]string
	confirmedBefore := killedAt.Add(-2 * time.Second)
	testenv.Poll(30*time.Second, func() bool {
		got = historyOf(t, dirs[other])
		missing = missing[:0]
		for _, p := range h.payloads() {
			if _, ok := got[p.id]; ok || (p.replica == name && p.at.After(confirmedBefore)) {
				continue
			}
			missing = append(missing, fmt.Sprintf("%s (%s %s/%s rv %s, delivered by %s at %s)", p.id, p.typ, p.kind, p.name, p.rv, p.replica, p.at.Format("15:04:05.000")))
		}
		return len(missing) == 0
	})
	if len(missing) > 0 {
		t.Errorf("%d of %d delivered payloads are not in %s's history (killed %s at %s), first:\n  %s", len(missing), len(h.payloads()), other, name,
			killedAt.Format("15:04:05.000"), strings.Join(missing[:min(20, len(missing))], "\n  "))
	}
	// The last ones of the killed leader: the object's later state is there.
	late, covered := 0, 0
	for _, p := range h.payloads() {
		if _, ok := got[p.id]; ok || p.replica != name || !p.at.After(confirmedBefore) {
			continue
		}
		late++
		for _, q := range h.payloads() {
			if _, ok := got[q.id]; ok && q.uid == p.uid && q.replica == other {
				covered++
				break
			}
		}
	}
	if covered != late {
		t.Errorf("%d payloads of the killed leader's last 2 s are neither in the history nor followed there by the object's later state (%d are)", late-covered, covered)
	}
	sources := map[string]int{}
	for _, s := range got {
		sources[s]++
	}
	if sources["confirmed"] == 0 || sources["delivered"] == 0 {
		t.Errorf("the new leader's history: %v, want entries of both sources", sources)
	}
	checkFailoverStates(t, env, ns, dirs[other], w.made(), confirmedBefore, tookOver.Add(time.Second))
	old := historyOf(t, dirs[name])
	t.Logf("%s; killed %s, whose history holds %d entries; %s's holds %d (%d confirmed from %s's watermarks, %d delivered); %d of the killed leader's last payloads there as a later state of their object",
		o, name, len(old), other, len(got), sources["confirmed"], name, sources["delivered"], late)
}

// checkFailoverStates checks the states in the history of the state
// directory dir: every version writes made before confirmedBefore or
// after resumed is a state that rebuilds, at its time, to the object as
// the write returned it; every object's last state is the object as a
// client reads it now, or its deletion.
func checkFailoverStates(t *testing.T, env *testenv.Env, ns, dir string, writes []made, confirmedBefore, resumed time.Time) {
	t.Helper()
	ctx := context.Background()
	store, err := history.OpenSQLite(filepath.Join(dir, "history.db"), history.SQLiteOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	type object struct{ kind, name string }
	keyOf := func(o object) (history.ObjectKey, schema.GroupVersionResource) {
		if o.kind == "Widget" {
			return history.ObjectKey{Group: "example.com", Resource: "widgets", Namespace: ns, Name: o.name}, widgetsGVR
		}
		return history.ObjectKey{Resource: "configmaps", Namespace: ns, Name: o.name}, schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	}
	objects := map[object]bool{}
	for _, m := range writes {
		objects[object{m.kind, m.name}] = true
	}
	// The last states, which the new leader records after it delivers.
	testenv.EventuallyWhy(t, time.Minute, "every object's last state in the history", func() (bool, string) {
		for o := range objects {
			key, gvr := keyOf(o)
			live, err := env.Dynamic(t).Resource(gvr).Namespace(ns).Get(ctx, o.name, metav1.GetOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return false, err.Error()
			}
			r, rerr := history.Rebuild(ctx, store, key, time.Now())
			switch {
			case err != nil && errors.Is(rerr, history.ErrNoStates):
				// Created and deleted within the takeover: no state of
				// it need be kept.
			case err != nil && (rerr != nil || r.Last.Type != change.Deleted):
				return false, fmt.Sprintf("%s is deleted; its last state %+v (%v)", key, r.Last, rerr)
			case err == nil && rerr != nil:
				return false, fmt.Sprintf("%s: %v", key, rerr)
			case err == nil && !sameObject(live.Object, r.Object):
				return false, fmt.Sprintf("%s: last state %s, a client reads resourceVersion %s", key, r.Last.ResourceVersion, live.GetResourceVersion())
			}
		}
		return true, ""
	})
	checked := 0
	for _, m := range writes {
		if m.obj == nil || (!m.at.Before(confirmedBefore) && !m.at.After(resumed)) {
			continue
		}
		key, _ := keyOf(object{m.kind, m.name})
		var at time.Time
		err := store.StatesOf(ctx, key, time.Time{}, history.MaxTime, func(s *history.State) error {
			if s.ResourceVersion == m.rv {
				at = s.Time
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if at.IsZero() {
			t.Errorf("%s resourceVersion %s (%s at %s): no state", key, m.rv, m.typ, m.at.Format("15:04:05.000"))
			continue
		}
		r, err := history.Rebuild(ctx, store, key, at)
		if err != nil || !sameObject(m.obj, r.Object) {
			t.Errorf("%s resourceVersion %s rebuilt at %s: %s (%v), want the object as written", key, m.rv, at.Format(time.RFC3339Nano), r.Object, err)
		}
		checked++
	}
	if checked == 0 {
		t.Error("no version was checked")
	}
	t.Logf("%d versions rebuilt from %s's states, %d objects' last states", checked, dir, len(objects))
}

// sameObject reports whether the object obj, less its managedFields, is
// the JSON state.
func sameObject(obj map[string]any, state []byte) bool {
	b, err := json.Marshal(obj)
	if err != nil {
		return false
	}
	var want, got map[string]any
	if json.Unmarshal(b, &want) != nil || json.Unmarshal(state, &got) != nil {
		return false
	}
	if md, ok := want["metadata"].(map[string]any); ok {
		delete(md, "managedFields")
	}
	return reflect.DeepEqual(want, got)
}

// TestHistoryCLI: fieldwatch history against a running fieldwatch (a
// table, filters, the server's sealed cursor, JSON; without a token, which
// --history-insecure-loopback allows from loopback) and offline on its
// state directory, and its bad input.
func TestHistoryCLI(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	ns := namespace(t, env, "history-cli")
	kc := env.WriteKubeconfig(t)
	h := newHooks(t)
	dir := t.TempDir()
	p := startFieldwatch(t, kc, "--rules", h.rules(t, ns, "solo"), "--state-dir", dir, "--http-addr", "127.0.0.1:0", "--history-insecure-loopback")
	w := startWriters(t, env, ns, 20*time.Millisecond, 0)
	w.waitWrites(t, 100)
	w.finish()
	settle(t, h, w, time.Minute)
	// A payload the receiver got twice (a retry after a slow answer) is
	// one entry: compare ids. settle returns once every write is covered,
	// while the payload of an earlier state may still be on its way (the
	// history holds it already): the ids are read again until both agree.
	var ids map[string]bool
	delivered := func() map[string]bool {
		ids := map[string]bool{}
		for _, p := range h.payloads() {
			ids[p.id] = true
		}
		return ids
	}
	server := "http://" + p.httpAddr()
	cli := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append([]string{"history"}, args...), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	testenv.EventuallyWhy(t, 30*time.Second, "the history to hold the payloads delivered", func() (bool, string) {
		ids = delivered()
		got := historyOf(t, dir)
		var missing, extra []string
		for id := range ids {
			if _, ok := got[id]; !ok {
				missing = append(missing, id)
			}
		}
		for id := range got {
			if !ids[id] {
				extra = append(extra, id)
			}
		}
		return len(missing) == 0 && len(extra) == 0,
			fmt.Sprintf("it lacks %d of the %d payloads delivered (%v) and holds %d never delivered (%v)", len(missing), len(ids), missing, len(extra), extra)
	})
	n := len(ids)
	code, out, stderr := cli("--server", server, "-n", ns, "--resource", "configmaps", "--limit", "5")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || !strings.HasPrefix(lines[0], "TIME") || len(lines) != 7 || !strings.HasPrefix(lines[6], "more: --cursor ") {
		t.Errorf("a table of 5: exit %d\n%s%s", code, out, stderr)
	}
	for _, l := range lines[1:6] {
		if !strings.Contains(l, "configmaps") || !strings.Contains(l, ns+"/configmap-") {
			t.Errorf("a row that is not a ConfigMap of %s: %q", ns, l)
		}
	}
	cursor := strings.Fields(lines[6])[2]
	if code, out, _ := cli("--server", server, "-n", ns, "--resource", "configmaps", "--limit", "5", "--cursor", cursor); code != 0 || strings.Contains(out, lines[1]) {
		t.Errorf("the next page: exit %d, repeats the first row:\n%s", code, out)
	}
	code, out, _ = cli("--server", server, "--all", "-o", "json", "--limit", "7")
	var page web.APIPage
	if code != 0 || json.Unmarshal([]byte(out), &page) != nil || len(page.Entries) != n || page.Next != "" {
		t.Errorf("--all -o json: exit %d, %d entries of %d, next %q", code, len(page.Entries), n, page.Next)
	}
	if code, out, _ := cli("--state-dir", dir, "--type", "deleted"); code != 0 || strings.Contains(out, "updated") {
		t.Errorf("offline, deleted only: exit %d\n%s", code, out)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--server", server, "--type", "moved"}, 2, `parameter "type" "moved": want created, updated or deleted`},
		{[]string{"--since", "yesterday"}, 2, `parameter "since" "yesterday"`},
		{[]string{"--server", server, "--state-dir", dir}, 2, "give one of --server, --state-dir and --dsn"},
		{[]string{"--server", "ftp://x"}, 2, "--server \"ftp://x\": want http://HOST:PORT"},
		{[]string{"-o", "yaml"}, 2, `-o "yaml": want table or json`},
		{[]string{"--state-dir", filepath.Join(dir, "nothing")}, 1, "no such file or directory"},
		{[]string{"--server", server, "extra"}, 2, "no arguments are taken"},
		{[]string{"--server", server, "--cursor", "12"}, 2, `parameter "cursor": cursor: not a cursor this server returned`},
		{[]string{"--state-dir", dir, "--cursor", "12"}, 2, `--cursor: cursor "12": not a cursor this API returned`},
		{[]string{"--server", server, "--token-file", filepath.Join(dir, "missing")}, 2, "--token-file"},
	} {
		if code, _, stderr := cli(tc.args...); code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("history %v: exit %d, %s; want %d, %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
}
