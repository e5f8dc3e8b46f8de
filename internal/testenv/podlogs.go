package testenv

import (
	"bufio"
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// LogLine is a line of a pod's log, as the apiserver's pod log API gives
// it with timestamps.
type LogLine struct {
	Pod string
	// Container is the first 12 characters of the container's ID: a
	// container restarted in the same pod has another.
	Container string
	At        time.Time
	Text      string
}

// PodLogs follows one container's log in pods through the apiserver (what
// `kubectl logs -f` reads), across container restarts and pods deleted
// and created again under their name, until stopped: the end-to-end tests
// read the payloads and errors the pods logged from it.
type PodLogs struct {
	pods      corev1client.PodInterface
	container string
	mu        sync.Mutex
	lines     []LogLine
	seen      map[string]bool // pod, time and text of every line kept
	cancel    context.CancelFunc
	done      sync.WaitGroup
}

// FollowPodLogs starts following container in the pods of namespace ns
// named pods, from a second ago on, and stops when the test ends. A
// container that restarted while no stream read it is read with
// previous=true first.
func FollowPodLogs(t testing.TB, cs kubernetes.Interface, ns, container string, pods ...string) *PodLogs {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &PodLogs{pods: cs.CoreV1().Pods(ns), container: container, seen: map[string]bool{}, cancel: cancel}
	since := metav1.NewTime(time.Now().Add(-time.Second))
	for _, name := range pods {
		l.done.Go(func() { l.follow(ctx, name, since) })
	}
	t.Cleanup(l.Stop)
	return l
}

// Stop stops following and waits until every stream is closed.
func (l *PodLogs) Stop() {
	l.cancel()
	l.done.Wait()
}

// follow streams pod name's log from since on, reconnecting when the
// stream ends (a container that exits, a pod that is replaced).
func (l *PodLogs) follow(ctx context.Context, name string, since metav1.Time) {
	var lastUID string
	var lastRestarts int32
	for ctx.Err() == nil {
		p, err := l.pods.Get(ctx, name, metav1.GetOptions{})
		st := l.status(p)
		if err != nil || st == nil || (st.State.Running == nil && st.State.Terminated == nil) {
			pause(ctx, 200*time.Millisecond)
			continue
		}
		if string(p.UID) == lastUID && st.RestartCount > lastRestarts && st.LastTerminationState.Terminated != nil {
			l.read(ctx, name, st.LastTerminationState.Terminated.ContainerID, &corev1.PodLogOptions{Container: l.container, Previous: true, Timestamps: true, SinceTime: &since})
		}
		lastUID, lastRestarts = string(p.UID), st.RestartCount
		last := l.read(ctx, name, st.ContainerID, &corev1.PodLogOptions{Container: l.container, Follow: true, Timestamps: true, SinceTime: &since})
		if !last.IsZero() {
			since = metav1.NewTime(last)
		}
		pause(ctx, 100*time.Millisecond)
	}
}

// status returns the followed container's status in p, or nil.
func (l *PodLogs) status(p *corev1.Pod) *corev1.ContainerStatus {
	if p == nil {
		return nil
	}
	i := slices.IndexFunc(p.Status.ContainerStatuses, func(s corev1.ContainerStatus) bool { return s.Name == l.container })
	if i < 0 {
		return nil
	}
	return &p.Status.ContainerStatuses[i]
}

// read reads one log stream to its end and returns the time of its last
// line. A stream read again from the time of its last line gives that
// line again: it is kept once.
func (l *PodLogs) read(ctx context.Context, pod, containerID string, opts *corev1.PodLogOptions) time.Time {
	rc, err := l.pods.GetLogs(pod, opts).Stream(ctx)
	if err != nil {
		return time.Time{}
	}
	defer func() { _ = rc.Close() }()
	_, id, _ := strings.Cut(containerID, "://")
	id = id[:min(12, len(id))]
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
		key := pod + " " + stamp + " " + text
		l.mu.Lock()
		if !l.seen[key] {
			l.seen[key] = true
			l.lines = append(l.lines, LogLine{Pod: pod, Container: id, At: at, Text: text})
		}
		l.mu.Unlock()
	}
	return last
}

// Lines returns the lines read so far, in the order read.
func (l *PodLogs) Lines() []LogLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}

// Logged returns the lines of pod's log (any container) holding all of
// the words.
func (l *PodLogs) Logged(pod string, words ...string) []LogLine {
	var got []LogLine
	for _, line := range l.Lines() {
		if line.Pod == pod && containsAll(line.Text, words) {
			got = append(got, line)
		}
	}
	return got
}

func containsAll(s string, words []string) bool {
	for _, w := range words {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}

// CheckNoErrors fails the test for every error the pods logged while
// followed (slog's JSON lines of level ERROR).
func (l *PodLogs) CheckNoErrors(t testing.TB) {
	t.Helper()
	var errs []string
	for _, line := range l.Lines() {
		if strings.Contains(line.Text, `"level":"ERROR"`) {
			errs = append(errs, line.Pod+": "+line.Text)
		}
	}
	if len(errs) > 0 {
		n := min(5, len(errs))
		t.Errorf("the pods logged %d errors, first %d:\n  %s", len(errs), n, strings.Join(errs[:n], "\n  "))
	}
}

// pause waits d or until ctx ends: the pace of a loop that reconnects.
func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
