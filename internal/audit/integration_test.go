package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fieldwatch/fieldwatch/internal/testenv"

	"github.com/fieldwatch/fieldwatch/change"
)

// TestAttributionThreeIdentities: two impersonated users and a service
// account create, update, patch and delete ConfigMaps and Widgets; the
// in-test watch's changes are attributed, through the webhook at Metadata
// level, to the right user, verb and user agent.
func TestAttributionThreeIdentities(t *testing.T) {
	env := testenv.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const ns = "three"
	env.EnsureNamespace(t, ns)
	writers := []testenv.Writer{env.Impersonating(t, "alice"), env.Impersonating(t, "bob"), env.ServiceAccountWriter(t, ns, "deployer")}
	_, a := newAttribution(t, IndexOptions{}, AttributorOptions{Wait: 10 * time.Second})
	obs := map[string]*observer{
		"configmaps": observe(t, ctx, env, a, configmaps, ns, "", nil),
		"widgets":    observe(t, ctx, env, a, widgets, ns, "", nil),
	}
	type step struct {
		verb string
		do   func(w testenv.Writer, name string) error
	}
	steps := map[string][]step{
		"configmaps": {
			{"create", func(w testenv.Writer, name string) error {
				_, err := w.Dynamic.Resource(configmaps).Namespace(ns).Create(ctx, configMap(name, map[string]any{"k": "1"}), metav1.CreateOptions{})
				return err
			}},
			{"update", func(w testenv.Writer, name string) error {
				cm, err := w.Dynamic.Resource(configmaps).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
				if err == nil {
					_ = unstructured.SetNestedField(cm.Object, "2", "data", "k")
					_, err = w.Dynamic.Resource(configmaps).Namespace(ns).Update(ctx, cm, metav1.UpdateOptions{})
				}
				return err
			}},
			{"patch", func(w testenv.Writer, name string) error {
				_, err := w.Dynamic.Resource(configmaps).Namespace(ns).Patch(ctx, name, types.MergePatchType, []byte(`{"data":{"k":"3"}}`), metav1.PatchOptions{})
				return err
			}},
			{"delete", func(w testenv.Writer, name string) error {
				return w.Dynamic.Resource(configmaps).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{})
			}},
		},
		"widgets": {
			{"create", func(w testenv.Writer, name string) error {
				_, err := w.Dynamic.Resource(widgets).Namespace(ns).Create(ctx, widget(name, 1), metav1.CreateOptions{})
				return err
			}},
			{"patch", func(w testenv.Writer, name string) error {
				_, err := w.Dynamic.Resource(widgets).Namespace(ns).Patch(ctx, name, types.ApplyPatchType,
					[]byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"`+name+`"},"spec":{"size":2}}`),
					metav1.PatchOptions{FieldManager: "writer", Force: ptr(true)})
				return err
			}},
			{"delete", func(w testenv.Writer, name string) error {
				return w.Dynamic.Resource(widgets).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{})
			}},
		},
	}
	for _, resource := range []string{"configmaps", "widgets"} {
		o := obs[resource]
		n := 0
		for _, w := range writers {
			name := strings.ReplaceAll(strings.TrimPrefix(w.Username, "system:serviceaccount:"+ns+":"), ":", "-")
			for _, s := range steps[resource] {
				if err := s.do(w, name); err != nil {
					t.Fatalf("%s %s %s as %s: %v", s.verb, resource, name, w.Username, err)
				}
				n++
				// One write at a time: each change has one candidate, so the
				// verb and auditID are named too.
				got := o.waitResolved(t, n, 15*time.Second)
				c := got[n-1]
				res := c.result
				if res.Match != change.MatchWindow && res.Match != change.MatchExact {
					t.Errorf("%s %s %s by %s: %s %+v", resource, c.Type, c.Name, w.Username, res.Match, res)
					continue
				}
				if res.Username() != w.Username || res.Verb != s.verb || res.UserAgent != w.UserAgent || res.AuditID == "" {
					t.Errorf("%s %s %s: attributed to %q verb %q agent %q auditID %q, want %q %q %q", resource, c.Type, c.Name,
						res.Username(), res.Verb, res.UserAgent, res.AuditID, w.Username, s.verb, w.UserAgent)
				}
				if strings.HasPrefix(w.Username, "system:serviceaccount:") {
					if res.ImpersonatedUser != nil || res.User.Username != w.Username {
						t.Errorf("service account write: user %+v impersonated %+v", res.User, res.ImpersonatedUser)
					}
				} else if res.User.Username != "admin" || res.ImpersonatedUser == nil || !slices.Contains(res.ImpersonatedUser.Groups, "fieldwatch:writers") {
					t.Errorf("impersonated write: user %+v impersonated %+v, want admin as %s in fieldwatch:writers", res.User, res.ImpersonatedUser, w.Username)
				}
				// Metadata level: window matches, but a delete's status names
				// the object's uid.
				if want := map[bool]change.Match{true: change.MatchExact, false: change.MatchWindow}[s.verb == "delete"]; res.Match != want {
					t.Errorf("%s %s %s: match %s, want %s", resource, c.Type, c.Name, res.Match, want)
				}
			}
		}
	}
}

// TestAttributionConcurrentWriters: eight writers (seven impersonated
// users and a service account), each on its own objects, make more than
// 500 changes at once: not one is attributed to the wrong user.
func TestAttributionConcurrentWriters(t *testing.T) {
	env := testenv.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const ns, objectsPerWriter, updates = "concurrent", 2, 30
	env.EnsureNamespace(t, ns)
	var writers []testenv.Writer
	for i := range 7 {
		writers = append(writers, env.Impersonating(t, fmt.Sprintf("user-%d", i)))
	}
	writers = append(writers, env.ServiceAccountWriter(t, ns, "bulk"))
	_, a := newAttribution(t, IndexOptions{}, AttributorOptions{Wait: 10 * time.Second})
	o := observe(t, ctx, env, a, configmaps, ns, "", nil)

	owner := map[string]string{}
	var wg sync.WaitGroup
	errs := make(chan error, len(writers))
	for i, w := range writers {
		for j := range objectsPerWriter {
			owner[fmt.Sprintf("w%d-o%d", i, j)] = w.Username
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- write(ctx, w, ns, i, objectsPerWriter, updates)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	total := len(writers) * objectsPerWriter * (updates + 2)
	got := o.waitResolved(t, total, 90*time.Second)
	counts := map[change.Match]int{}
	wrong := 0
	for _, c := range got {
		counts[c.result.Match]++
		if (c.result.Match == change.MatchExact || c.result.Match == change.MatchWindow) && c.result.Username() != owner[c.Name] {
			wrong++
			t.Errorf("%s %s rv %s attributed to %s, written by %s", c.Type, c.Name, c.ResourceVersion, c.result.Username(), owner[c.Name])
		}
	}
	t.Logf("%d changes from %d writers: %v", len(got), len(writers), counts)
	if len(got) < 500 || wrong != 0 || counts[change.MatchNone] != 0 || counts[change.MatchAmbiguous] != 0 {
		t.Errorf("%d changes, %d wrong, %v", len(got), wrong, counts)
	}
}

// write creates objects, updates each `updates` times and deletes them.
func write(ctx context.Context, w testenv.Writer, ns string, writer, objects, updates int) error {
	cms := w.Dynamic.Resource(configmaps).Namespace(ns)
	for j := range objects {
		name := fmt.Sprintf("w%d-o%d", writer, j)
		if _, err := cms.Create(ctx, configMap(name, map[string]any{"n": "0"}), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("%s: create %s: %w", w.Username, name, err)
		}
		for u := range updates {
			patch := fmt.Sprintf(`{"data":{"n":"%d"}}`, u+1)
			if _, err := cms.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				return fmt.Errorf("%s: patch %s: %w", w.Username, name, err)
			}
		}
		if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			return fmt.Errorf("%s: delete %s: %w", w.Username, name, err)
		}
	}
	return nil
}

// TestAttributionTwoUsersOneObject: two users patch one ConfigMap within
// the window. At Metadata level both changes are ambiguous, naming both;
// at RequestResponse level (namespace exact) each is exact.
func TestAttributionTwoUsersOneObject(t *testing.T) {
	env := testenv.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	alice, bob := env.Impersonating(t, "alice"), env.Impersonating(t, "bob")
	for _, tc := range []struct {
		ns   string
		want change.Match
	}{{"two-users", change.MatchAmbiguous}, {"exact", change.MatchExact}} {
		t.Run(tc.ns, func(t *testing.T) {
			env.EnsureNamespace(t, tc.ns)
			admin := env.Dynamic(t).Resource(configmaps).Namespace(tc.ns)
			created, err := admin.Create(ctx, configMap("shared", map[string]any{"k": "0"}), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := admin.Delete(context.Background(), "shared", metav1.DeleteOptions{}); err != nil {
					t.Errorf("clean up: %v", err)
				}
			})
			ix, a := newAttribution(t, IndexOptions{}, AttributorOptions{})
			gate := make(chan struct{})
			o := observe(t, ctx, env, a, configmaps, tc.ns, created.GetResourceVersion(), gate)
			byRV := map[string]string{}
			for i, w := range []testenv.Writer{alice, bob} {
				cm, err := w.Dynamic.Resource(configmaps).Namespace(tc.ns).Patch(ctx, "shared", types.MergePatchType,
					[]byte(fmt.Sprintf(`{"data":{"k":"%d"}}`, i+1)), metav1.PatchOptions{})
				if err != nil {
					t.Fatal(err)
				}
				byRV[cm.GetResourceVersion()] = w.Username
			}
			// Both changes are submitted once both events are held: the
			// candidates are the same for each.
			testenv.Eventually(t, 10*time.Second, "both audit events held", func() bool { return ix.Len() >= 2 && hasUsers(ix, "alice", "bob") })
			testenv.Eventually(t, 10*time.Second, "both changes watched", func() bool { return len(o.snapshot()) >= 2 })
			close(gate)
			got := o.waitResolved(t, 2, 10*time.Second)
			for _, c := range got {
				r := c.result
				switch tc.want {
				case change.MatchAmbiguous:
					if r.Match != change.MatchAmbiguous || !slices.Equal(r.Candidates, []string{"alice", "bob"}) || r.User != nil {
						t.Errorf("rv %s: %+v, want ambiguous between alice and bob", c.ResourceVersion, r)
					}
				case change.MatchExact:
					if r.Match != change.MatchExact || r.Username() != byRV[c.ResourceVersion] {
						t.Errorf("rv %s: %s %s, want exact %s", c.ResourceVersion, r.Match, r.Username(), byRV[c.ResourceVersion])
					}
				}
			}
		})
	}
}

// TestAttributionTiming: audit events that arrive before the changes are
// submitted (early: after they were watched, but the pipeline is behind),
// before the changes were even watched (a watch lagging behind the audit
// stream), after it (late: the receiver holds the apiserver's POST), or
// never (the policy leaves the namespace out): every callback comes within
// the wait bound, in order per object. Events that came before the change
// was watched decide only at the bound: such an event may be another
// request's (TestAttributionForgedEvent), so the change waits for one
// that comes after it, then goes out with what it has.
func TestAttributionTiming(t *testing.T) {
	env := testenv.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	alice := env.Impersonating(t, "alice")
	const wait = 3 * time.Second
	lifecycle := func(t *testing.T, ns, name string) {
		t.Helper()
		cms := alice.Dynamic.Resource(configmaps).Namespace(ns)
		if _, err := cms.Create(ctx, configMap(name, map[string]any{"k": "0"}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if _, err := cms.Patch(ctx, name, types.MergePatchType, []byte(fmt.Sprintf(`{"data":{"k":"%d"}}`, i+1)), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(t *testing.T, got []watched, want change.Match, minWait, maxWait time.Duration) {
		t.Helper()
		for _, c := range got {
			waited := c.resolved.Sub(c.submitted)
			if c.result.Match != want || (want != change.MatchNone && c.result.Username() != "alice") {
				t.Errorf("%s #%d: %s %q, want %s", c.Type, c.seq, c.result.Match, c.result.Username(), want)
			}
			if waited < minWait || waited > maxWait {
				t.Errorf("%s #%d waited %s, want between %s and %s", c.Type, c.seq, waited, minWait, maxWait)
			}
		}
	}

	t.Run("early", func(t *testing.T) {
		env.EnsureNamespace(t, "early")
		ix, a := newAttribution(t, IndexOptions{}, AttributorOptions{Wait: wait})
		gate := make(chan struct{})
		o := observe(t, ctx, env, a, configmaps, "early", "", gate)
		// The audit events wait until the changes are watched: on a
		// loaded machine an audit batch can reach the index before the
		// watch event reaches the observer, and an event held before its
		// change was observed decides only at the bound ("before the
		// watch", below). Here they come after it, and before Submit.
		release := receiver.hold()
		defer release()
		lifecycle(t, "early", "e")
		testenv.Eventually(t, 10*time.Second, "the changes watched", func() bool { return len(o.snapshot()) >= 5 })
		release()
		testenv.Eventually(t, 10*time.Second, "the audit events held", func() bool { return ix.Len() >= 5 })
		close(gate)
		got := o.waitResolved(t, 5, 10*time.Second)
		check(t, got[:4], change.MatchWindow, 0, 100*time.Millisecond)
		check(t, got[4:], change.MatchExact, 0, 100*time.Millisecond)
	})

	t.Run("before the watch", func(t *testing.T) {
		env.EnsureNamespace(t, "lagging")
		ix, a := newAttribution(t, IndexOptions{}, AttributorOptions{Wait: wait})
		gate := make(chan struct{})
		o := observeLagging(t, ctx, env, a, configmaps, "lagging", "", gate, true)
		lifecycle(t, "lagging", "b")
		testenv.Eventually(t, 10*time.Second, "the audit events held", func() bool { return ix.Len() >= 5 })
		testenv.Eventually(t, 10*time.Second, "the changes seen", func() bool { return len(o.snapshot()) >= 5 })
		close(gate)
		got := o.waitResolved(t, 5, wait+5*time.Second)
		// The deletion's status names the uid: exact, yet it waits behind
		// the changes before it.
		check(t, got[:4], change.MatchWindow, wait, wait+time.Second)
		check(t, got[4:], change.MatchExact, wait, wait+time.Second)
	})

	t.Run("late", func(t *testing.T) {
		env.EnsureNamespace(t, "late")
		_, a := newAttribution(t, IndexOptions{}, AttributorOptions{Wait: wait})
		o := observe(t, ctx, env, a, configmaps, "late", "", nil)
		release := receiver.hold()
		defer release()
		lifecycle(t, "late", "l")
		testenv.Eventually(t, 10*time.Second, "the changes watched", func() bool { return len(o.snapshot()) >= 5 })
		time.Sleep(time.Second) // the audit events are late by this: it is what the test is about, and nothing happens to poll for
		if n := len(slices.DeleteFunc(o.snapshot(), func(c watched) bool { return !c.done })); n != 0 {
			t.Fatalf("%d changes attributed while their audit events were held", n)
		}
		held := time.Now()
		release()
		got := o.waitResolved(t, 5, wait+5*time.Second)
		for _, c := range got {
			if c.resolved.Before(held) {
				t.Errorf("%s #%d resolved before the events were released", c.Type, c.seq)
			}
		}
		// The deletion's status names the uid: exact even at Metadata level.
		check(t, got[:4], change.MatchWindow, time.Second, wait)
		check(t, got[4:], change.MatchExact, time.Second, wait)
	})

	t.Run("never", func(t *testing.T) {
		env.EnsureNamespace(t, "unaudited")
		_, a := newAttribution(t, IndexOptions{}, AttributorOptions{Wait: wait})
		o := observe(t, ctx, env, a, configmaps, "unaudited", "", nil)
		lifecycle(t, "unaudited", "n")
		got := o.waitResolved(t, 5, wait+5*time.Second)
		check(t, got, change.MatchNone, wait, wait+time.Second)
	})
}

// hasUsers reports whether the index holds events of all the users.
func hasUsers(ix *Index, users ...string) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	seen := map[string]bool{}
	for _, b := range ix.byKey {
		for _, e := range b {
			seen[e.rec.Username()] = true
		}
	}
	for _, u := range users {
		if !seen[u] {
			return false
		}
	}
	return true
}

// TestAttributionFromLogFile: kube-apiserver writes its audit log
// (RequestResponse level, rotated at 1 MB); the follower reads it across
// a rotation and a truncation, and every change is attributed exactly.
func TestAttributionFromLogFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	env := testenv.Start(t, testenv.Options{Audit: &testenv.Audit{LogPath: path, LogMaxSizeMB: 1, Policy: `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: RequestResponse
  namespaces: [logged]
  resources: [{group: "", resources: [configmaps]}]
  verbs: [create, update, patch, delete]
- level: None
`}})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const ns = "logged"
	env.EnsureNamespace(t, ns)
	carol := env.Impersonating(t, "carol")

	m := NewMetrics(nil)
	ix := NewIndex(IndexOptions{Metrics: m})
	a := NewAttributor(ix, AttributorOptions{Wait: 10 * time.Second, Metrics: m})
	t.Cleanup(a.Close)
	var logs testenv.SyncBuffer
	f, err := NewFollower(FollowerOptions{Path: path, StateFile: filepath.Join(dir, "follow.state"), Metrics: m,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}, ix)
	if err != nil {
		t.Fatal(err)
	}
	fctx, stopFollower := context.WithCancel(ctx)
	followed := make(chan error, 1)
	go func() { followed <- f.Run(fctx) }()
	t.Cleanup(func() {
		stopFollower()
		if err := <-followed; err != nil {
			t.Errorf("follower: %v", err)
		}
	})
	testenv.Eventually(t, 10*time.Second, "the follower opened the log", func() bool {
		return strings.Contains(logs.String(), "audit log: following")
	})
	o := observe(t, ctx, env, a, configmaps, ns, "", nil)

	// About 17 kB per event (an 8 kB value in the request and in the
	// response): 1 MB is passed after some 60 writes.
	big := strings.Repeat("x", 8<<10)
	cms := carol.Dynamic.Resource(configmaps).Namespace(ns)
	writes := 0
	writeSome := func(prefix string, objects, patches int) {
		t.Helper()
		for i := range objects {
			name := fmt.Sprintf("%s-%d", prefix, i)
			if _, err := cms.Create(ctx, configMap(name, map[string]any{"v": big}), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			writes++
			for p := range patches {
				if _, err := cms.Patch(ctx, name, types.MergePatchType, []byte(fmt.Sprintf(`{"data":{"v":"%d%s"}}`, p, big)), metav1.PatchOptions{}); err != nil {
					t.Fatal(err)
				}
				writes++
			}
		}
	}
	writeSome("before", 10, 9)
	rotated := func() bool {
		matches, _ := filepath.Glob(filepath.Join(dir, "audit-*.log"))
		return len(matches) > 0
	}
	testenv.Eventually(t, 30*time.Second, "the apiserver rotated its log", rotated)
	testenv.Eventually(t, 30*time.Second, "the follower followed the rotation", func() bool {
		return testutil.ToFloat64(m.logReopens.WithLabelValues("rotated")) >= 1
	})
	writeSome("after", 2, 4)
	o.waitResolved(t, writes, 30*time.Second)

	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the follower noticed the truncation", func() bool {
		return testutil.ToFloat64(m.logReopens.WithLabelValues("truncated")) >= 1
	})
	writeSome("truncated", 2, 4)
	got := o.waitResolved(t, writes, 30*time.Second)
	for _, c := range got {
		if c.result.Match != change.MatchExact || c.result.Username() != "carol" {
			t.Errorf("%s %s rv %s: %s %q, want exact carol", c.Type, c.Name, c.ResourceVersion, c.result.Match, c.result.Username())
		}
	}
	if v := testutil.ToFloat64(m.decodeErrorsBy[SourceLog]); v != 0 {
		t.Errorf("%v lines failed to decode", v)
	}
	t.Logf("%d changes attributed from the log across a rotation and a truncation", len(got))
}

// TestAttributionGenerateName: at Metadata level the audit event of a
// create with generateName names no object; one user's creates are still
// attributed, two users' creates in the window are ambiguous.
func TestAttributionGenerateName(t *testing.T) {
	env := testenv.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns = "generated"
	env.EnsureNamespace(t, ns)
	alice, bob := env.Impersonating(t, "alice"), env.Impersonating(t, "bob")
	create := func(w testenv.Writer) {
		t.Helper()
		cm := configMap("", map[string]any{"k": "v"})
		cm.SetName("")
		cm.SetGenerateName("gen-")
		if _, err := w.Dynamic.Resource(configmaps).Namespace(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	ix, a := newAttribution(t, IndexOptions{}, AttributorOptions{})
	o := observe(t, ctx, env, a, configmaps, ns, currentRV(t, env, ns), nil)
	for i := range 3 {
		create(alice)
		got := o.waitResolved(t, i+1, 10*time.Second)
		if r := got[i].result; r.Match != change.MatchWindow || r.Username() != "alice" || r.Verb != "create" {
			t.Errorf("%s: %+v, want a window match of alice's create", got[i].Name, r)
		}
	}

	_, a2 := newAttribution(t, IndexOptions{}, AttributorOptions{})
	ix = a2.ix
	gate := make(chan struct{})
	o2 := observe(t, ctx, env, a2, configmaps, ns, o.snapshot()[2].ResourceVersion, gate)
	create(alice)
	create(bob)
	testenv.Eventually(t, 10*time.Second, "both creates held", func() bool { return hasUsers(ix, "alice", "bob") })
	testenv.Eventually(t, 10*time.Second, "both creations watched", func() bool { return len(o2.snapshot()) >= 2 })
	close(gate)
	for _, c := range o2.waitResolved(t, 2, 10*time.Second) {
		if r := c.result; r.Match != change.MatchAmbiguous || !slices.Equal(r.Candidates, []string{"alice", "bob"}) {
			t.Errorf("%s: %+v, want ambiguous between alice and bob", c.Name, r)
		}
	}
}

// TestAttributionFinalizers: alice deletes an object with a finalizer (an
// update that sets deletionTimestamp: her delete), then bob removes the
// finalizer (the deletion: his patch, a weak fit decided at the bound).
func TestAttributionFinalizers(t *testing.T) {
	env := testenv.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns = "finalizers"
	env.EnsureNamespace(t, ns)
	alice, bob := env.Impersonating(t, "alice"), env.Impersonating(t, "bob")
	const wait = 2 * time.Second
	_, a := newAttribution(t, IndexOptions{}, AttributorOptions{Wait: wait})
	o := observe(t, ctx, env, a, configmaps, ns, currentRV(t, env, ns), nil)

	cm := configMap("kept", map[string]any{"k": "v"})
	cm.SetFinalizers([]string{"example.com/keep"})
	if _, err := alice.Dynamic.Resource(configmaps).Namespace(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	o.waitResolved(t, 1, 10*time.Second)
	if err := alice.Dynamic.Resource(configmaps).Namespace(ns).Delete(ctx, "kept", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	got := o.waitResolved(t, 2, 10*time.Second)
	if c := got[1]; !c.DeletionStarted || c.result.Match != change.MatchWindow || c.result.Username() != "alice" || c.result.Verb != "delete" {
		t.Errorf("deletion started: %+v %+v, want alice's delete", c.Change, c.result)
	}
	if _, err := bob.Dynamic.Resource(configmaps).Namespace(ns).Patch(ctx, "kept", types.JSONPatchType,
		[]byte(`[{"op":"remove","path":"/metadata/finalizers"}]`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	got = o.waitResolved(t, 3, 10*time.Second)
	c := got[2]
	if c.Type != "deleted" || !c.WasTerminating || c.result.Match != change.MatchWindow || c.result.Username() != "bob" || c.result.Verb != "patch" {
		t.Errorf("deletion: %+v %+v, want bob's patch", c.Change, c.result)
	}
	if waited := c.resolved.Sub(c.submitted); waited < wait-100*time.Millisecond || waited > wait+time.Second {
		t.Errorf("a weak fit waited %s, want the bound %s", waited, wait)
	}
}

// currentRV is the resourceVersion to watch ConfigMaps of ns from, so that
// objects left by an earlier run (go test -count) are not seen as created.
func currentRV(t *testing.T, env *testenv.Env, ns string) string {
	t.Helper()
	l, err := env.Dynamic(t).Resource(configmaps).Namespace(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.GetResourceVersion()
}

// forgedEventList is an EventList of one Metadata-level patch of
// configmap ns/name by user, as if the apiserver had completed it now: what
// a client that may post could send ahead of the apiserver's real event.
func forgedEventList(t *testing.T, ns, name, user string) []byte {
	t.Helper()
	now := time.Now().UTC()
	ev := map[string]any{
		"kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata",
		"auditID": fmt.Sprintf("forged-%d", now.UnixNano()), "stage": "ResponseComplete",
		"requestURI": "/api/v1/namespaces/" + ns + "/configmaps/" + name, "verb": "patch",
		"user":      map[string]any{"username": user, "groups": []string{"system:authenticated"}},
		"sourceIPs": []string{"10.0.0.66"}, "userAgent": "kubectl/v1.37.2",
		"objectRef":                map[string]any{"resource": "configmaps", "namespace": ns, "name": name, "apiVersion": "v1"},
		"responseStatus":           map[string]any{"code": 200},
		"requestReceivedTimestamp": now.Add(-5 * time.Millisecond).Format(microTime),
		"stageTimestamp":           now.Format(microTime),
	}
	line, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return eventList([][]byte{line})
}

// postToReceiver posts body to the shared receiver with a client
// certificate and returns the status code.
func postToReceiver(t *testing.T, certPEM, keyPEM, body []byte) int {
	t.Helper()
	resp, err := httpsClient(t, receiver.certs.CAPEM, certPEM, keyPEM).Post(receiver.url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// TestAttributionForgedEvent: the apiserver really posts the audit event
// of bob's patch; before it, another client posts an event naming alice
// for the same patch. A certificate of the receiver's CA for another
// client (a kubelet's) is refused (403) and counted: bob's change is his.
// A client the receiver does accept (a token holder, the apiserver's
// certificate) gets its event in, but it came before the change, so it
// does not decide it: the apiserver's event makes the change ambiguous
// between alice and bob (at Metadata level) or exact, bob's (at
// RequestResponse level), never alice's.
func TestAttributionForgedEvent(t *testing.T) {
	env := testenv.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bob := env.Impersonating(t, "bob")
	kubeletCert, kubeletKey, err := receiver.certs.CA.ClientCert("system:node:worker-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, ns, object string
		cert, key        []byte
		wantCode         int
		want             change.Match
		wantCandidates   []string
	}{
		{"another client of the CA", "forged", "kubelet", kubeletCert, kubeletKey, http.StatusForbidden, change.MatchWindow, nil},
		{"an accepted client, Metadata level", "forged", "accepted", receiver.certs.ClientCertPEM, receiver.certs.ClientKeyPEM, http.StatusOK, change.MatchAmbiguous, []string{"alice", "bob"}},
		{"an accepted client, RequestResponse level", "exact", "forged-accepted", receiver.certs.ClientCertPEM, receiver.certs.ClientKeyPEM, http.StatusOK, change.MatchExact, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env.EnsureNamespace(t, tc.ns)
			admin := env.Dynamic(t).Resource(configmaps).Namespace(tc.ns)
			created, err := admin.Create(ctx, configMap(tc.object, map[string]any{"k": "0"}), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := admin.Delete(context.Background(), tc.object, metav1.DeleteOptions{}); err != nil {
					t.Errorf("clean up: %v", err)
				}
			})
			_, a := newAttribution(t, IndexOptions{}, AttributorOptions{Wait: 10 * time.Second})
			o := observe(t, ctx, env, a, configmaps, tc.ns, created.GetResourceVersion(), nil)
			refused := testutil.ToFloat64(receiver.metrics.refusedBy[RefusedCertificateName])

			if code := postToReceiver(t, tc.cert, tc.key, forgedEventList(t, tc.ns, tc.object, "alice")); code != tc.wantCode {
				t.Fatalf("the forged event: %d, want %d", code, tc.wantCode)
			}
			if got := testutil.ToFloat64(receiver.metrics.refusedBy[RefusedCertificateName]) - refused; got != map[bool]float64{true: 1, false: 0}[tc.wantCode == http.StatusForbidden] {
				t.Errorf("webhook_refused_total{reason=certificate_name} grew by %v", got)
			}
			// The apiserver's event of bob's patch is held until the change
			// was watched and submitted: the forged one is all there is then.
			release := receiver.hold()
			defer release()
			if _, err := bob.Dynamic.Resource(configmaps).Namespace(tc.ns).Patch(ctx, tc.object, types.MergePatchType, []byte(`{"data":{"k":"1"}}`), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 10*time.Second, "bob's change submitted", func() bool {
				cs := o.snapshot()
				return len(cs) == 1 && !cs[0].submitted.IsZero()
			})
			release()
			c := o.waitResolved(t, 1, 15*time.Second)[0]
			r := c.result
			switch tc.want {
			case change.MatchAmbiguous:
				if r.Match != change.MatchAmbiguous || !slices.Equal(r.Candidates, tc.wantCandidates) || r.User != nil {
					t.Errorf("bob's change: %s %q %v, want ambiguous between %v", r.Match, r.Username(), r.Candidates, tc.wantCandidates)
				}
			default:
				if r.Match != tc.want || r.Username() != "bob" {
					t.Errorf("bob's change: %s %q %v, want %s bob", r.Match, r.Username(), r.Candidates, tc.want)
				}
			}
		})
	}
}

// TestAttributionRetriedBatch: while the receiver reads as many posts as
// it may at once (slow ones, their bodies still coming), the apiserver's
// batch gets 429 with Retry-After; its webhook client retries it, the
// retry goes through once the slow posts are done, and alice's patch is
// attributed to her, its event indexed once.
func TestAttributionRetriedBatch(t *testing.T) {
	env := testenv.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns = "retried"
	env.EnsureNamespace(t, ns)
	alice := env.Impersonating(t, "alice")
	admin := env.Dynamic(t).Resource(configmaps).Namespace(ns)
	m := NewMetrics(nil)
	ix, a := newAttribution(t, IndexOptions{Metrics: m}, AttributorOptions{Wait: 30 * time.Second})
	created, err := admin.Create(ctx, configMap("busy", map[string]any{"k": "0"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := admin.Delete(context.Background(), "busy", metav1.DeleteOptions{}); err != nil {
			t.Errorf("clean up: %v", err)
		}
	})
	testenv.Eventually(t, 10*time.Second, "the create's event held", func() bool {
		ix.mu.Lock()
		defer ix.mu.Unlock()
		return slices.ContainsFunc(ix.byKey[objectKey{resource: "configmaps", namespace: ns, name: "busy"}], func(e *entry) bool { return e.rec.Verb == "create" })
	})
	// The events of earlier tests' writes may still be on their way in
	// the apiserver's batches: count from a moment none has come for
	// three seconds (several batch waits).
	indexed, quietSince := testutil.ToFloat64(m.indexedBy[SourceWebhook]), time.Now()
	testenv.Eventually(t, time.Minute, "no audit events arriving for 3 s", func() bool {
		if n := testutil.ToFloat64(m.indexedBy[SourceWebhook]); n != indexed {
			indexed, quietSince = n, time.Now()
		}
		return time.Since(quietSince) >= 3*time.Second
	})
	held := ix.Len()
	o := observe(t, ctx, env, a, configmaps, ns, created.GetResourceVersion(), nil)

	// Fill the receiver's slots with posts whose bodies do not end yet.
	body := []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[]}`)
	var slow []*io.PipeWriter
	done := make(chan int, DefaultMaxConcurrentRequests)
	for range DefaultMaxConcurrentRequests {
		pr, pw := io.Pipe()
		t.Cleanup(func() { _ = pw.CloseWithError(io.ErrUnexpectedEOF) })
		slow = append(slow, pw)
		go func() {
			resp, err := httpsClient(t, receiver.certs.CAPEM, receiver.certs.ClientCertPEM, receiver.certs.ClientKeyPEM).Post(receiver.url, "application/json", pr)
			if err != nil {
				done <- 0
				return
			}
			_ = resp.Body.Close()
			done <- resp.StatusCode
		}()
		go func() { _, _ = pw.Write(body[:10]) }()
	}
	testenv.Eventually(t, 10*time.Second, "the receiver's slots taken", func() bool { return len(receiver.webhook.slots) == DefaultMaxConcurrentRequests })
	busy := testutil.ToFloat64(receiver.metrics.webhookRequests.WithLabelValues("429"))

	if _, err := alice.Dynamic.Resource(configmaps).Namespace(ns).Patch(ctx, "busy", types.MergePatchType, []byte(`{"data":{"k":"1"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "the apiserver's batch refused with 429", func() bool {
		return testutil.ToFloat64(receiver.metrics.webhookRequests.WithLabelValues("429")) > busy
	})
	if n := ix.Len(); n != held {
		t.Errorf("%d events held while the receiver was busy, want the %d before", n, held)
	}
	for _, pw := range slow {
		_, _ = pw.Write(body[10:])
		_ = pw.Close()
	}
	for range slow {
		if code := <-done; code != http.StatusOK {
			t.Errorf("a slow post: %d", code)
		}
	}
	c := o.waitResolved(t, 1, 20*time.Second)[0]
	if c.result.Match != change.MatchWindow || c.result.Username() != "alice" {
		t.Errorf("alice's patch: %s %q, want window alice", c.result.Match, c.result.Username())
	}
	if got := testutil.ToFloat64(m.indexedBy[SourceWebhook]) - indexed; got != 1 || testutil.ToFloat64(m.duplicateBy[SourceWebhook]) != 0 {
		t.Errorf("indexed %v more, %v duplicates: want the patch's event once", got, testutil.ToFloat64(m.duplicateBy[SourceWebhook]))
	}
}
