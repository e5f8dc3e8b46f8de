package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// requiredBinaries are what up needs in bin/ (make cluster builds them).
var requiredBinaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "kubectl", "containerd", "containerd-shim-runc-v2", "ctr", "coredns"}

// requiredTools are what up needs from the machine (make cluster-deps
// installs them from Debian's packages).
var requiredTools = []string{"runc", "iptables", "ip6tables", "ip", "mount", "umount", "/usr/lib/cni/bridge", "/usr/lib/cni/host-local"}

// up starts the cluster, or says that it runs. images are image tarballs
// to import into containerd (fieldwatch's), also when it runs already.
func up(ctx context.Context, p paths, self string, images []string) error {
	if state := status(); state.allRunning() {
		fmt.Printf("cluster: already running (%s); importing the images again\n", strings.Join(state.running, ", "))
		if err := importImages(ctx, p, images); err != nil {
			return err
		}
		printUsage(p)
		return nil
	} else if len(state.running) > 0 || state.leftovers {
		fmt.Printf("cluster: found a cluster that is not whole (running: %v; stopped: %v): taking it down first\n", state.running, state.stopped)
		if err := down(p); err != nil {
			return err
		}
	}
	started := time.Now()
	if err := preflight(p, images); err != nil {
		return err
	}
	if err := p.mkdirs(); err != nil {
		return err
	}
	if err := recordSysctls(); err != nil {
		return err
	}
	// The network first: nothing may start before the guard is in place.
	if err := createBridge(); err != nil {
		return err
	}
	if err := installGuard(); err != nil {
		return fmt.Errorf("egress guard: %w", err)
	}
	if err := checkGuard(true); err != nil {
		return fmt.Errorf("egress guard read back: %w", err)
	}
	fmt.Printf("cluster: bridge %s (%s/24) and the egress guard (%s in filter and mangle) in place\n", bridgeName, nodeIP, egressChain)
	if err := writePKI(p); err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	if err := writeConfigs(p); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	cs, err := clientset(p.kubeconfig())
	if err != nil {
		return err
	}
	steps := []struct {
		name  string
		ready func(context.Context) error
	}{
		{"etcd", httpOK(fmt.Sprintf("http://127.0.0.1:%d/health", etcdClientPort))},
		{"kube-apiserver", func(ctx context.Context) error {
			return cs.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
		}},
		{"kube-controller-manager", httpOK(fmt.Sprintf("https://127.0.0.1:%d/healthz", controllerPort))},
		{"kube-scheduler", httpOK(fmt.Sprintf("https://127.0.0.1:%d/healthz", schedulerPort))},
		{"containerd", func(ctx context.Context) error {
			return exec.CommandContext(ctx, p.binary("ctr"), "-a", containerdSocket, "version").Run()
		}},
		{"kubelet", func(ctx context.Context) error {
			if err := httpOK(fmt.Sprintf("http://127.0.0.1:%d/healthz", kubeletHealthzPort))(ctx); err != nil {
				return err
			}
			return nodeReady(ctx, cs)
		}},
		{"kube-proxy", httpOK(fmt.Sprintf("http://127.0.0.1:%d/healthz", proxyHealthzPort))},
		{"provisioner", func(context.Context) error { return nil }},
	}
	for _, s := range steps {
		if s.name == "kubelet" {
			// The images before the kubelet, so that it finds the
			// sandbox image at once.
			if err := importImages(ctx, p, append([]string{p.pauseTar()}, images...)); err != nil {
				return err
			}
		}
		if err := startComponent(ctx, p, self, s.name, s.ready); err != nil {
			return err
		}
	}
	// The kubelet and kube-proxy prepended their jumps to the filter
	// table's chains.
	if err := checkGuard(false); err != nil {
		return fmt.Errorf("egress guard read back after kube-proxy started: %w", err)
	}
	if err := setUpCluster(ctx, cs); err != nil {
		return err
	}
	// The cluster DNS once its ClusterRole is bound: ready when it
	// answers the name of Service kubernetes over UDP and TCP.
	if err := startComponent(ctx, p, self, "dns", dnsAnswers); err != nil {
		return err
	}
	fmt.Printf("cluster: node %s Ready, %.0fs after make cluster's start\n", nodeName, time.Since(started).Seconds())
	printUsage(p)
	return nil
}

// startComponent starts component name and waits until ready succeeds.
func startComponent(ctx context.Context, p paths, self, name string, ready func(context.Context) error) error {
	t := time.Now()
	if err := daemonFor(p, name, self).start(p); err != nil {
		return failed(p, name, err)
	}
	if err := waitReady(ctx, name, 3*time.Minute, ready); err != nil {
		return failed(p, name, err)
	}
	fmt.Printf("cluster: %s ready in %.1fs\n", name, time.Since(t).Seconds())
	return nil
}

// dnsAnswers checks that the cluster DNS gives the ClusterIP of Service
// default/kubernetes, over UDP and over TCP.
func dnsAnswers(ctx context.Context) error {
	const name = "kubernetes.default.svc." + clusterDomain + "."
	for _, network := range []string{"udp", "tcp"} {
		r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, net.JoinHostPort(nodeIP, "53"))
		}}
		addrs, err := r.LookupHost(ctx, name)
		if err != nil {
			return fmt.Errorf("%s over %s: %w", name, network, err)
		}
		if !slices.Equal(addrs, []string{kubernetesServiceIP}) {
			return fmt.Errorf("%s over %s is %v, want %s", name, network, addrs, kubernetesServiceIP)
		}
	}
	return nil
}

