package main

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clusterState is what status finds.
type clusterState struct {
	running, stopped []string
	// leftovers: the cluster's directories or bridge exist.
	leftovers bool
}

func (s clusterState) allRunning() bool { return len(s.stopped) == 0 && len(s.running) > 0 }

func status() clusterState {
	var s clusterState
	for _, name := range components {
		if running(name) {
			s.running = append(s.running, name)
		} else {
			s.stopped = append(s.stopped, name)
		}
	}
	for _, d := range []string{runDir, dataDir, "/sys/class/net/" + bridgeName} {
		if _, err := os.Stat(d); err == nil {
			s.leftovers = true
		}
	}
	return s
}

// down stops every process of the cluster by its recorded PID and removes
// what the cluster left on the machine: containers, mounts, network
// namespaces, the bridge, the CNI state, the KUBE-/CNI- chains and the
// egress guard, the kubepods cgroups, the sysctls it changed, and its
// directories. It can be run again, and on a cluster that was not
// started whole.
func down(p paths) error {
	var errs []error
	stopAll := func(names ...string) {
		for _, name := range names {
			if err := stop(name, 15*time.Second); err != nil {
				errs = append(errs, err)
			}
		}
	}
	// The kubelet first among the node's parts, so that it restarts no
	// container; then the containers, through containerd while it runs.
	stopAll("dns", "provisioner", "kube-proxy", "kubelet", "kube-scheduler", "kube-controller-manager")
	if running("containerd") {
		removeContainers(p)
	}
	stopAll("containerd")
	killPods()
	killShims()
	stopAll("kube-apiserver", "etcd")

	if err := unmountUnder(dataDir, runDir); err != nil {
		errs = append(errs, err)
	}
	deleteBridge()
	sweepChains()
	removeGuard()
	if err := removeCgroups(); err != nil {
		errs = append(errs, err)
	}
	if err := restoreSysctls(); err != nil {
		errs = append(errs, err)
	}
	removeLogLinks()
	for _, path := range append(cniCache(), runDir, dataDir, p.kubeconfig(), filepath.Join(p.dir, "pki"), filepath.Join(p.dir, "config"), filepath.Join(p.dir, "audit")) {
		if err := os.RemoveAll(path); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Println("cluster: stopped; its processes, mounts, network namespaces, bridge, iptables chains, cgroups and directories are gone and the sysctls it changed restored")
	return nil
}

// removeContainers kills and deletes every task and container of the
// k8s.io namespace, so that their shims exit.
func removeContainers(p paths) {
	ctr := func(args ...string) ([]string, error) {
		out, err := exec.Command(p.binary("ctr"), append([]string{"-a", containerdSocket, "-n", "k8s.io"}, args...)...).Output()
		return strings.Fields(string(out)), err
	}
	tasks, _ := ctr("tasks", "ls", "-q")
	for _, id := range tasks {
		_, _ = ctr("tasks", "kill", "-a", "-s", "SIGKILL", id)
	}
	for _, id := range tasks {
		for range 50 {
			if _, err := ctr("tasks", "delete", "-f", id); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	containers, _ := ctr("containers", "ls", "-q")
	for _, id := range containers {
		_, _ = ctr("containers", "delete", id)
	}
}

// cgroupRoots are the kubepods cgroups of every hierarchy (cgroup v1: one
// per controller; v2: one).
func cgroupRoots() []string {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	if _, err := os.Stat("/sys/fs/cgroup/kubepods"); err == nil {
		roots = append(roots, "/sys/fs/cgroup/kubepods")
	}
	return roots
}

// killPods kills the processes left in the kubepods cgroups: the PIDs the
// kernel recorded there are the pods' processes.
func killPods() {
	for range 3 {
		pids := map[int]bool{}
		for _, root := range cgroupRoots() {
			_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
					return nil
				}
				data, _ := os.ReadFile(path)
				for _, f := range strings.Fields(string(data)) {
					if pid, err := strconv.Atoi(f); err == nil {
						pids[pid] = true
					}
				}
				return nil
			})
		}
		if len(pids) == 0 {
			return
		}
		for pid := range pids {
			killPID(pid, 0)
		}
	}
}

// killShims stops the runc shims containerd started, by the PIDs they
// recorded in containerd's state directory, when their command line names
// this cluster's containerd socket.
func killShims() {
	files, _ := filepath.Glob(filepath.Join(containerdState, "io.containerd.runtime.v2.task", "*", "*", "shim.pid"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !strings.Contains(string(cmdline), containerdSocket) {
			continue
		}
		killPID(pid, 5*time.Second)
	}
}

// unmountUnder unmounts every mount point under the directories, the
// deepest first (detaching those still busy).
func unmountUnder(dirs ...string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	var points []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		point := unescapeMount(fields[4])
		for _, d := range dirs {
			if point == d || strings.HasPrefix(point, d+"/") {
				points = append(points, point)
			}
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	var errs []error
	for _, point := range points {
		if err := syscall.Unmount(point, 0); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			if err := syscall.Unmount(point, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
				errs = append(errs, fmt.Errorf("unmount %s: %w", point, err))
			}
		}
	}
	return errors.Join(errs...)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// removeCgroups removes the kubepods cgroups, the deepest first.
func removeCgroups() error {
	var errs []error
	for _, root := range cgroupRoots() {
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		slices.SortFunc(dirs, func(a, b string) int { return len(b) - len(a) })
		for _, d := range dirs {
			var err error
			for range 20 {
				if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
					err = nil
					break
				}
				time.Sleep(100 * time.Millisecond) // a process still leaving it
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// removeLogLinks removes the kubelet's symlinks in /var/log/containers to
// the cluster's pod logs.
func removeLogLinks() {
	entries, _ := os.ReadDir(containerLogLinks)
	for _, e := range entries {
		path := filepath.Join(containerLogLinks, e.Name())
		if target, err := os.Readlink(path); err == nil && strings.HasPrefix(target, podLogsDir+"/") {
			_ = os.Remove(path)
		}
	}
}

// cniCache is what containerd's CNI library caches about this cluster's
// network under /var/lib/cni (the IP allocations are in dataDir).
func cniCache() []string {
	files, _ := filepath.Glob(filepath.Join("/var/lib/cni/results", networkName+"-*"))
	return append(files, filepath.Join("/var/lib/cni/networks", networkName))
}
