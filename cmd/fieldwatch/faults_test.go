package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// The fault tests (TestFault*, make faults) fail a part around a
// running fieldwatch under a steady stream of changes (ConfigMaps and
// Widgets written every 20 ms each) and end with losscheck's comparison
// of every write with what was delivered.

// TestFaultAPIServerRestartCompaction cuts fieldwatch off the apiserver
// while writes go on, compacts etcd past its watch and restarts the
// apiserver (its watch cache gone too), then lets fieldwatch back in: its
// watches get 410 Gone and relist. Nothing is missed, nothing is
// delivered twice under different ids, and the net effects of the gap
// say "observed":"relist".
func TestFaultAPIServerRestartCompaction(t *testing.T) {
	t.Parallel()
	env := testenv.Start(t, testenv.Options{APIServerArgs: map[string][]string{"watch-cache-sizes": {"configmaps#0"}}})
	ns := namespace(t, env, "fault-apiserver")
	kc := env.WriteKubeconfig(t)
	px := testenv.NewProxy(t, apiserverAddr(t, kc))
	h := newHooks(t)
	startFieldwatch(t, kubeconfigVia(t, kc, px.Addr()), "--rules", h.rules(t, ns, "a"))
	// Objects live 30 s at least: one created and deleted in the gap is
	// seen by no one, and its net effect is nothing.
	w := startWriters(t, env, ns, 20*time.Millisecond, 30*time.Second)
	w.waitWrites(t, 50)
	px.Cut()
	w.waitWrites(t, 100) // the gap
	if _, err := env.CompactEtcd(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := env.RestartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	w.waitWrites(t, 20)
	px.Restore()
	w.waitWrites(t, 100)
	w.finish()
	o := settle(t, h, w, 2*time.Minute)
	relisted := h.relisted()
	t.Logf("apiserver restarted, etcd compacted: %s; %d payloads observed by a relist", o, relisted)
	if relisted == 0 {
		t.Error("no payload says observed relist: the gap's writes cannot all have come from watch events")
	}
}

// TestFaultAPIServerPacketLoss drops every packet between the leader and
// the apiserver for 20 s (a proxy that stalls: connections stay open and
// carry nothing) while the other replica reaches it. The leader stops
// delivering before the other takes over (no split brain) and exits to
// start again as a standby; no change is delivered under two ids, none
// is lost.
func TestFaultAPIServerPacketLoss(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	ns := namespace(t, env, "fault-packet-loss")
	kc := env.WriteKubeconfig(t)
	px := testenv.NewProxy(t, apiserverAddr(t, kc))
	kcA := kubeconfigVia(t, kc, px.Addr())
	h := newHooks(t)
	argsA, argsB := replicaArgs(h, t, ns, "a", t.TempDir()), replicaArgs(h, t, ns, "b", t.TempDir())
	a := startFieldwatch(t, kcA, argsA...)
	leaderOf(t, 30*time.Second, a)
	w := startWriters(t, env, ns, 20*time.Millisecond, 0)
	b := startFieldwatch(t, kc, argsB...)
	// Both run as their Deployment keeps them: a replica that exits (a
	// on losing its Lease; either when starved of CPU by the tests
	// beside this one) is started again.
	sa, sb := supervise(t, kcA, "a", a, argsA), supervise(t, kc, "b", b, argsB)
	testenv.Eventually(t, 30*time.Second, "the standby to follow the leader", func() bool {
		return sb.proc().metric("fieldwatch_baseline_confirmed_total") > 0
	})
	w.waitWrites(t, 20)
	px.Stall()
	stalled := time.Now()
	testenv.Eventually(t, 30*time.Second, "b to take over", func() bool { return sb.proc().metric("fieldwatch_leader ") == 1 })
	tookOver := time.Now()
	testenv.Eventually(t, time.Minute, "20 s of dropped packets", func() bool { return time.Since(stalled) >= 20*time.Second })
	px.Resume()
	resumed := time.Now()
	w.waitWrites(t, 50)
	w.finish()
	o := settle(t, h, w, time.Minute)
	exitsA, exitsB := sa.stop(), sb.stop()
	if !slices.Contains(exitsA, 1) {
		t.Errorf("a's exit codes %v: want 1, a leader that lost its Lease exiting to start again as a standby", exitsA)
	}

	var lastA, firstB time.Time // of the stall
	for _, p := range h.payloads() {
		switch {
		case p.replica == "a" && p.at.After(stalled) && p.at.Before(resumed) && p.at.After(lastA):
			lastA = p.at
		case p.replica == "b" && (firstB.IsZero() || p.at.Before(firstB)):
			firstB = p.at
		}
	}
	aStalled := "none"
	if !lastA.IsZero() {
		aStalled = "the last " + lastA.Sub(stalled).Round(time.Millisecond).String() + " after it"
	}
	t.Logf("20 s of dropped packets: %s; a's deliveries during the stall: %s; b took over %s after it, first delivered %s after it; exit codes a %v, b %v",
		o, aStalled, tookOver.Sub(stalled).Round(time.Millisecond), firstB.Sub(stalled).Round(time.Millisecond), exitsA, exitsB)
	if !lastA.IsZero() && !lastA.Before(firstB) {
		t.Errorf("a delivered at %s, cut off, after b's first delivery at %s: both led at once", lastA.Format("15:04:05.000"), firstB.Format("15:04:05.000"))
	}
}

// TestFaultStateVolumeFull fills the state volume (a 16 MiB tmpfs) of a
// running fieldwatch: the baseline stops growing (a commit that needs
// the file to grow fails), with a log line and
// fieldwatch_baseline_write_errors_total; delivery goes on; once there is
// room again the writes kept meanwhile are committed (no pending write
// left) and a restart on the volume fires nothing it had handled.
func TestFaultStateVolumeFull(t *testing.T) {
	testenv.SkipShort(t, testenv.NeedsRoot)
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root (the project's machines and CI run as root)")
	}
	t.Parallel()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount a 16 MiB tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	state := filepath.Join(dir, "state")
	env := testenv.Shared(t)
	ns := namespace(t, env, "fault-volume-full")
	kc := env.WriteKubeconfig(t)
	h := newHooks(t)
	// Without the history, whose reserve given back on a full disk would
	// make room for the baseline (internal/history's tests fill its disk).
	fw := startFieldwatch(t, kc, "--rules", h.rules(t, ns, "a"), "--state-dir", state, "--history=false")
	w := startWriters(t, env, ns, 20*time.Millisecond, 0)
	w.waitWrites(t, 50)

	filler, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for {
		if _, err := filler.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill the volume: %v", err)
			}
			break
		}
	}
	_ = filler.Close()
	testenv.Eventually(t, time.Minute, "the baseline's commits to fail", func() bool {
		return fw.metric("fieldwatch_baseline_write_errors_total") > 0
	})
	w.waitWrites(t, 200) // on a full volume
	full := settle(t, h, w, time.Minute)
	// Commits that fit in the file's free pages still succeed: how many
	// wait depends on when the file must grow.
	pending := fw.metric("fieldwatch_baseline_pending_writes")
	if !strings.Contains(fw.logs(), "writing the baseline failed") {
		t.Error("no log line says the baseline cannot be written")
	}

	if err := os.Remove(filepath.Join(dir, "filler")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the baseline written again", func() bool {
		return strings.Contains(fw.logs(), "the baseline is written again")
	})
	w.waitWrites(t, 100)
	w.finish()
	o := settle(t, h, w, time.Minute)
	testenv.Eventually(t, 30*time.Second, "no write of the baseline waiting", func() bool {
		return fw.metric("fieldwatch_baseline_pending_writes") == 0
	})
	t.Logf("state volume full: while full %s, %v baseline writes waiting, %v failed commits; in all %s",
		full, pending, fw.metric("fieldwatch_baseline_write_errors_total"), o)

	// What was handled while the volume was full is in the baseline: a
	// restart on it fires nothing.
	fw.stop()
	before := len(h.payloads())
	startFieldwatch(t, kc, "--rules", h.rules(t, ns, "a"), "--state-dir", state, "--history=false")
	// A write after the restart: once it is delivered, what the restart
	// found to fire has been fired.
	_, err = env.Clientset(t).CoreV1().ConfigMaps(ns).Create(context.Background(),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "marker"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the write after the restart delivered", func() bool {
		return slices.ContainsFunc(h.payloads(), func(p hook) bool { return p.name == "marker" })
	})
	for _, p := range h.payloads()[before:] {
		if p.name != "marker" {
			t.Errorf("the restart fired %s %s %s: the baseline missed a change handled while the volume was full", p.typ, p.kind, p.name)
		}
	}
}