// preflight checks what up needs before it changes anything.
func preflight(p paths, images []string) error {
	if os.Geteuid() != 0 {
		return errors.New("make cluster runs as root: it creates a bridge, iptables rules, mounts and cgroups")
	}
	var missing []string
	for _, b := range requiredBinaries {
		if _, err := os.Stat(p.binary(b)); err != nil {
			missing = append(missing, "bin/"+b+" (make cluster-build)")
		}
	}
	for _, t := range requiredTools {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t+" (make cluster-deps)")
		}
	}
	for _, img := range append([]string{p.pauseTar()}, images...) {
		if _, err := os.Stat(img); err != nil {
			missing = append(missing, img+" (make cluster builds it)")
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing: %s", strings.Join(missing, ", "))
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
		if _, err2 := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err2 != nil {
			return fmt.Errorf("no memory cgroup: %w", err)
		}
	}
	if err := checkRoutes(); err != nil {
		return err
	}
	for _, port := range []int{etcdClientPort, etcdPeerPort, controllerPort, schedulerPort, kubeletHealthzPort, proxyHealthzPort, proxyMetricsPort} {
		if err := portFree("127.0.0.1", port); err != nil {
			return err
		}
	}
	return nil
}

func portFree(host string, port int) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, fmt.Sprint(port)))
	if err != nil {
		return fmt.Errorf("port %d on %s is taken: %w", port, host, err)
	}
	return ln.Close()
}

// waitReady polls ready until it succeeds, the component's process exits
// or timeout passes.
func waitReady(ctx context.Context, name string, timeout time.Duration, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		attempt, cancelAttempt := context.WithTimeout(ctx, 5*time.Second)
		last = ready(attempt)
		cancelAttempt()
		if last == nil {
			return nil
		}
		if !running(name) {
			return fmt.Errorf("exited before it was ready (last check: %w)", last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready after %s: %w", timeout, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// httpOK checks that GET url answers 200; servers with a certificate of
// their own (the controller manager's and scheduler's self-signed ones)
// are not verified: they serve on loopback.
func httpOK(url string) func(context.Context) error {
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // loopback health checks of self-signed servers
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	}
}

func clientset(kubeconfig string) (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

func nodeReady(ctx context.Context, cs kubernetes.Interface) error {
	node, err := cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				return nil
			}
			return fmt.Errorf("node %s not Ready: %s", nodeName, c.Message)
		}
	}
	return fmt.Errorf("node %s has no Ready condition yet", nodeName)
}

// importImages imports image tarballs into containerd's k8s.io namespace,
// where the kubelet finds them.
func importImages(ctx context.Context, p paths, images []string) error {
	for _, img := range images {
		out, err := exec.CommandContext(ctx, p.binary("ctr"), "-a", containerdSocket, "-n", "k8s.io", "images", "import", img).CombinedOutput()
		if err != nil {
			return failed(p, "containerd", fmt.Errorf("ctr images import %s: %w: %s", img, err, strings.TrimSpace(string(out))))
		}
		fmt.Printf("cluster: imported %s\n", img)
	}
	return nil
}

// setUpCluster creates the default StorageClass of the local volume
// provisioner and the binding of its identity, the cluster DNS's
// ClusterRole and binding, and waits for what the
// controllers make that pods need: the default ServiceAccount, the root CA
// ConfigMap and the aggregated ClusterRoles.
func setUpCluster(ctx context.Context, cs kubernetes.Interface) error {
	wait := storagev1.VolumeBindingWaitForFirstConsumer
	reclaim := corev1.PersistentVolumeReclaimDelete
	sc := &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: storageClassName,
			Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}},
		Provisioner:       storageProvisioner,
		VolumeBindingMode: &wait,
		ReclaimPolicy:     &reclaim,
	}
	if _, err := cs.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("storage class: %w", err)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "fieldwatch:local-volume-provisioner"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:persistent-volume-provisioner"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "fieldwatch:local-volume-provisioner"}},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("provisioner binding: %w", err)
	}
	dnsRole := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: dnsUser},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, dnsRole, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("cluster dns role: %w", err)
	}
	dnsBinding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: dnsUser},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: dnsUser},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: dnsUser}},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, dnsBinding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("cluster dns binding: %w", err)
	}
	return waitReady(ctx, "kube-controller-manager", 2*time.Minute, func(ctx context.Context) error {
		if _, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return fmt.Errorf("service account default/default: %w", err)
		}
		if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{}); err != nil {
			return fmt.Errorf("config map default/kube-root-ca.crt: %w", err)
		}
		view, err := cs.RbacV1().ClusterRoles().Get(ctx, "view", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(view.Rules) == 0 {
			return errors.New("cluster role view not aggregated yet")
		}
		return nil
	})
}

func printUsage(p paths) {
	fmt.Printf(`cluster: one node (%s, %s); the apiserver at %s
  export KUBECONFIG=%s
  %s get nodes
  logs in %s; make cluster-down stops it
`, stamp(p, "kubelet"), stamp(p, "containerd"), apiserverURL(), p.kubeconfig(), p.binary("kubectl"), filepath.Join(p.dir, "logs"))
}

// stamp is the module version bin/NAME was built from (NAME.version).
func stamp(p paths, name string) string {
	data, err := os.ReadFile(p.binary(name + ".version"))
	if err != nil {
		return name + " of unknown version"
	}
	return strings.TrimSpace(string(data))
}
