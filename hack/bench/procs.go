package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

var configMapsGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// runBareChild is the bare informer: a client-go dynamic informer on the
// ConfigMaps of one namespace that only counts update events; with paths,
// the fair peer: the same with a transform that keeps what fieldwatch's
// cache keeps under a rule reading paths (projectTransform). It prints
// "synced" once synced, then "count N" as the count grows.
func runBareChild(ctx context.Context, kubeconfig, namespace string, gvr schema.GroupVersionResource, paths []string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 50, 100
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var updates atomic.Int64
	inf := dynamicinformer.NewFilteredDynamicInformer(dyn, gvr, namespace, 0, cache.Indexers{}, nil).Informer()
	if len(paths) > 0 {
		if err := inf.SetTransform(projectTransform(paths)); err != nil {
			return err
		}
	}
	lat := make(chan time.Duration, 100000)
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, obj any) {
		updates.Add(1)
		// Latency updates carry their send time: "<unix nanos>-lat".
		if u, ok := obj.(*unstructured.Unstructured); ok {
			if v, _, _ := unstructured.NestedString(u.Object, "data", "counter"); strings.HasSuffix(v, "-lat") {
				if sent, err := strconv.ParseInt(strings.TrimSuffix(v, "-lat"), 10, 64); err == nil {
					select {
					case lat <- time.Since(time.Unix(0, sent)):
					default:
					}
				}
			}
		}
	}})
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return ctx.Err()
	}
	fmt.Println("synced")
	reportHeapOnSignal(ctx)
	last := int64(-1)
	for {
		select {
		case <-ctx.Done():
			return nil
		case d := <-lat:
			fmt.Printf("lat %d\n", d.Nanoseconds())
			continue
		case <-time.After(2 * time.Millisecond):
		}
		if n := updates.Load(); n != last {
			fmt.Printf("count %d\n", n)
			last = n
		}
	}
}

// process is a consumer process: the bare informer child or fieldwatch.
type process struct {
	name   string
	cmd    *exec.Cmd
	count  atomic.Int64 // events (bare) or payload lines (fieldwatch log)
	synced chan struct{}
	addr   string // fieldwatch's HTTP address
	// pprofAddr is fieldwatch's --pprof-addr when it serves profiles.
	pprofAddr string
	done      chan struct{}
	lat       chan time.Duration // the bare child's update latencies

	statsMu sync.Mutex
	stats   map[string]int // a bare child's last "NAME N" lines
}

// startBare starts the bare informer child on resource (configmaps or
// widgets).
func startBare(kubeconfig, namespace, resource string) (*process, error) {
	return startBareChild(kubeconfig, "bare", namespace, resource)
}

// startPeer starts the fair peer: the bare informer child on resource,
// with a transform keeping what fieldwatch's cache keeps under a rule
// reading paths.
func startPeer(kubeconfig, namespace, resource string, paths ...string) (*process, error) {
	return startBareChild(kubeconfig, "bare", namespace, resource, "-child-fields", strings.Join(paths, ","))
}

// startBareChild starts a bare child: "bare" on one resource, or
// "bare-crds" on every custom resource; extra are more flags.
func startBareChild(kubeconfig, child, namespace, resource string, extra ...string) (*process, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	p := &process{name: child, synced: make(chan struct{}), done: make(chan struct{}), lat: make(chan time.Duration, 100000), stats: map[string]int{}}
	args := append([]string{"-child", child, "-child-kubeconfig", kubeconfig, "-child-namespace", namespace, "-child-resource", resource}, extra...)
	p.cmd = exec.Command(self, args...)
	return p, p.start(func(line string) {
		name, value, _ := strings.Cut(line, " ")
		switch name {
		case "synced":
			close(p.synced)
		case "count":
			n, _ := strconv.ParseInt(value, 10, 64)
			p.count.Store(n)
		case "lat":
			ns, _ := strconv.ParseInt(value, 10, 64)
			p.lat <- time.Duration(ns)
		default:
			n, _ := strconv.Atoi(value)
			p.statsMu.Lock()
			p.stats[name] = n
			p.statsMu.Unlock()
		}
	})
}

