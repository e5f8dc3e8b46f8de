package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// containerdConfig is containerd's configuration: its own root, state and
// socket (another containerd may run on the machine), no configuration of
// the machine imported, the sandbox image built here, no registry reachable,
// and the CRI settings this kind of machine needs.
func containerdConfig(p paths, runc string) string {
	return fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q
# No file of the machine's containerd is imported.
imports = []
# Plugins that reach outside the cluster's directories or are not needed.
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.nri.v1.nri", "io.containerd.image-verifier.v1.bindir"]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"

  # The sandbox image is built here (make cluster) and imported under
  # this name: no registry is reachable.
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %[5]q

  # Every registry's hosts.toml sends pulls to a closed loopback port:
  # images are imported, never pulled, and nothing leaves the machine.
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = %[6]q

[plugins.'io.containerd.cri.v1.runtime']
  # The machine lacks CAP_SYS_RESOURCE: runc cannot lower a container's
  # oom_score_adj below containerd's own unless it is restricted to it.
  restrict_oom_score_adj = true
  # Pod network namespaces under containerd's state directory, not
  # /var/run/netns: down removes them with it.
  netns_mounts_under_state_dir = true
  enable_criu = false
  cdi_spec_dirs = []

  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"

    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      runtime_path = %[7]q
      disable_pause_image_pull = true

      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = %[8]q
        # The kubelet's cgroupDriver is cgroupfs.
        SystemdCgroup = false

  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = %[9]q
    max_conf_num = 1
    use_internal_loopback = true

[plugins.'io.containerd.grpc.v1.cri']
  # kubectl exec, logs and port-forward stream through the kubelet to
  # this server: loopback only.
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
`, containerdRoot, containerdState, containerdSocket, containerdSocket+".ttrpc",
		pauseImage, containerdHosts, p.binary("containerd-shim-runc-v2"), runc, cniConfDir)
}

// registryHosts is the hosts.toml of every registry (_default): its
// server is a closed port on loopback, so that a pull fails at once
// instead of leaving the machine.
const registryHosts = `# make cluster: no registry is reachable; images are imported.
server = "https://127.0.0.1:1"
`

// cniConfig is the bridge network of the pods: their gateway is the
// bridge's address, without masquerading, and their only routes are the
// pod subnet and the Service range: a pod has no route out of the machine.
func cniConfig() string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %q,
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "isDefaultGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": %q,
        "ranges": [[{"subnet": %q, "gateway": %q}]],
        "routes": [{"dst": %q}]
      }
    }
  ]
}
`, networkName, bridgeName, filepath.Join(cniDataDir, "networks"), podSubnet, nodeIP, serviceCIDR)
}

// kubeletConfig is the KubeletConfiguration: cgroup v1 with the cgroupfs
// driver, serving on the bridge's address and loopback only, the cluster
// DNS on the bridge's address as the pods' name server, its logs and
// state in the cluster's directories, no image garbage collection (the
// images cannot be pulled again) and eviction thresholds low enough for a
// shared development disk.
func kubeletConfig(p paths) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine's cgroups are v1: allowed only by the configuration file.
failCgroupV1: false
cgroupDriver: cgroupfs
address: %[1]s
port: %[2]d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[3]d
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[4]s}
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://%[5]s
# The pods' name server: the cluster DNS (CoreDNS, Corefile) on the
# bridge's address. resolvConf is empty: no search domain or name server
# of the machine reaches the pods.
clusterDNS: [%[1]s]
clusterDomain: %[8]s
resolvConf: %[6]s
podLogsDir: %[7]s
failSwapOn: false
protectKernelDefaults: false
rotateCertificates: false
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%%
  nodefs.inodesFree: 1%%
  imagefs.available: 1%%
