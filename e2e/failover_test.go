//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// confirmWindow bounds how long before a leader went a change it delivered
// may be delivered again by the next: the leader confirms what it handled
// on its Lease at every renewal (deploy/'s retry period, 2 s), so a change
// delivered more than two renewals and a second before is confirmed.
const confirmWindow = 5 * time.Second

// claimVolume returns the volume bound to a pod's state claim.
func (c *cluster) claimVolume(t testing.TB, pod string) string {
	t.Helper()
	pvc, err := c.cs.CoreV1().PersistentVolumeClaims(namespace).Get(context.Background(), "state-"+pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pvc.Spec.VolumeName
}

// takeoverBound is how soon after a leader goes another replica must lead:
// deploy/'s lease duration (15 s) and retry period (2 s), with a second for
// reading the metrics that tell.
const takeoverBound = 18 * time.Second

// testLeaderPodDeleted deletes the leader's pod (kubectl delete pod) twice
// while a writer creates, updates and deletes Widgets every 50 ms: a ready
// replica leads again within the lease duration and a retry period, the
// deleted pod comes back under its name on its volume (and delivers
// nothing while it stands by), every change is delivered by one replica or
// another, duplicates carry equal ids, and nothing a leader had confirmed
// is delivered again.
func testLeaderPodDeleted(t *testing.T) {
	deployed(t)
	const ns = "e2e-failover"
	c.ensureNamespace(t, ns)
	logs := c.followLogs(t)
	w := testenv.StartWidgetWriters(t, ns, 50*time.Millisecond, testenv.WidgetWriter{Prefix: "w", Client: c.dyn})
	var deletions []time.Time
	for round := 1; round <= 2; round++ {
		leader := c.leader(t)
		volume := c.claimVolume(t, leader)
		w.WaitWrites(t, 40) // steady writes under this leader
		deleted := time.Now()
		oldUID := c.deletePod(t, leader)
		deletions = append(deletions, deleted)
		var next string
		if !poll(time.Minute, func() bool { next = c.leadingPod(t, oldUID); return next != "" }) {
			t.Fatalf("round %d: no replica led within a minute of %s's deletion", round, leader)
		}
		tookOver := time.Since(deleted)
		if tookOver > takeoverBound {
			t.Errorf("round %d: %s led %s after %s was deleted, beyond the lease duration and a retry period", round, next, tookOver, leader)
		}
		p := c.waitReplaced(t, leader, oldUID, 3*time.Minute)
		back := time.Since(deleted)
		if v := c.claimVolume(t, leader); v != volume {
			t.Errorf("round %d: %s came back on volume %s, not its own %s", round, leader, v, volume)
		}
		returned := shortID(containerStatus(p).ContainerID)
		if !poll(time.Minute, func() bool {
			data, err := c.cs.CoreV1().Pods(namespace).GetLogs(leader, &corev1.PodLogOptions{Container: container}).DoRaw(context.Background())
			if err != nil {
				return false
			}
			// It resumes from what its volume holds: the watermark it
			// recorded (or, without one, the baseline).
			for _, line := range splitLines(string(data)) {
				if strings.Contains(line, "widgets") && (strings.Contains(line, "since the previous run's watermark") ||
					strings.Contains(line, "comparing with the baseline of the previous run")) {
					return true
				}
			}
			return false
		}) {
			data, _ := c.cs.CoreV1().Pods(namespace).GetLogs(leader, &corev1.PodLogOptions{Container: container}).DoRaw(context.Background())
			t.Fatalf("round %d: %s (container %s) did not log its baseline from its volume:\n%s", round, leader, returned, tail(string(data), 15))
		}
		t.Logf("round %d: deleted the leader %s; %s led after %s; %s back and ready on its volume %s after %s",
			round, leader, next, tookOver.Round(100*time.Millisecond), leader, volume, back.Round(100*time.Millisecond))
		w.WaitWrites(t, 40) // writes go on
		if h := c.holder(); h != leader {
			for _, pl := range logs.payloads() {
				if pl.container == returned {
					t.Errorf("round %d: %s delivered %s while standing by", round, leader, pl.ID)
				}
			}
		} else {
			t.Logf("round %d: %s, back under its name, holds the Lease", round, leader)
		}
	}
	w.WaitWrites(t, 20)
	o := settle(t, logs, w, "crd-audit", 2*time.Minute)
	t.Logf("leader deleted twice: %s", o)
	checkConfirmedOnce(t, onlyOurs(logs.payloads("crd-audit"), w), deletions)
	logs.CheckNoErrors(t)
}

// checkConfirmedOnce fails for every payload delivered twice whose first
// delivery came more than confirmWindow before a leader went: the leader
// had confirmed it, and the next must not deliver it again.
func checkConfirmedOnce(t testing.TB, ps []payload, handovers []time.Time) {
	t.Helper()
	byID := map[string][]payload{}
	for _, p := range ps {
		byID[p.ID] = append(byID[p.ID], p)
	}
	again := 0
	for id, copies := range byID {
		if len(copies) < 2 {
			continue
		}
		again++
		slices.SortFunc(copies, func(a, b payload) int { return a.at.Compare(b.at) })
		first := copies[0]
		near := slices.ContainsFunc(handovers, func(h time.Time) bool {
			return !first.at.Before(h.Add(-confirmWindow)) && first.at.Before(h.Add(time.Minute))
		})
		if !near {
			t.Errorf("%s delivered %d times (first by %s at %s, again by %s at %s): it was confirmed before any handover",
				id, len(copies), first.pod, first.at.Format("15:04:05.000"), copies[1].pod, copies[1].at.Format("15:04:05.000"))
		}
	}
	t.Logf("%d changes delivered twice, all within %s before a handover", again, confirmWindow)
}

// testOOMKilled makes the leader's container exceed its memory limit
// while a writer changes Widgets: the kernel kills it (the kubelet reports
// OOMKilled), the kubelet restarts it in the same pod on the same volume,
// and no change is lost. The limit is lowered, on this machine, in the
// running container's memory cgroup to just above what it uses (the
// kubelet gives a restarted container a new cgroup with deploy/'s limit),
// and Widgets with large annotations make the next allocations exceed it.
func testOOMKilled(t *testing.T) {
	deployed(t)
	const ns = "e2e-oom"
	c.ensureNamespace(t, ns)
	logs := c.followLogs(t)
	w := testenv.StartWidgetWriters(t, ns, 50*time.Millisecond, testenv.WidgetWriter{Prefix: "w", Client: c.dyn})
	leader := c.leader(t)
	p := c.pod(t, leader)
	st := containerStatus(p)
	_, id, _ := strings.Cut(st.ContainerID, "://")
	cg := containerCgroup(t, "memory", p, id)
	w.WaitWrites(t, 40) // steady writes under this leader
	usage := readInt(t, filepath.Join(cg, "memory.usage_in_bytes"))
	limited := time.Now()
	// Just above what the container uses: the next allocations of the
	// writes it handles exceed it. A limit the kernel cannot reclaim
	// down to is refused (EBUSY): then a little higher.
	for extra := int64(1 << 20); ; extra *= 2 {
		err := os.WriteFile(filepath.Join(cg, "memory.limit_in_bytes"), []byte(strconv.FormatInt(usage+extra, 10)), 0o644)
		if err == nil {
			t.Logf("%s: memory limit %d MiB + %d KiB, in use %d MiB", leader, (usage+extra)>>20, ((usage+extra)>>10)%1024, usage>>20)
			break
		}
		if extra > 64<<20 {
			t.Fatalf("lower the memory limit of %s: %v", leader, err)
		}
	}
	// Widgets with a 200 KiB annotation make it allocate at once: it
	// caches them whole (the default rules have no fields) and logs
	// their changes. They are changes like the writer's: none may be lost.
	balloon := strings.Repeat("x", 200<<10)
	widgets := c.dyn.Resource(widgetsGVR).Namespace(ns)
	var reason string
	if !poll(2*time.Minute, func() bool {
		now := containerStatus(c.pod(t, leader))
		if now.RestartCount > st.RestartCount && now.LastTerminationState.Terminated != nil {
			reason = now.LastTerminationState.Terminated.Reason
			return true
		}
		name := fmt.Sprintf("balloon-%d", time.Now().UnixNano())
		o := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "example.com/v1", "kind": "Widget",
			"metadata": map[string]any{"name": name, "namespace": ns, "annotations": map[string]any{"e2e/balloon": balloon}},
			"spec":     map[string]any{"size": int64(1)},
		}}
		if created, err := widgets.Create(context.Background(), o, metav1.CreateOptions{}); err == nil {
			w.Record(testenv.Write{Type: "created", Name: name, UID: created.GetUID(), ResourceVersion: created.GetResourceVersion(), At: time.Now()})
		}
		return false
	}) {
		t.Fatalf("%s was not killed within 2 minutes of its limit lowered", leader)
	}
	killed := time.Since(limited)
	if reason != "OOMKilled" {
		t.Errorf("%s's container ended with %q, want OOMKilled", leader, reason)
	}
	var restarted time.Duration
	testenv.Eventually(t, 3*time.Minute, leader+" ready again", func() bool {
		got := c.pod(t, leader)
		restarted = time.Since(limited)
		return got.UID == p.UID && ready(got)
	})
	t.Logf("%s: killed (%s) %s after its limit was lowered, running and ready again in the same pod after %s; the Lease is %s's",
		leader, reason, killed.Round(100*time.Millisecond), restarted.Round(100*time.Millisecond), c.holder())
	w.WaitWrites(t, 50) // under the restarted container
	o := settle(t, logs, w, "crd-audit", 2*time.Minute)
	t.Logf("leader OOM-killed: %s", o)
}

func readInt(t testing.TB, path string) int64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		t.Fatal(fmt.Errorf("%s: %w", path, err))
	}
	return n
}
