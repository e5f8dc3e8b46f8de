//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fwpayload "github.com/fieldwatch/fieldwatch/payload"
)

// payload is a payload a pod's log action wrote on its stdout, read back
// through the apiserver's pod log API.
type payload struct {
	fwpayload.Payload

	pod       string    // the pod that wrote it
	container string    // the container (ID) that wrote it
	at        time.Time // when the kubelet logged it
}

// logLine is a line of a pod's log.
type logLine struct {
	pod, container string
	at             time.Time
	text           string
}

// podLogs follows the logs of the StatefulSet's pods through the
// apiserver (what `kubectl logs -f` reads), across container restarts and
// pods that are deleted and come back under their name, until stopped.
type podLogs struct {
	c      *cluster
	mu     sync.Mutex
	lines  []logLine
	seen   map[string]bool // container, time and text of every line kept
	cancel context.CancelFunc
	done   sync.WaitGroup
}

// followLogs starts following the pods fieldwatch-0 .. fieldwatch-N-1
// from now on and stops when the test ends.
func (c *cluster) followLogs(t testing.TB) *podLogs {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &podLogs{c: c, seen: map[string]bool{}, cancel: cancel}
	since := metav1.NewTime(time.Now().Add(-time.Second))
	for i := range int(*c.statefulSet(t).Spec.Replicas) {
		name := fmt.Sprintf("%s-%d", statefulName, i)
		l.done.Go(func() { l.follow(ctx, name, since) })
	}
	t.Cleanup(l.stop)
	return l
}

func (l *podLogs) stop() {
	l.cancel()
	l.done.Wait()
}

// follow streams pod name's log from since on, reconnecting when the
// stream ends (a container that exits, a pod that is replaced); a
// container that restarted while no stream read it is read with
// previous=true first.
func (l *podLogs) follow(ctx context.Context, name string, since metav1.Time) {
	pods := l.c.cs.CoreV1().Pods(namespace)
	var lastUID string
	var lastRestarts int32
	for ctx.Err() == nil {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		st := containerStatus(p)
		if err != nil || st == nil || (st.State.Running == nil && st.State.Terminated == nil) {
			sleep(ctx, 200*time.Millisecond)
			continue
		}
		if string(p.UID) == lastUID && st.RestartCount > lastRestarts && st.LastTerminationState.Terminated != nil {
			l.read(ctx, name, st.LastTerminationState.Terminated.ContainerID, &corev1.PodLogOptions{Container: container, Previous: true, Timestamps: true, SinceTime: &since})
		}
		lastUID, lastRestarts = string(p.UID), st.RestartCount
		last := l.read(ctx, name, st.ContainerID, &corev1.PodLogOptions{Container: container, Follow: true, Timestamps: true, SinceTime: &since})
		if !last.IsZero() {
			since = metav1.NewTime(last)
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

func containerStatus(p *corev1.Pod) *corev1.ContainerStatus {
	if p == nil {
		return nil
	}
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == container {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// read reads one log stream to its end and returns the time of its last
// line.
func (l *podLogs) read(ctx context.Context, pod, containerID string, opts *corev1.PodLogOptions) time.Time {
	rc, err := l.c.cs.CoreV1().Pods(namespace).GetLogs(pod, opts).Stream(ctx)
	if err != nil {
		return time.Time{}
	}
	defer func() { _ = rc.Close() }()
	var last time.Time
	s := bufio.NewScanner(rc)
	s.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for s.Scan() {
		stamp, text, ok := strings.Cut(s.Text(), " ")
		if !ok {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, stamp)
		if err != nil {
			continue
		}
		last = at
		key := stamp + " " + text
		l.mu.Lock()
		if !l.seen[key] {
			l.seen[key] = true
			l.lines = append(l.lines, logLine{pod: pod, container: shortID(containerID), at: at, text: text})
		}
		l.mu.Unlock()
	}
	return last
}

func shortID(id string) string {
	_, id, _ = strings.Cut(id, "://")
	return id[:min(12, len(id))]
}

// all returns the lines read so far, in the order read.
func (l *podLogs) all() []logLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}

// payloads returns the payloads the pods logged, of every rule or of the
// rules named.
func (l *podLogs) payloads(rules ...string) []payload {
	var ps []payload
	for _, line := range l.all() {
		p, ok := parsePayload(line)
		if ok && (len(rules) == 0 || slices.Contains(rules, p.Rule)) {
			ps = append(ps, p)
		}
	}
	return ps
}

// parsePayload reads a payload from a log line: a JSON object with an id
// and a rule (fieldwatch's own log lines have a level and a msg instead).
func parsePayload(line logLine) (payload, bool) {
	if !strings.HasPrefix(line.text, `{"id":`) {
		return payload{}, false
	}
	var p payload
	if err := json.Unmarshal([]byte(line.text), &p); err != nil || p.Rule == "" {
		return payload{}, false
	}
	p.pod, p.container, p.at = line.pod, line.container, line.at
	return p, true
}

// logged returns the lines of pod's log (any container) holding all of
// the words.
func (l *podLogs) logged(pod string, words ...string) []logLine {
	var got []logLine
	for _, line := range l.all() {
		if line.pod != pod {
			continue
		}
		all := true
		for _, w := range words {
			all = all && strings.Contains(line.text, w)
		}
		if all {
			got = append(got, line)
		}
	}
	return got
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// checkNoErrors fails the test for every error the pods logged while
// followed.
func (l *podLogs) checkNoErrors(t testing.TB) {
	t.Helper()
	var errs []string
	for _, line := range l.all() {
		if strings.Contains(line.text, `"level":"ERROR"`) {
			errs = append(errs, line.pod+": "+line.text)
		}
	}
	if len(errs) > 0 {
		t.Errorf("the pods logged %d errors, first %d:\n  %s", len(errs), min(5, len(errs)), strings.Join(errs[:min(5, len(errs))], "\n  "))
	}
}
