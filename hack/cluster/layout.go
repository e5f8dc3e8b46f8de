package main

import (
	"fmt"
	"os"
	"path/filepath"
)

// The cluster's network: everything it binds or routes is on loopback or
// on the bridge it creates; nothing uses the machine's own interface.
const (
	// bridgeName is the Linux bridge the cluster creates before anything
	// starts; the CNI bridge plugin attaches the pods to it.
	bridgeName = "fieldwatch0"
	// nodeIP is the bridge's address: the apiserver binds and advertises
	// it, the kubelet serves on it, the pods' gateway.
	nodeIP = "10.244.0.1"
	// podSubnet is the node's pod range, on the bridge; podCIDR the
	// cluster's (kube-proxy's --cluster-cidr).
	podSubnet = "10.244.0.0/24"
	podCIDR   = "10.244.0.0/16"
	// serviceCIDR is the Service range; kubernetesServiceIP its first
	// address, the Service "kubernetes".
	serviceCIDR         = "10.96.0.0/12"
	kubernetesServiceIP = "10.96.0.1"
	// auditServiceIP is the ClusterIP that deploy/audit/service.yaml pins
	// for Service fieldwatch/fieldwatch-audit: the apiserver's audit
	// webhook posts to it.
	auditServiceIP   = "10.96.0.250"
	auditServiceName = "fieldwatch-audit.fieldwatch.svc"
	// nodeName is the node's name (the kubelet's --hostname-override).
	nodeName = "fieldwatch-node"
	// networkName is the CNI network's name.
	networkName = "fieldwatch"

	etcdClientPort      = 12379
	etcdPeerPort        = 12380
	apiserverPort       = 6443
	controllerPort      = 10257
	schedulerPort       = 10259
	kubeletPort         = 10250
	kubeletHealthzPort  = 10248
	proxyHealthzPort    = 10256
	proxyMetricsPort    = 10249
	storageProvisioner  = "fieldwatch.local/local-volume"
	storageClassName    = "local"
	auditWebhookCN      = "kube-apiserver-audit"
	pauseImage          = "fieldwatch.local/pause:3.10"
	apiserverServerName = "kubernetes"
	// dnsUser is the cluster DNS's identity and ClusterRole.
	dnsUser = "fieldwatch:cluster-dns"
)

// The machine-wide directories of the cluster's state: one cluster per
// machine (its ports and bridge are fixed). They are removed by down.
const (
	// dataDir holds etcd's data, containerd's root, the kubelet's root,
	// the local volumes and what down needs to restore.
	dataDir = "/var/lib/fieldwatch-cluster"
	// runDir holds sockets, containerd's state (network namespaces
	// included), the CNI configuration and the PID files.
	runDir = "/run/fieldwatch-cluster"
)

// paths are the files of one cluster: dataDir and runDir on the machine,
// and bin/cluster in the repository for what users read (kubeconfig, logs,
// certificates).
type paths struct {
	repo string // the repository root
	bin  string // bin/: the binaries
	dir  string // bin/cluster
}

func newPaths(repo string) paths {
	bin := filepath.Join(repo, "bin")
	return paths{repo: repo, bin: bin, dir: filepath.Join(bin, "cluster")}
}

func (p paths) binary(name string) string { return filepath.Join(p.bin, name) }

// Kubeconfig is the admin kubeconfig users and tests read.
func (p paths) kubeconfig() string     { return filepath.Join(p.dir, "kubeconfig") }
func (p paths) pki(name string) string { return filepath.Join(p.dir, "pki", name) }
func (p paths) conf(name string) string {
	return filepath.Join(p.dir, "config", name)
}
func (p paths) log(name string) string { return filepath.Join(p.dir, "logs", name+".log") }
func (p paths) audit(name string) string {
	return filepath.Join(p.dir, "audit", name)
}

// pauseTar is the sandbox image make cluster-build writes.
func (p paths) pauseTar() string { return filepath.Join(p.dir, "pause.tar") }

func pidFile(name string) string { return filepath.Join(runDir, "pids", name+".pid") }

var (
	etcdData          = filepath.Join(dataDir, "etcd")
	containerdRoot    = filepath.Join(dataDir, "containerd")
	kubeletRoot       = filepath.Join(dataDir, "kubelet")
	podLogsDir        = filepath.Join(dataDir, "pod-logs")
	volumesDir        = filepath.Join(dataDir, "volumes")
	cniDataDir        = filepath.Join(dataDir, "cni")
	sysctlRecord      = filepath.Join(dataDir, "sysctl-before")
	containerdState   = filepath.Join(runDir, "containerd")
	containerdSocket  = filepath.Join(runDir, "containerd.sock")
	containerdHosts   = filepath.Join(runDir, "registry-hosts")
	cniConfDir        = filepath.Join(runDir, "cni")
	resolvConf        = filepath.Join(runDir, "resolv.conf")
	containerLogLinks = "/var/log/containers" // the kubelet's fixed directory of log symlinks
)

// mkdirs creates the directories of a new cluster.
func (p paths) mkdirs() error {
	for _, d := range []string{
		filepath.Join(p.dir, "pki"), filepath.Join(p.dir, "config"), filepath.Join(p.dir, "logs"), filepath.Join(p.dir, "audit"),
		dataDir, etcdData, containerdRoot, kubeletRoot, podLogsDir, volumesDir, cniDataDir,
		runDir, filepath.Join(runDir, "pids"), containerdState, filepath.Join(containerdHosts, "_default"), cniConfDir,
	} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	// etcd refuses a data directory others can read.
	return os.Chmod(etcdData, 0o700)
}
