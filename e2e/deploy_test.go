//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// testDeploy applies deploy/ as a user does (kustomize's rendering,
// applied server-side) with the image make image built, and checks that
// both replicas run and are ready (the kubelet's probes pass), with
// deploy/'s securityContext in force in the running processes, on volumes
// the cluster's provisioner made.
func testDeploy(t *testing.T) {
	// kubectl apply -k renders with the kustomize kubectl embeds (an
	// older release of the same API): both must give the same objects.
	deployDir := filepath.Join(c.root, "deploy")
	fromAPI := c.kustomize(t, deployDir)
	fromKubectl := decodeObjects(t, []byte(c.kubectlRun(t, "kustomize", deployDir)))
	if !sameObjects(fromAPI, fromKubectl) {
		t.Errorf("kustomize/api and kubectl kustomize render deploy/ differently:\n%v\n%v", names(fromAPI), names(fromKubectl))
	}

	c.applyFiles(t, "examples/crds/widgets.yaml", "examples/crds/gadgets.yaml")
	start := time.Now()
	c.apply(t, c.render(t, "deploy", c.image)...)
	c.waitRolledOut(t, 5*time.Minute)
	t.Logf("deploy/ applied to both pods ready in %s", time.Since(start).Round(100*time.Millisecond))

	pods := c.pods(t)
	if len(pods) != 2 {
		t.Fatalf("%d pods, want deploy/'s 2 replicas", len(pods))
	}
	for i := range pods {
		p := &pods[i]
		if got := p.Spec.Containers[0].Image; got != c.image {
			t.Errorf("%s runs %s, not %s", p.Name, got, c.image)
		}
		checkHardening(t, p)
	}

	claims, err := c.cs.CoreV1().PersistentVolumeClaims(namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(claims.Items) != 2 {
		t.Errorf("%d volume claims, want one per replica", len(claims.Items))
	}
	for _, pvc := range claims.Items {
		if pvc.Status.Phase != corev1.ClaimBound {
			t.Errorf("claim %s is %s", pvc.Name, pvc.Status.Phase)
			continue
		}
		pv, err := c.cs.CoreV1().PersistentVolumes().Get(context.Background(), pvc.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pv.Annotations["pv.kubernetes.io/provisioned-by"] != "fieldwatch.local/local-volume" || pv.Spec.Local == nil {
			t.Errorf("volume %s of %s is not a local volume of the cluster's provisioner: %v", pv.Name, pvc.Name, pv.Annotations)
		}
	}
}

func names(objs []*unstructured.Unstructured) []string {
	var n []string
	for _, o := range objs {
		n = append(n, o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName())
	}
	slices.Sort(n)
	return n
}

func sameObjects(a, b []*unstructured.Unstructured) bool {
	key := func(o *unstructured.Unstructured) string {
		return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
	}
	byKey := map[string]*unstructured.Unstructured{}
	for _, o := range a {
		byKey[key(o)] = o
	}
	if len(a) != len(b) {
		return false
	}
	for _, o := range b {
		if other, ok := byKey[key(o)]; !ok || !reflect.DeepEqual(other.Object, o.Object) {
			return false
		}
	}
	return true
}

// hostPID returns the PID, on this machine, of a pod's fieldwatch
// container: the process in the container's cgroup.
func hostPID(t testing.TB, p *corev1.Pod) int {
	t.Helper()
	st := containerStatus(p)
	if st == nil || st.ContainerID == "" {
		t.Fatalf("%s: no container", p.Name)
	}
	_, id, _ := strings.Cut(st.ContainerID, "://")
	dir := containerCgroup(t, "pids", p, id)
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	if _, err := fmt.Sscan(string(data), &pid); err != nil {
		t.Fatalf("%s: no process in %s", p.Name, dir)
	}
	return pid
}

// containerCgroup returns the directory of a container's cgroup in the
// hierarchy of controller (cgroup v1, the kubelet's cgroupfs driver).
func containerCgroup(t testing.TB, controller string, p *corev1.Pod, id string) string {
	t.Helper()
	for _, pattern := range []string{"kubepods/pod%s/%s", "kubepods/*/pod%s/%s"} {
		m, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", controller, fmt.Sprintf(pattern, p.UID, id)))
		if len(m) == 1 {
			return m[0]
		}
	}
	t.Fatalf("%s: no %s cgroup for container %s", p.Name, controller, id)
	return ""
}

// checkHardening reads deploy/'s securityContext back from the running
// process: user and group 65532 (with the volume's fsGroup), no
// capabilities, no new privileges, a seccomp filter, a read-only root
// filesystem, and no route out of the pod's network.
func checkHardening(t testing.TB, p *corev1.Pod) {
	t.Helper()
	pid := hostPID(t, p)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{}
	for line := range strings.Lines(string(status)) {
		k, v, _ := strings.Cut(line, ":")
		fields[k] = strings.Join(strings.Fields(v), " ")
	}
	for k, want := range map[string]string{
		"Uid": "65532 65532 65532 65532", "Gid": "65532 65532 65532 65532",
		"CapEff": "0000000000000000", "CapPrm": "0000000000000000", "CapBnd": "0000000000000000",
		"NoNewPrivs": "1", "Seccomp": "2",
	} {
		if fields[k] != want {
			t.Errorf("%s (PID %d): %s %q, want %q", p.Name, pid, k, fields[k], want)
		}
	}
	mounts, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		t.Fatal(err)
	}
	rootRO := false
	for line := range strings.Lines(string(mounts)) {
		f := strings.Fields(line)
		if len(f) > 5 && f[4] == "/" {
			rootRO = slices.Contains(strings.Split(f[5], ","), "ro")
		}
	}
	if !rootRO {
		t.Errorf("%s: the root filesystem is writable", p.Name)
	}
	routes, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/route", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(routes)) {
		if f := strings.Fields(line); len(f) > 1 && f[1] == "00000000" {
			t.Errorf("%s has a default route: %s", p.Name, line)
		}
	}
}

