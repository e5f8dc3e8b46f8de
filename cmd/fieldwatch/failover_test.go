package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// replicaArgs are the flags of replica name in a leader election in ns,
// with its own state directory.
func replicaArgs(h *hooks, t *testing.T, ns, name, stateDir string) []string {
	return replicaArgsWith(h.rules(t, ns, name), ns, name, stateDir)
}

// replicaArgsWith is replicaArgs with the rules file rules.
func replicaArgsWith(rules, ns, name, stateDir string) []string {
	return append([]string{"--rules", rules, "--state-dir", stateDir,
		"--leader-elect", "--leader-elect-namespace", ns, "--leader-elect-name", "fw", "--leader-elect-identity", name}, fastLease...)
}

// TestFailoverSIGKILL runs two replicas with their own state directories
// while ConfigMaps and Widgets are created, updated and deleted, and
// SIGKILLs the leader mid-stream five times, restarting it each time as a
// standby. Every change made is delivered by one replica or the other;
// duplicates carry equal ids.
func TestFailoverSIGKILL(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	ns := namespace(t, env, "failover-kill")
	kc := env.WriteKubeconfig(t)
	h := newHooks(t)
	dirs := map[string]string{"a": t.TempDir(), "b": t.TempDir()}
	reps := map[string]*proc{}
	for _, name := range []string{"a", "b"} {
		reps[name] = startFieldwatch(t, kc, replicaArgs(h, t, ns, name, dirs[name])...)
	}
	w := startWriters(t, env, ns, 20*time.Millisecond, 0)
	var takeovers []time.Duration
	for round := range 5 {
		leader := leaderOf(t, 30*time.Second, reps["a"], reps["b"])
		name, other := "a", "b"
		if leader == reps["b"] {
			name, other = "b", "a"
		}
		standby := reps[other]
		testenv.Eventually(t, 30*time.Second, "the standby to follow the leader", func() bool {
			select {
			case <-standby.done:
				// It led, could not renew in time on a loaded machine and
				// stopped, as a leader that loses its Lease does: start
				// it again, as the kubelet does.
				standby = launch(t, kc, replicaArgs(h, t, ns, other, dirs[other])...)
				reps[other] = standby
				return false
			default:
			}
			return standby.metric("fieldwatch_baseline_confirmed_total") > 0
		})
		w.waitWrites(t, 20) // mid-stream
		killed := time.Now()
		leader.kill()
		testenv.Eventually(t, 30*time.Second, "the standby to take over", func() bool {
			return standby.metric("fieldwatch_leader ") == 1
		})
		takeovers = append(takeovers, time.Since(killed))
		t.Logf("round %d: killed %s; %s took over after %s, firing %v changes the killed leader had not confirmed",
			round+1, name, other, takeovers[round].Round(10*time.Millisecond), standby.metric("fieldwatch_baseline_takeover_changes_total"))
		restart := time.Now()
		reps[name] = startFieldwatch(t, kc, replicaArgs(h, t, ns, name, dirs[name])...)
		t.Logf("round %d: %s restarted and ready in %s", round+1, name, time.Since(restart).Round(10*time.Millisecond))
	}
	w.waitWrites(t, 20) // with both replicas running again
	w.finish()
	o := settle(t, h, w, time.Minute)
	t.Logf("SIGKILL x5: %s; takeovers %v", o, takeovers)
}