maxPods: 32
`, nodeIP, kubeletPort, kubeletHealthzPort, p.pki("ca.crt"), containerdSocket, resolvConf, podLogsDir, clusterDomain)
}

// kubeProxyConfig is kube-proxy's configuration: iptables mode, serving
// on loopback, node ports on the bridge's address only, and the
// machine's conntrack settings left as they are.
func kubeProxyConfig(p paths) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: %[1]s
hostnameOverride: %[2]s
clusterCIDR: %[3]s
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:%[4]d
metricsBindAddress: 127.0.0.1:%[5]d
nodePortAddresses: [%[6]s/32]
iptables:
  localhostNodePorts: false
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
  udpTimeout: 0s
  udpStreamTimeout: 0s
`, p.conf("kube-proxy.kubeconfig"), nodeName, podCIDR, proxyHealthzPort, proxyMetricsPort, nodeIP)
}

// clusterDomain is the cluster's DNS domain (the kubelet's clusterDomain):
// the cluster DNS answers for it alone.
const clusterDomain = "cluster.local"

// corefile is the cluster DNS's configuration: CoreDNS on addr (the
// bridge's address, port 53, UDP and TCP), answering for clusterDomain
// from the Services and EndpointSlices it follows with its kubernetes
// plugin as the user of kubeconfig (TTL 5 s: a Service's endpoints change
// with its pods), and NXDOMAIN for every other name: it forwards nothing,
// so no query leaves the machine.
func corefile(addr, port, kubeconfig string) string {
	return fmt.Sprintf(`# make cluster: the cluster DNS, CoreDNS (hack/cluster/coredns).
%[1]s:%[2]s {
    bind %[3]s
    errors
    kubernetes %[1]s {
        kubeconfig %[4]s
        ttl 5
    }
}
.:%[2]s {
    bind %[3]s
    errors
    template ANY ANY {
        rcode NXDOMAIN
    }
}
`, clusterDomain, port, addr, kubeconfig)
}

// auditWebhookConfig is deploy/audit/webhook-kubeconfig.yaml as a user
// copies it to a control-plane node: the files it names under
// /etc/kubernetes/fieldwatch-audit/ are bin/cluster/audit's.
func auditWebhookConfig(p paths) (string, error) {
	data, err := os.ReadFile(filepath.Join(p.repo, "deploy/audit/webhook-kubeconfig.yaml"))
	if err != nil {
		return "", err
	}
	const dir = "/etc/kubernetes/fieldwatch-audit/"
	if !strings.Contains(string(data), dir) || !strings.Contains(string(data), auditServiceIP) {
		return "", fmt.Errorf("deploy/audit/webhook-kubeconfig.yaml no longer names %s and %s", dir, auditServiceIP)
	}
	return strings.ReplaceAll(string(data), dir, p.audit("")+"/"), nil
}

// writeConfigs writes every configuration file of the cluster.
func writeConfigs(p paths) error {
	runc, err := exec.LookPath("runc")
	if err != nil {
		return fmt.Errorf("runc: %w (make cluster-deps installs it)", err)
	}
	audit, err := auditWebhookConfig(p)
	if err != nil {
		return err
	}
	policy, err := os.ReadFile(filepath.Join(p.repo, "deploy/audit/policy.yaml"))
	if err != nil {
		return err
	}
	files := map[string]string{
		p.conf("containerd.toml"):                                containerdConfig(p, runc),
		filepath.Join(containerdHosts, "_default", "hosts.toml"): registryHosts,
		filepath.Join(cniConfDir, "10-"+networkName+".conflist"): cniConfig(),
		resolvConf:                         "# make cluster: the pods' only name server is the cluster DNS (kubelet.yaml's clusterDNS); nothing outside the machine is named.\n",
		p.conf("kubelet.yaml"):             kubeletConfig(p),
		p.conf("kube-proxy.yaml"):          kubeProxyConfig(p),
		p.conf("audit-webhook.kubeconfig"): audit,
		p.conf("audit-policy.yaml"):        string(policy),
		p.conf("Corefile"):                 corefile(nodeIP, "53", p.conf("dns.kubeconfig")),
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}
