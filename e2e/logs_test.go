//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/fieldwatch/fieldwatch/internal/losscheck"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
	fwpayload "github.com/fieldwatch/fieldwatch/payload"
)

// payload is a payload a pod's log action wrote on its stdout, read back
// through the apiserver's pod log API.
type payload struct {
	fwpayload.Payload

	pod       string    // the pod that wrote it
	container string    // the container (short ID) that wrote it
	at        time.Time // when the kubelet logged it
}

// podLogs follows the logs of the StatefulSet's pods (testenv.PodLogs)
// and reads the payloads in them.
type podLogs struct{ *testenv.PodLogs }

// followLogs starts following the pods fieldwatch-0 .. fieldwatch-N-1
// from now on and stops when the test ends.
func (c *cluster) followLogs(t testing.TB) podLogs {
	t.Helper()
	var names []string
	for i := range int(*c.statefulSet(t).Spec.Replicas) {
		names = append(names, fmt.Sprintf("%s-%d", statefulName, i))
	}
	return podLogs{testenv.FollowPodLogs(t, c.cs, namespace, container, names...)}
}

// payloads returns the payloads the pods logged, of every rule or of the
// rules named.
func (l podLogs) payloads(rules ...string) []payload {
	var ps []payload
	for _, line := range l.Lines() {
		p, ok := parsePayload(line)
		if ok && (len(rules) == 0 || slices.Contains(rules, p.Rule)) {
			ps = append(ps, p)
		}
	}
	return ps
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
	p.pod, p.container, p.at = line.Pod, line.Container, line.At
	return p, true
}

// deliveries are the payloads as losscheck compares them.
func deliveries(ps []payload) []losscheck.Delivery {
	ds := make([]losscheck.Delivery, len(ps))
	for i, p := range ps {
		ds[i] = losscheck.Delivery{ID: p.ID, Type: string(p.Type), UID: p.UID, ResourceVersion: p.ResourceVersion}
	}
	return ds
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

// shortID is a container ID as testenv.LogLine gives it: its first 12
// characters, without the runtime's prefix.
func shortID(id string) string {
	_, id, _ = strings.Cut(id, "://")
	return id[:min(12, len(id))]
}