// startFieldwatch runs the fieldwatch binary; every stdout line (a log
// action payload) counts one.
func startFieldwatch(name, binary, kubeconfig, rules string, env []string, extra ...string) (*process, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	p := &process{name: name, addr: addr, synced: make(chan struct{}), done: make(chan struct{})}
	args := append([]string{"run", "--rules", rules, "--kubeconfig", kubeconfig, "--http-addr", addr, "--log-level", "warn", "--kube-qps", "200", "--kube-burst", "400"}, extra...)
	p.cmd = exec.Command(binary, args...)
	p.cmd.Env = append(os.Environ(), env...)
	if err := p.start(func(string) { p.count.Add(1) }); err != nil {
		return nil, err
	}
	go func() {
		for {
			if code, _ := httpGet("http://" + addr + "/readyz"); code == http.StatusOK {
				close(p.synced)
				return
			}
			select {
			case <-p.done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return p, nil
}

func (p *process) start(onLine func(string)) error {
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	p.cmd.Stderr = os.Stderr
	if err := p.cmd.Start(); err != nil {
		return err
	}
	go func() {
		defer close(p.done)
		s := bufio.NewScanner(out)
		s.Buffer(make([]byte, 1<<20), 1<<20)
		for s.Scan() {
			onLine(s.Text())
		}
		_ = p.cmd.Wait()
	}()
	return nil
}

// waitSynced waits until the process has synced.
func (p *process) waitSynced(timeout time.Duration) error {
	select {
	case <-p.synced:
		return nil
	case <-p.done:
		return fmt.Errorf("%s exited before it synced", p.name)
	case <-time.After(timeout):
		return fmt.Errorf("%s not synced after %s", p.name, timeout)
	}
}

// cpu returns the process's CPU time so far (user + system).
func (p *process) cpu() time.Duration {
	cpu, _ := p.usage()
	return cpu
}

// usage returns the process's CPU time so far (user + system) and the
// minor page faults it has taken (the kernel mapping a page it touches
// for the first time, or again after the Go runtime gave it back), from
// one read of /proc/PID/stat; zeros when the process is gone.
func (p *process) usage() (time.Duration, int64) {
	fields := procStat(p.cmd.Process.Pid)
	if fields == nil {
		return 0, 0
	}
	faults, _ := strconv.ParseInt(fields[7], 10, 64)
	return statCPU(fields), faults
}

// procStat returns the fields of /proc/PID/stat after the command name
// (the state first); nil when the process is gone.
func procStat(pid int) []string {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	// The command name may hold spaces: fields start after the last ')'.
	s := string(raw)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
}

// statCPU is the CPU time (user + system) of procStat's fields.
func statCPU(fields []string) time.Duration {
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return ticks(utime + stime)
}

// ticks converts clock ticks of /proc to a duration.
func ticks(n int64) time.Duration {
	const clockTicks = 100 // USER_HZ on Linux
	return time.Duration(n) * time.Second / clockTicks
}

// machineCPU returns the CPU time all the machine's CPUs spent busy
// (every state of /proc/stat's first line but idle and iowait): a drain
// that is not CPU-bound for fieldwatch and the receiver shows whether
// others (the control plane, the hypervisor's other guests) took the
// CPUs or they stood idle.
func machineCPU() time.Duration {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	fields := strings.Fields(line)
	if len(fields) < 5 || fields[0] != "cpu" {
		return 0
	}
	var busy int64
	for i, f := range fields[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		if i >= 8 { // guest and guest_nice are counted in user and nice
			break
		}
		n, _ := strconv.ParseInt(f, 10, 64)
		busy += n
	}
	return ticks(busy)
}

// childrenCPU returns the CPU time spent by the bench's child processes
// but those of skip: with the fieldwatch processes skipped, the control
// plane's (envtest's etcd and kube-apiserver).
func childrenCPU(skip ...*process) time.Duration {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	self := os.Getpid()
	var sum time.Duration
next:
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		for _, p := range skip {
			if p.cmd.Process.Pid == pid {
				continue next
			}
		}
		fields := procStat(pid)
		if fields == nil {
			continue // gone meanwhile
		}
		if ppid, _ := strconv.Atoi(fields[1]); ppid != self {
			continue
		}
		sum += statCPU(fields)
	}
	return sum
}

// waitQuiet waits, up to timeout, until the bench's children but skip
// (the control plane) spend less than a tenth of a CPU over a tenth of a
// second, and returns how long it waited and whether they did: the
// writes that built a backlog leave the apiserver and etcd busy for a
// while (their collector, etcd's commits), which a drain measured
// meanwhile counts as fieldwatch's.
func waitQuiet(timeout time.Duration, skip ...*process) (time.Duration, bool) {
	const window = 100 * time.Millisecond
	start := time.Now()
	prev := childrenCPU(skip...)
	for time.Since(start) < timeout {
		time.Sleep(window)
		now := childrenCPU(skip...)
		if now-prev < window/10 {
			return time.Since(start), true
		}
		prev = now
	}
	return time.Since(start), false
}

// selfCPU returns the CPU time the bench process spent (user and
// system), its receivers' included.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// peakRSS returns the process's peak resident set size.
func (p *process) peakRSS() int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			kb, _ := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// metricSum adds up the samples of the fieldwatch process's /metrics
// whose lines start with prefix.
func (p *process) metricSum(prefix string) float64 {
	_, body := httpGet("http://" + p.addr + "/metrics")
	sum := 0.0
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, prefix) {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			sum += v
		}
	}
	return sum
}

// metric reads one sample of the fieldwatch process's /metrics.
func (p *process) metric(prefix string) float64 {
	return p.metrics(prefix)[0]
}

// metrics reads a sample for each prefix from one request for the
// fieldwatch process's /metrics (0 for a prefix no line starts with).
func (p *process) metrics(prefixes ...string) []float64 {
	_, body := httpGet("http://" + p.addr + "/metrics")
	out := make([]float64, len(prefixes))
	found := make([]bool, len(prefixes))
	for _, line := range strings.Split(body, "\n") {
		for i, prefix := range prefixes {
			if !found[i] && strings.HasPrefix(line, prefix) {
				f := strings.Fields(line)
				out[i], _ = strconv.ParseFloat(f[len(f)-1], 64)
				found[i] = true
			}
		}
	}
	return out
}

// stop ends the process (SIGTERM, then SIGKILL).
func (p *process) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// waitCount waits until the process counted n, and returns when.
func (p *process) waitCount(n int64, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for p.count.Load() < n {
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%s counted %d of %d after %s", p.name, p.count.Load(), n, timeout)
		}
		time.Sleep(time.Millisecond)
	}
	return time.Now(), nil
}

func httpGet(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, ""
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().String(), nil
}
