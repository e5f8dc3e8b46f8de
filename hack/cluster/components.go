package main

import (
	"fmt"
	"strconv"
)

// The components in the order up starts them; down stops them in reverse
// (containerd's containers in between).
var components = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "containerd", "kubelet", "kube-proxy", "provisioner", "dns"}

// daemonFor returns how component name runs.
func daemonFor(p paths, name, self string) daemon {
	kubeconfigFlags := func(kc string) []string {
		return []string{"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc}
	}
	switch name {
	case "etcd":
		client := fmt.Sprintf("http://127.0.0.1:%d", etcdClientPort)
		peer := fmt.Sprintf("http://127.0.0.1:%d", etcdPeerPort)
		return daemon{name: name, path: p.binary("etcd"), args: []string{
			"--name=fieldwatch", "--data-dir=" + etcdData,
			"--listen-client-urls=" + client, "--advertise-client-urls=" + client,
			"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
			"--initial-cluster=fieldwatch=" + peer,
		}}
	case "kube-apiserver":
		return daemon{name: name, path: p.binary("kube-apiserver"), args: []string{
			"--bind-address=" + nodeIP, "--advertise-address=" + nodeIP, "--secure-port=" + strconv.Itoa(apiserverPort),
			fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", etcdClientPort),
			"--service-cluster-ip-range=" + serviceCIDR,
			"--client-ca-file=" + p.pki("ca.crt"),
			"--tls-cert-file=" + p.pki("apiserver.crt"), "--tls-private-key-file=" + p.pki("apiserver.key"),
			"--kubelet-client-certificate=" + p.pki("apiserver-kubelet-client.crt"),
			"--kubelet-client-key=" + p.pki("apiserver-kubelet-client.key"),
			"--kubelet-preferred-address-types=InternalIP",
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + p.pki("sa.pub"),
			"--service-account-signing-key-file=" + p.pki("sa.key"),
			"--authorization-mode=Node,RBAC",
			"--enable-admission-plugins=NodeRestriction",
			"--allow-privileged=true",
			"--profiling=false",
			// The audit webhook of deploy/audit/, posting to the
			// ClusterIP of Service fieldwatch-audit, in batches of at
			// most a second (docs/audit-setup.md).
			"--audit-policy-file=" + p.conf("audit-policy.yaml"),
			"--audit-webhook-config-file=" + p.conf("audit-webhook.kubeconfig"),
			"--audit-webhook-batch-max-wait=1s",
		}}
	case "kube-controller-manager":
		return daemon{name: name, path: p.binary(name), args: append(kubeconfigFlags(p.conf("controller-manager.kubeconfig")),
			"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(controllerPort),
			"--leader-elect=false",
			"--use-service-account-credentials=true",
			"--service-account-private-key-file="+p.pki("sa.key"),
			"--root-ca-file="+p.pki("ca.crt"),
			"--cluster-signing-cert-file="+p.pki("ca.crt"), "--cluster-signing-key-file="+p.pki("ca.key"),
			"--cluster-name=fieldwatch",
			"--service-cluster-ip-range="+serviceCIDR,
			"--allocate-node-cidrs=false",
		)}
	case "kube-scheduler":
		return daemon{name: name, path: p.binary(name), args: append(kubeconfigFlags(p.conf("scheduler.kubeconfig")),
			"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(schedulerPort), "--leader-elect=false")}
	case "containerd":
		return daemon{name: name, path: p.binary("containerd"), args: []string{"--config=" + p.conf("containerd.toml")}}
	case "kubelet":
		return daemon{name: name, path: p.binary("kubelet"), args: []string{
			"--config=" + p.conf("kubelet.yaml"),
			"--kubeconfig=" + p.conf("kubelet.kubeconfig"),
			"--root-dir=" + kubeletRoot,
			"--hostname-override=" + nodeName,
			"--node-ip=" + nodeIP,
		}}
	case "kube-proxy":
		return daemon{name: name, path: p.binary("kube-proxy"), args: []string{"--config=" + p.conf("kube-proxy.yaml")}}
	case "provisioner":
		return daemon{name: name, path: self, args: []string{"provision", "--kubeconfig=" + p.conf("provisioner.kubeconfig")}}
	case "dns":
		return daemon{name: name, path: p.binary("coredns"), args: []string{"-conf=" + p.conf("Corefile")}}
	}
	panic("unknown component " + name)
}
