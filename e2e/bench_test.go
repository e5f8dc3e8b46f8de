//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// BenchmarkClusterUp takes the cluster down and brings it up again with
// bin/ built (fieldwatch-cluster up, as make cluster runs it): the time to
// a Ready node with the images imported.
func BenchmarkClusterUp(b *testing.B) {
	var total time.Duration
	for b.Loop() {
		out, err := exec.Command(c.tool, "down").CombinedOutput()
		if err != nil {
			b.Fatalf("down: %v\n%s", err, out)
		}
		start := time.Now()
		out, err = exec.Command(c.tool, "up", "--image", filepath.Join(c.root, "bin/fieldwatch-image.tar")).CombinedOutput()
		if err != nil {
			b.Fatalf("up: %v\n%s", err, out)
		}
		total += time.Since(start)
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "s/up")
	// A new cluster has new certificates: new clients.
	fresh, err := newCluster()
	if err != nil {
		b.Fatal(err)
	}
	c = fresh
}

// BenchmarkApplyReady applies deploy/ (kustomize's rendering, server-side)
// on a cluster without it and waits for both pods to be ready: volumes
// provisioned, images present, probes passing.
func BenchmarkApplyReady(b *testing.B) {
	var total time.Duration
	for b.Loop() {
		removeDeploy(b)
		start := time.Now()
		c.applyFiles(b, "examples/crds/widgets.yaml", "examples/crds/gadgets.yaml")
		c.apply(b, c.render(b, "deploy", c.image)...)
		c.waitRolledOut(b, 5*time.Minute)
		total += time.Since(start)
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "s/ready")
}

// removeDeploy deletes deploy/'s namespace and waits until it and its
// volumes are gone.
func removeDeploy(tb testing.TB) {
	tb.Helper()
	ctx := context.Background()
	if err := c.cs.CoreV1().Namespaces().Delete(ctx, namespace, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		tb.Fatal(err)
	}
	if !poll(3*time.Minute, func() bool {
		_, err := c.cs.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false
		}
		pvs, err := c.cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, pv := range pvs.Items {
			if pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Namespace == namespace {
				return false
			}
		}
		return true
	}) {
		tb.Fatal("namespace fieldwatch or its volumes still there after 3 minutes")
	}
}

// procUsage is a process's CPU time and memory, read from /proc.
type procUsage struct {
	cpu      time.Duration // user + system
	rss, hwm int64         // resident and peak resident bytes
}

func usageOf(tb testing.TB, pid int) procUsage {
	tb.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	i := strings.LastIndexByte(string(stat), ')')
	f := strings.Fields(string(stat[i+1:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	u := procUsage{cpu: time.Duration(utime+stime) * time.Second / 100} // USER_HZ
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for line := range strings.Lines(string(status)) {
		k, v, _ := strings.Cut(line, ":")
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			u.rss = kb << 10
		case "VmHWM":
			u.hwm = kb << 10
		}
	}
	return u
}

// BenchmarkPodVsProcess puts the leader pod of deploy/ (default rules)
// beside the same binary run as a process on this machine against the
// same cluster, with the same rules, flags and memory limit (and a Lease
// of its own, so that it leads too), while writers change Widgets for 20
// seconds: the CPU time each spends per change and their resident memory,
// read from /proc.
func BenchmarkPodVsProcess(b *testing.B) {
	deployed(b)
	const ns = "e2e-bench"
	c.ensureNamespace(b, ns)
	leader := c.leader(b)
	podPID := hostPID(b, c.pod(b, leader))
	podURL := fmt.Sprintf("http://%s:8080/metrics", c.pod(b, leader).Status.PodIP)

	dir := b.TempDir()
	out, err := os.Create(filepath.Join(dir, "stdout"))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = out.Close() }()
	const addr = "127.0.0.1:18080"
	proc := exec.Command(filepath.Join(c.root, "bin/image/fieldwatch"), "run",
		"--rules="+filepath.Join(c.root, "deploy/base/rules.yaml"), "--kubeconfig="+c.kubeconfig,
		"--http-addr="+addr, "--state-dir="+dir, "--leader-elect", "--leader-elect-namespace="+namespace,
		"--leader-elect-name=fieldwatch-bench", "--leader-elect-identity=process")
	proc.Env = append(os.Environ(), "GOMEMLIMIT=536870912") // the pod's: limits.memory 512Mi
	proc.Stdout, proc.Stderr = out, out
	if err := proc.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = proc.Process.Kill()
		_ = proc.Wait()
	}()
	procURL := "http://" + addr + "/metrics"
	testenv.Eventually(b, time.Minute, "the process to lead", func() bool {
		page, err := get(procURL)
		v, _ := metric(page, "fieldwatch_leader ")
		return err == nil && v == 1
	})
	delivered := func(url string) float64 {
		page, err := get(url)
		if err != nil {
			b.Fatal(err)
		}
		v, _ := metric(page, `fieldwatch_action_delivered_total{`)
		return v
	}
	for b.Loop() {
		pod0, proc0 := usageOf(b, podPID), usageOf(b, proc.Process.Pid)
		podD0, procD0 := delivered(podURL), delivered(procURL)
		w := testenv.StartWidgetWriters(b, ns, 0, testenv.WidgetWriter{Prefix: "a", Client: c.dyn}, testenv.WidgetWriter{Prefix: "b", Client: c.dyn})
		time.Sleep(20 * time.Second) // the measured window of load: its length is the benchmark's, no condition
		w.Finish()
		changes := float64(len(w.Made()))
		// Both have delivered what they will when their counts stop
		// moving from one second to the next.
		var last [2]float64
		if !testenv.PollEvery(time.Second, 2*time.Minute, func() bool {
			now := [2]float64{delivered(podURL), delivered(procURL)}
			same := now == last && now[0]-podD0 > 0
			last = now
			return same
		}) {
			b.Fatalf("the delivered counts still move 2 minutes after the writes: %v", last)
		}
		pod1, proc1 := usageOf(b, podPID), usageOf(b, proc.Process.Pid)
		podCPU := (pod1.cpu - pod0.cpu).Seconds() * 1000 / changes
		procCPU := (proc1.cpu - proc0.cpu).Seconds() * 1000 / changes
		b.ReportMetric(changes, "changes")
		b.ReportMetric(last[0]-podD0, "pod-payloads")
		b.ReportMetric(last[1]-procD0, "process-payloads")
		b.ReportMetric(podCPU, "pod-cpu-ms/change")
		b.ReportMetric(procCPU, "process-cpu-ms/change")
		b.ReportMetric(podCPU/procCPU, "pod/process-cpu")
		b.ReportMetric(float64(pod1.rss)/(1<<20), "pod-rss-MiB")
		b.ReportMetric(float64(proc1.rss)/(1<<20), "process-rss-MiB")
		b.ReportMetric(float64(pod1.hwm)/(1<<20), "pod-peak-rss-MiB")
		b.ReportMetric(float64(proc1.hwm)/(1<<20), "process-peak-rss-MiB")
	}
	_ = c.cs.CoordinationV1().Leases(namespace).Delete(context.Background(), "fieldwatch-bench", metav1.DeleteOptions{})
}