// TestFailoverPartition cuts the leader off the apiserver while its
// receiver fails, so that it holds undelivered firings when it loses the
// Lease: it stops delivering within the renew deadline, before the other
// replica takes over, and exits; the other delivers everything the first
// did not, and no change made after the handover comes from both.
func TestFailoverPartition(t *testing.T) {
	t.Parallel()
	const renewDeadline = 2 * time.Second // fastLease
	env := testenv.Shared(t)
	ns := namespace(t, env, "failover-partition")
	kc := env.WriteKubeconfig(t)
	px := testenv.NewProxy(t, apiserverAddr(t, kc))
	h := newHooks(t)
	a := startFieldwatch(t, kubeconfigVia(t, kc, px.Addr()), replicaArgs(h, t, ns, "a", t.TempDir())...)
	leaderOf(t, 30*time.Second, a)
	w := startWriters(t, env, ns, 20*time.Millisecond, 0)
	b := startFieldwatch(t, kc, replicaArgs(h, t, ns, "b", t.TempDir())...)
	testenv.Eventually(t, 30*time.Second, "the standby to follow the leader", func() bool {
		return b.metric("fieldwatch_baseline_confirmed_total") > 0
	})

	h.fail("a", true) // a keeps retrying what it holds
	testenv.Eventually(t, 10*time.Second, "a to retry", func() bool { return !h.lastAttempt("a").IsZero() })
	w.waitWrites(t, 20) // firings a holds undelivered
	cut := time.Now()
	px.Cut()
	testenv.Eventually(t, 30*time.Second, "b to take over", func() bool { return b.metric("fieldwatch_leader ") == 1 })
	tookOver := time.Now()
	if code := a.waitExit(30 * time.Second); code != 1 {
		t.Errorf("a exited with %d after losing its Lease, want 1 (restart as a candidate)", code)
	}
	w.waitWrites(t, 20) // made after the handover
	w.finish()
	o := settle(t, h, w, time.Minute)

	lastA := h.lastAttempt("a")
	var firstB time.Time
	for _, p := range h.payloads() {
		if p.replica == "b" && (firstB.IsZero() || p.at.Before(firstB)) {
			firstB = p.at
		}
	}
	t.Logf("partition: %s; a's last attempt %s after the cut, b's first delivery %s after it (takeover seen %s after it)",
		o, lastA.Sub(cut).Round(time.Millisecond), firstB.Sub(cut).Round(time.Millisecond), tookOver.Sub(cut).Round(time.Millisecond))
	if stopped := lastA.Sub(cut); stopped > renewDeadline+time.Second {
		t.Errorf("a still attempted deliveries %s after the cut, beyond the renew deadline %s", stopped, renewDeadline)
	}
	if !lastA.Before(firstB) {
		t.Errorf("a attempted a delivery at %s, after b's first at %s: both acted at once", lastA.Format("15:04:05.000"), firstB.Format("15:04:05.000"))
	}
	after := map[string]bool{}
	for _, m := range w.made() {
		if m.at.After(tookOver) {
			after[string(m.uid)+"/"+m.rv] = true
		}
	}
	for _, p := range h.payloads() {
		if p.replica == "a" && after[string(p.uid)+"/"+p.rv] {
			t.Errorf("a delivered %s, a change made after the handover", p.id)
		}
	}
}

// TestFailoverRollout replaces the only replica by a new process on the
// same state directory, as a rollout of a StatefulSet does, while changes
// happen: SIGTERM (it drains holding its Lease, then releases it), then the
// new one starts. Nothing is lost. Objects are deleted only once they are
// 8s old, so that none is created and deleted in the gap between the two
// (a gap no replica watches: only its net effect, nothing, is visible).
func TestFailoverRollout(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	ns := namespace(t, env, "failover-rollout")
	kc := env.WriteKubeconfig(t)
	h := newHooks(t)
	dir := t.TempDir()
	old := startFieldwatch(t, kc, replicaArgs(h, t, ns, "pod", dir)...)
	leaderOf(t, 30*time.Second, old)
	w := startWriters(t, env, ns, 20*time.Millisecond, 8*time.Second)
	w.waitWrites(t, 100) // before the rollout
	old.stop()
	started := time.Now()
	next := startFieldwatch(t, kc, replicaArgs(h, t, ns, "pod", dir)...)
	leaderOf(t, 30*time.Second, next)
	t.Logf("the new replica leads %s after the old one exited, firing %v changes made meanwhile or left by the old one",
		time.Since(started).Round(10*time.Millisecond), next.metric("fieldwatch_baseline_takeover_changes_total"))
	w.waitWrites(t, 100) // after it
	w.finish()
	o := settle(t, h, w, time.Minute)
	t.Logf("rollout: %s", o)
}

// TestFailoverFreshStandby starts a standby with an empty state directory
// while the leader runs and changes happen, and kills the leader once the
// standby follows it: the standby, which never led, takes over without
// losing anything and without reporting the objects that did not change
// as created.
func TestFailoverFreshStandby(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	ns := namespace(t, env, "failover-fresh")
	kc := env.WriteKubeconfig(t)
	h := newHooks(t)
	ctx := context.Background()
	const still = 40
	for i := range still {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("still-%02d", i)}, Data: map[string]string{"v": "0"}}
		if _, err := env.Clientset(t).CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	installWidgets(t, env)
	for i := range still / 2 {
		wd := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Widget",
			"metadata": map[string]any{"name": fmt.Sprintf("still-%02d", i), "namespace": ns}, "spec": map[string]any{"size": int64(1)}}}
		if _, err := env.Dynamic(t).Resource(widgetsGVR).Namespace(ns).Create(ctx, wd, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	a := startFieldwatch(t, kc, replicaArgs(h, t, ns, "a", t.TempDir())...)
	leaderOf(t, 30*time.Second, a)
	w := startWriters(t, env, ns, 20*time.Millisecond, 0)
	w.waitWrites(t, 20)
	b := startFieldwatch(t, kc, replicaArgs(h, t, ns, "b", t.TempDir())...)
	testenv.Eventually(t, 30*time.Second, "the new standby to follow the leader", func() bool {
		return b.metric("fieldwatch_baseline_confirmed_total") > still
	})
	w.waitWrites(t, 20) // mid-stream
	killed := time.Now()
	a.kill()
	testenv.Eventually(t, 30*time.Second, "b to take over", func() bool { return b.metric("fieldwatch_leader ") == 1 })
	t.Logf("b took over %s after the kill, firing %v changes", time.Since(killed).Round(10*time.Millisecond),
		b.metric("fieldwatch_baseline_takeover_changes_total"))
	w.waitWrites(t, 20) // made after the takeover
	w.finish()
	o := settle(t, h, w, time.Minute)
	flood := 0
	for _, p := range h.payloads() {
		if p.replica == "b" && strings.HasPrefix(p.name, "still-") {
			flood++
			t.Errorf("b reported %s %s %s, which did not change", p.typ, p.kind, p.name)
		}
	}
	t.Logf("fresh standby: %s; %d payloads about unchanged objects", o, flood)
}