// TestFaultPostgresDuringFailover combines two faults: two replicas
// share one history in PostgreSQL; the server is stopped, the leader
// SIGKILLed while it is down, and the server started again once the
// standby has taken over and delivered on. Deliveries go on throughout
// (losscheck); once the server is back the history holds every payload
// delivered, once per id, as TestFailoverHistory asks of a failover
// alone: the killed leader's payloads of its last 2 s (after its last
// watermark) may be there as the new leader delivered them, with the
// same id or as a later state of the object. Nothing is counted failed
// or dropped from the history.
func TestFaultPostgresDuringFailover(t *testing.T) {
	testenv.SkipShort(t, testenv.NeedsPostgres)
	t.Parallel()
	pg, err := testenv.NewDurablePostgres()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pg.Stop(); err != nil {
			t.Error(err)
		}
	})
	if err := pg.CreateDatabase(context.Background(), "fw"); err != nil {
		t.Fatal(err)
	}
	dsn := pg.DSN("fw")
	env := testenv.Shared(t)
	ns := namespace(t, env, "fault-pg-failover")
	kc := env.WriteKubeconfig(t)
	h := newHooks(t)
	// The replicas run as their Deployment keeps them: one that exits
	// (starved of CPU by the tests beside this one) is started again.
	sups := map[string]*supervisor{}
	for _, name := range []string{"a", "b"} {
		args := append(replicaArgs(h, t, ns, name, t.TempDir()), "--history-dsn", dsn)
		sups[name] = supervise(t, kc, name, startFieldwatch(t, kc, args...), args)
	}
	w := startWriters(t, env, ns, 30*time.Millisecond, 0)
	leader := leaderOf(t, 30*time.Second, sups["a"].proc(), sups["b"].proc())
	name, other := "a", "b"
	if leader == sups["b"].proc() {
		name, other = "b", "a"
	}
	standby := sups[other]
	testenv.Eventually(t, 30*time.Second, "the standby to record what the leader confirmed", func() bool {
		return standby.proc().metric(`fieldwatch_history_entries_total{result="written"}`) > 20
	})
	w.waitWrites(t, 30)
	if err := pg.Shutdown(); err != nil {
		t.Fatal(err)
	}
	w.waitWrites(t, 10) // delivered, not recorded
	killedAt := time.Now()
	sups[name].kill() // and it stays down: restarted, it would wait for the history's server
	testenv.Eventually(t, 30*time.Second, "the standby to take over", func() bool { return standby.proc().metric("fieldwatch_leader ") == 1 })
	w.waitWrites(t, 60) // under the new leader, the history's server down
	// Longer than the 8 tries a write that reaches the server gets.
	testenv.Eventually(t, 2*time.Minute, "the new leader to find the server gone 9 times", func() bool {
		return standby.proc().metric(`fieldwatch_history_write_errors_total{error="unavailable"}`) >= 9
	})
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	w.waitWrites(t, 30)
	w.finish()
	o := settle(t, h, w, time.Minute)

	confirmedBefore := killedAt.Add(-2 * time.Second)
	var got map[string]string
	var missing []string
	late, covered := 0, 0
	testenv.Poll(time.Minute, func() bool {
		got = historyFrom(t, "--dsn", dsn)
		missing, late, covered = missing[:0], 0, 0
		for _, p := range h.payloads() {
			if _, ok := got[p.id]; ok {
				continue
			}
			if p.replica != name || !p.at.After(confirmedBefore) || p.at.After(killedAt) {
				missing = append(missing, fmt.Sprintf("%s (%s %s/%s, delivered by %s at %s)", p.id, p.typ, p.kind, p.name, p.replica, p.at.Format("15:04:05.000")))
				continue
			}
			late++
			if slices.ContainsFunc(h.payloads(), func(q hook) bool {
				_, ok := got[q.id]
				return ok && q.uid == p.uid && q.replica == other
			}) {
				covered++
			}
		}
		return len(missing) == 0 && late == covered
	})
	if len(missing) > 0 {
		t.Errorf("%d of %d delivered payloads are not in the shared history (killed %s at %s), first:\n  %s", len(missing), len(h.payloads()), name,
			killedAt.Format("15:04:05.000"), strings.Join(missing[:min(20, len(missing))], "\n  "))
	}
	if late != covered {
		t.Errorf("%d payloads of the killed leader's last 2 s are neither in the history nor followed there by the object's later state (%d are)", late-covered, covered)
	}
	unavailable := standby.proc().metric(`fieldwatch_history_write_errors_total{error="unavailable"}`)
	for _, m := range []string{`fieldwatch_history_entries_total{result="failed"}`, `fieldwatch_history_entries_total{result="dropped"}`} {
		if v := standby.proc().metric(m); v != 0 {
			t.Errorf("%s %v on the new leader, want 0", m, v)
		}
	}
	exitsA, exitsB := sups["a"].stop(), sups["b"].stop()
	t.Logf("PostgreSQL down during a failover: %s; the history holds %d entries, %d of the killed leader's last payloads as a later state; the new leader found the server gone %v times; exit codes a %v, b %v",
		o, len(got), late, unavailable, exitsA, exitsB)
}
