//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
	fwpayload "github.com/fieldwatch/fieldwatch/payload"
)

// install is an installed release: its namespace and full name (that of
// its StatefulSet, ServiceAccount and ClusterRole).
type install struct {
	ns, fullname string
}

// pods returns the release's pods.
func (in install) pods(t testing.TB) []corev1.Pod {
	t.Helper()
	l, err := c.cs.CoreV1().Pods(in.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=fieldwatch"})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

func (in install) pod(t testing.TB, name string) *corev1.Pod {
	t.Helper()
	p, err := c.cs.CoreV1().Pods(in.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (in install) statefulSet(t testing.TB) *appsv1.StatefulSet {
	t.Helper()
	sts, err := c.cs.AppsV1().StatefulSets(in.ns).Get(context.Background(), in.fullname, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return sts
}

// ready reports whether a pod runs with every container ready.
func ready(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return false
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitRolledOut waits until the StatefulSet's pods all run its current
// revision and are ready.
func (in install) waitRolledOut(t testing.TB, timeout time.Duration) {
	t.Helper()
	var last string
	if !poll(timeout, func() bool {
		sts := in.statefulSet(t)
		want := *sts.Spec.Replicas
		s := sts.Status
		last = fmt.Sprintf("generation %d observed %d, replicas %d ready %d updated %d, revision %s update %s",
			sts.Generation, s.ObservedGeneration, s.Replicas, s.ReadyReplicas, s.UpdatedReplicas, s.CurrentRevision, s.UpdateRevision)
		if s.ObservedGeneration < sts.Generation || s.ReadyReplicas != want || s.UpdatedReplicas != want || s.CurrentRevision != s.UpdateRevision {
			return false
		}
		n := 0
		for _, p := range in.pods(t) {
			if ready(&p) && p.Labels[appsv1.StatefulSetRevisionLabel] == s.UpdateRevision {
				n++
			}
		}
		return n == int(want)
	}) {
		in.describePods(t)
		t.Fatalf("the StatefulSet did not roll out within %s: %s", timeout, last)
	}
}

// describePods logs the pods' state and recent events, for a failure.
func (in install) describePods(t testing.TB) {
	t.Helper()
	for _, p := range in.pods(t) {
		t.Logf("pod %s: phase %s, conditions %v", p.Name, p.Status.Phase, p.Status.Conditions)
		for _, s := range p.Status.ContainerStatuses {
			t.Logf("  container %s: ready %v, restarts %d, state %+v, last %+v", s.Name, s.Ready, s.RestartCount, s.State, s.LastTerminationState)
		}
	}
	ev, err := c.cs.CoreV1().Events(in.ns).List(context.Background(), metav1.ListOptions{})
	if err == nil {
		for _, e := range ev.Items[max(0, len(ev.Items)-20):] {
			t.Logf("event %s %s/%s: %s: %s", e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
}

// leader returns the name of the ready pod that holds the Lease (named
// after the release's full name).
func (in install) leader(t testing.TB) string {
	t.Helper()
	var holder string
	if !poll(2*time.Minute, func() bool {
		l, err := c.cs.CoordinationV1().Leases(in.ns).Get(context.Background(), in.fullname, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			return false
		}
		// The holder is the replica's name (the pod's) and its process's
		// ID: <pod>_<uuid>.
		holder = *l.Spec.HolderIdentity
		if i := strings.LastIndexByte(holder, '_'); i > 0 {
			holder = holder[:i]
		}
		p, err := c.cs.CoreV1().Pods(in.ns).Get(context.Background(), holder, metav1.GetOptions{})
		return err == nil && ready(p)
	}) {
		t.Fatalf("no ready pod of %s/%s holds Lease %s within 2 minutes (holder %q)", in.ns, in.fullname, in.fullname, holder)
	}
	return holder
}

// metric returns the sum of the samples of a metric (a name and the
// start of its labels) in a pod's /metrics, scraped on its address over
// the cluster's bridge.
func (in install) metric(t testing.TB, pod, series string) float64 {
	t.Helper()
	p := in.pod(t, pod)
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(fmt.Sprintf("http://%s:8080/metrics", p.Status.PodIP))
	if err != nil {
		t.Fatalf("metrics of %s: %v", pod, err)
	}
	defer func() { _ = resp.Body.Close() }()
	page, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("metrics of %s: %s %v", pod, resp.Status, err)
	}
	var sum float64
	for line := range strings.Lines(string(page)) {
		if f := strings.Fields(line); strings.HasPrefix(line, series) && len(f) > 1 {
			var v float64
			if _, err := fmt.Sscan(f[len(f)-1], &v); err == nil {
				sum += v
			}
		}
	}
	return sum
}

// log returns a pod's log as kubectl logs does.
func (in install) log(t testing.TB, pod string) string {
	t.Helper()
	data, err := c.cs.CoreV1().Pods(in.ns).GetLogs(pod, &corev1.PodLogOptions{Container: container}).DoRaw(context.Background())
	if err != nil {
		t.Fatalf("logs of %s: %v", pod, err)
	}
	return string(data)
}

// logTail logs the last lines of a pod's log, and of its container's
// previous run when it restarted, for a failure.
func (in install) logTail(t testing.TB, pod string) {
	t.Helper()
	for _, previous := range []bool{false, true} {
		tail := int64(40)
		data, err := c.cs.CoreV1().Pods(in.ns).GetLogs(pod, &corev1.PodLogOptions{Container: container, Previous: previous, TailLines: &tail}).DoRaw(context.Background())
		switch {
		case err != nil && previous:
			continue // it did not restart
		case err != nil:
			t.Logf("logs of %s: %v", pod, err)
			continue
		}
		t.Logf("%s's log (previous run %v), last lines:\n%s", pod, previous, data)
	}
}

// payloadsOf returns the payloads a pod's log holds now.
func (in install) payloadsOf(t testing.TB, pod string) []payload {
	t.Helper()
	var ps []payload
	for line := range strings.Lines(in.log(t, pod)) {
		if p, ok := parsePayload(testenv.LogLine{Pod: pod, Text: strings.TrimSpace(line)}); ok {
			ps = append(ps, p)
		}
	}
	return ps
}

// payload is a payload a pod's log action wrote on its stdout.
type payload struct {
	fwpayload.Payload

	pod string // the pod that wrote it
}

// parsePayload reads a payload from a log line: a JSON object with an id
// and a rule (fieldwatch's own log lines have a level and a msg instead).
func parsePayload(line testenv.LogLine) (payload, bool) {
	if !strings.HasPrefix(line.Text, `{"id":`) {
		return payload{}, false
	}
	var p payload
	if err := json.Unmarshal([]byte(line.Text), &p); err != nil || p.Rule == "" {
		return payload{}, false
	}
	p.pod = line.Pod
	return p, true
}

// podLogs follows the logs of a release's pods (testenv.PodLogs) and
// reads the payloads in them.
type podLogs struct{ *testenv.PodLogs }

// followLogs follows the pods <fullname>-0 .. -N-1 from now on.
func (in install) followLogs(t testing.TB) podLogs {
	t.Helper()
	var names []string
	for i := range int(*in.statefulSet(t).Spec.Replicas) {
		names = append(names, fmt.Sprintf("%s-%d", in.fullname, i))
	}
	return podLogs{testenv.FollowPodLogs(t, c.cs, in.ns, container, names...)}
}

// payloads returns the payloads of rule the pods logged.
func (l podLogs) payloads(rule string) []payload {
	var ps []payload
	for _, line := range l.Lines() {
		if p, ok := parsePayload(line); ok && p.Rule == rule {
			ps = append(ps, p)
		}
	}
	return ps
}

// containerOf returns the fieldwatch container's status.
func containerOf(p *corev1.Pod) *corev1.ContainerStatus {
	i := slices.IndexFunc(p.Status.ContainerStatuses, func(s corev1.ContainerStatus) bool { return s.Name == container })
	if i < 0 {
		return nil
	}
	return &p.Status.ContainerStatuses[i]
}