// TestFailoverKillRestartLoop is a StatefulSet's pod coming back under
// its name: twenty times, the leader of two replicas is SIGKILLed while
// ConfigMaps and Widgets are created, updated and deleted, and started
// again with the same identity and state directory, at once (every fifth
// round only once the other replica leads). Each time the other replica
// acquires the Lease within the lease duration and a retry period of the
// kill (the returning one, once it sees its previous process's Lease
// unrenewed, releases it for the other), and in the end every change made
// was delivered by one replica or the other; duplicates carry equal ids.
func TestFailoverKillRestartLoop(t *testing.T) {
	t.Parallel()
	const (
		rounds = 20
		// fastLease's lease duration and retry period, and the time a
		// Lease read and write take on a loaded machine (this test runs
		// beside the others).
		bound = 3*time.Second + 500*time.Millisecond + time.Second
	)
	env := testenv.Shared(t)
	ns := namespace(t, env, "failover-loop")
	kc := env.WriteKubeconfig(t)
	leases := env.Clientset(t).CoordinationV1().Leases(ns)
	h := newHooks(t)
	dirs := map[string]string{"a": t.TempDir(), "b": t.TempDir()}
	reps := map[string]*proc{}
	for _, name := range []string{"a", "b"} {
		reps[name] = startFieldwatch(t, kc, replicaArgs(h, t, ns, name, dirs[name])...)
	}
	w := startWriters(t, env, ns, 20*time.Millisecond, 0)
	var takeovers []time.Duration
	handovers := 0
	for round := range rounds {
		for name, p := range reps {
			select {
			case <-p.done:
				// It handed the Lease over to the other (which held
				// writes it never saw) and exited: start it again,
				// as the kubelet does.
				handovers++
				reps[name] = launch(t, kc, replicaArgs(h, t, ns, name, dirs[name])...)
			default:
			}
		}
		leader := leaderOf(t, 30*time.Second, reps["a"], reps["b"])
		name, other := "a", "b"
		if leader == reps["b"] {
			name, other = "b", "a"
		}
		standby := reps[other]
		testenv.Eventually(t, 30*time.Second, "the standby to follow the leader", func() bool {
			return standby.metric("fieldwatch_baseline_confirmed_total") > 0
		})
		w.waitWrites(t, 25) // mid-stream
		killed := time.Now()
		leader.kill()
		late := round%5 == 4
		var back *proc
		if !late {
			back = launch(t, kc, replicaArgs(h, t, ns, name, dirs[name])...)
		}
		handedOver := false
		testenv.Eventually(t, 30*time.Second, other+" to lead", func() bool {
			select {
			case <-standby.done:
				handedOver = true // it led, and handed over to the returning one
				return true
			default:
			}
			if back != nil && back.metric("fieldwatch_leader ") == 1 {
				t.Fatalf("round %d: %s, started again, took the Lease instead of %s", round+1, name, other)
			}
			return standby.metric("fieldwatch_leader ") == 1
		})
		if handedOver {
			t.Logf("round %d: killed %s; %s took over with a gap and handed the Lease over to %s", round+1, name, other, name)
			if back == nil {
				back = launch(t, kc, replicaArgs(h, t, ns, name, dirs[name])...)
			}
			reps[name] = back
			continue
		}
		lease, err := leases.Get(context.Background(), "fw", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		took := lease.Spec.AcquireTime.Sub(killed)
		if !strings.HasPrefix(*lease.Spec.HolderIdentity, other+"_") || took > bound {
			t.Errorf("round %d: %s acquired the Lease %s after the kill (holder %s), want %s within %s",
				round+1, other, took.Round(10*time.Millisecond), *lease.Spec.HolderIdentity, other, bound)
		}
		takeovers = append(takeovers, took.Round(10*time.Millisecond))
		t.Logf("round %d: killed %s (started again %s); %s acquired the Lease %s later", round+1, name,
			map[bool]string{false: "at once", true: "after the takeover"}[late], other, took.Round(10*time.Millisecond))
		if late {
			back = launch(t, kc, replicaArgs(h, t, ns, name, dirs[name])...)
		}
		reps[name] = back // the next round waits until it follows
	}
	w.waitWrites(t, 50) // under the last round's leader
	w.finish()
	o := settle(t, h, w, time.Minute)
	slices.Sort(takeovers)
	t.Logf("SIGKILL and restart x%d: %s; Lease acquired after the kill: min %s, median %s, max %s; %d handovers to a standby holding writes of the leader's gap",
		rounds, o, takeovers[0], takeovers[len(takeovers)/2], takeovers[len(takeovers)-1], handovers)
}

// TestFailoverGap: a replica takes over whose watch began after the last
// writes its predecessor confirmed (it started on a new volume while the
// leader's receiver failed, so that the leader's watermark stood still),
// and the predecessor comes back under its name and replays those writes
// from its baseline. The new leader never received them: it publishes the
// gap, the returning replica keeps them instead of taking the watermark
// for a confirmation, claims the Lease, and the leader hands it over; the
// returning replica delivers them, the deletions of objects the new
// leader never saw included. Nothing is lost; duplicates carry equal ids.
func TestFailoverGap(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	ns := namespace(t, env, "failover-gap")
	kc := env.WriteKubeconfig(t)
	h := newHooks(t)
	dirA := t.TempDir()
	a := startFieldwatch(t, kc, replicaArgs(h, t, ns, "a", dirA)...)
	leaderOf(t, 30*time.Second, a)
	w := startWriters(t, env, ns, 20*time.Millisecond, 0)
	b := startFieldwatch(t, kc, replicaArgs(h, t, ns, "b", t.TempDir())...)
	testenv.Eventually(t, 30*time.Second, "b to follow a", func() bool {
		return b.metric("fieldwatch_baseline_confirmed_total") > 0
	})

	// a's receiver fails: its watermark stands still while writes go on.
	h.fail("a", true)
	w.waitWrites(t, 100)
	b.kill()
	dirB := t.TempDir() // a new volume: b's watch begins now
	b = startFieldwatch(t, kc, replicaArgs(h, t, ns, "b", dirB)...)
	w.waitWrites(t, 50) // under b's new watch
	a.kill()
	h.fail("a", false)
	a = startFieldwatch(t, kc, replicaArgs(h, t, ns, "a", dirA)...)

	// b takes over with a gap, a claims the Lease, b hands it over.
	if code := b.waitExit(60 * time.Second); code != 1 {
		t.Fatalf("b exited with %d, want 1 (handed over, to start again as a standby)", code)
	}
	testenv.Eventually(t, 30*time.Second, "a to lead", func() bool { return a.metric("fieldwatch_leader ") == 1 })
	t.Logf("b took over, handed the Lease to a; a fired %v changes at its takeover", a.metric("fieldwatch_baseline_takeover_changes_total"))
	argsB := replicaArgs(h, t, ns, "b", dirB)
	b = startFieldwatch(t, kc, argsB...)
	// From here on both replicas run as their Deployment keeps them: a
	// leader starved of CPU by the tests beside this one may lose its
	// Lease and exit, to be started again.
	sa := supervise(t, kc, "a", a, replicaArgs(h, t, ns, "a", dirA))
	sb := supervise(t, kc, "b", b, argsB)
	w.waitWrites(t, 50)
	w.finish()
	o := settle(t, h, w, time.Minute)
	stillLeads := sa.proc().metric("fieldwatch_leader ") == 1
	exitsA, exitsB := sa.stop(), sb.stop()
	switch restarts := len(exitsA) + len(exitsB); {
	case restarts == 0 && !stillLeads:
		t.Error("a no longer leads and no replica exited: the Lease went back and forth")
	case restarts > 4:
		t.Errorf("replicas restarted %d times (a %v, b %v exit codes) while the changes settled: the Lease went back and forth", restarts, exitsA, exitsB)
	case restarts > 0:
		t.Logf("replicas restarted while the changes settled (a %v, b %v exit codes): a leader missed its renewals; nothing was lost", exitsA, exitsB)
	}
	t.Logf("gap: %s", o)
}