// testServiceAccount: the pods run as deploy/'s ServiceAccount with its
// token (the in-cluster configuration), which is bound to deploy/'s RBAC
// and nothing else: it can read the custom resources and hold its Lease,
// and cannot read Secrets, write what it watches or touch other Leases;
// and with that the pods watch without a request refused.
func testServiceAccount(t *testing.T) {
	deployed(t)
	ctx := context.Background()
	const sa = "system:serviceaccount:fieldwatch:fieldwatch"
	for _, p := range c.pods(t) {
		if p.Spec.ServiceAccountName != "fieldwatch" {
			t.Errorf("%s runs as service account %q", p.Name, p.Spec.ServiceAccountName)
		}
	}
	for _, tc := range []struct {
		verb, group, resource, ns string
		allowed                   bool
	}{
		{"list", "example.com", "widgets", "", true},
		{"watch", "example.com", "gadgets", "", true},
		{"list", "apiextensions.k8s.io", "customresourcedefinitions", "", true},
		{"update", "coordination.k8s.io", "leases", namespace, true},
		{"create", "example.com", "widgets", "shop", false},
		{"list", "", "secrets", "", false},
		{"list", "", "configmaps", "", false},
		{"list", "", "pods", "", false},
		{"update", "coordination.k8s.io", "leases", "kube-system", false},
		{"delete", "coordination.k8s.io", "leases", namespace, false},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   sa,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:fieldwatch", "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: tc.verb, Group: tc.group, Resource: tc.resource, Namespace: tc.ns},
		}}
		got, err := c.cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed != tc.allowed {
			t.Errorf("%s %s %s.%s in %q: allowed %v, want %v", sa, tc.verb, tc.resource, tc.group, tc.ns, got.Status.Allowed, tc.allowed)
		}
	}
	// Only deploy/'s bindings name the service account.
	var bound []string
	crbs, err := c.cs.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range crbs.Items {
		for _, s := range b.Subjects {
			if s.Kind == "ServiceAccount" && s.Name == "fieldwatch" && s.Namespace == namespace {
				bound = append(bound, "ClusterRoleBinding "+b.Name+" -> "+b.RoleRef.Name)
			}
		}
	}
	rbs, err := c.cs.RbacV1().RoleBindings("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range rbs.Items {
		for _, s := range b.Subjects {
			if s.Kind == "ServiceAccount" && s.Name == "fieldwatch" && s.Namespace == namespace {
				bound = append(bound, "RoleBinding "+b.Namespace+"/"+b.Name+" -> "+b.RoleRef.Name)
			}
		}
	}
	slices.Sort(bound)
	want := []string{"ClusterRoleBinding fieldwatch -> fieldwatch", "ClusterRoleBinding fieldwatch-auth-delegator -> system:auth-delegator",
		"RoleBinding fieldwatch/fieldwatch-leader-election -> fieldwatch-leader-election"}
	if !slices.Equal(bound, want) {
		t.Errorf("the service account is bound by %q, want deploy/'s %q only", bound, want)
	}
	// The pods watch with it: no request of theirs is refused.
	for _, p := range c.pods(t) {
		out := c.kubectlRun(t, "-n", namespace, "logs", p.Name)
		if !strings.Contains(out, "watcher synced") {
			t.Errorf("%s has not synced:\n%s", p.Name, tail(out, 10))
		}
		if strings.Contains(strings.ToLower(out), "forbidden") {
			t.Errorf("%s logged a refused request with deploy/'s RBAC:\n%s", p.Name, grep(out, "orbidden"))
		}
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func grep(s, word string) string {
	var out []string
	for line := range strings.Lines(s) {
		if strings.Contains(line, word) {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return strings.Join(out[:min(5, len(out))], "\n")
}

// testCustomResourceFires: a Widget created, changed and deleted shows up
// as three payloads of the default rules in the leader's log, read with
// kubectl logs.
func testCustomResourceFires(t *testing.T) {
	deployed(t)
	const ns = "e2e-fire"
	c.ensureNamespace(t, ns)
	leader := c.leader(t)
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "fires", "namespace": ns},
		"spec":     map[string]any{"size": int64(1), "color": "red"},
	}}
	const historyWritten = `fieldwatch_history_entries_total{result="written"}`
	recorded, _ := metric(c.podMetrics(t, leader), historyWritten)
	widgets := c.dyn.Resource(widgetsGVR).Namespace(ns)
	created, err := widgets.Create(context.Background(), w, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	uid := string(created.GetUID())
	c.kubectlRun(t, "-n", ns, "patch", "widget", "fires", "--type=merge", "-p", `{"spec":{"size":2}}`)
	c.kubectlRun(t, "-n", ns, "delete", "widget", "fires")
	var got []string
	ok := poll(time.Minute, func() bool {
		got = nil
		for line := range strings.Lines(c.kubectlRun(t, "-n", namespace, "logs", leader)) {
			if p, ok := parsePayload(testenv.LogLine{Text: strings.TrimSpace(line)}); ok && p.UID == uid && p.Rule == "crd-audit" {
				got = append(got, string(p.Type))
			}
		}
		return slices.Equal(got, []string{"created", "updated", "deleted"})
	})
	if !ok {
		t.Errorf("the leader %s logged %v for the Widget, want created, updated, deleted", leader, got)
	}
	// Delivering them went without an error (the history's store among
	// what they are recorded in, the last to get them).
	if !poll(time.Minute, func() bool {
		n, _ := metric(c.podMetrics(t, leader), historyWritten)
		return n >= recorded+3
	}) {
		t.Errorf("the leader %s's history did not record the Widget's three payloads", leader)
	}
	if errs := grep(c.kubectlRun(t, "-n", namespace, "logs", leader), `"level":"ERROR"`); errs != "" {
		t.Errorf("the leader %s logged errors:\n%s", leader, errs)
	}
}

// testMetricsThroughService scrapes /metrics through the Service
// fieldwatch-metrics, as Prometheus does: both replicas answer behind it,
// one leading.
func testMetricsThroughService(t *testing.T) {
	deployed(t)
	svc, err := c.cs.CoreV1().Services(namespace).Get(context.Background(), metricsSvc, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("http://%s:%d/metrics", svc.Spec.ClusterIP, svc.Spec.Ports[0].Port)
	leaders := map[float64]int{}
	for range 30 {
		page, err := get(url)
		if err != nil {
			t.Fatalf("scrape through the Service: %v", err)
		}
		for _, series := range []string{"fieldwatch_rules ", "fieldwatch_watcher_", "fieldwatch_workqueue_", "go_goroutines "} {
			if _, ok := metric(page, series); !ok {
				t.Errorf("%s lacks %s", url, series)
			}
		}
		v, _ := metric(page, "fieldwatch_leader ")
		leaders[v]++
	}
	if leaders[1] == 0 || leaders[0] == 0 {
		t.Errorf("30 scrapes of %s saw fieldwatch_leader %v: want both the leader (1) and the standby (0) behind the Service", url, leaders)
	}
	t.Logf("30 scrapes through %s: %v", url, leaders)
}
