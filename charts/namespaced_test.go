package charts

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fieldwatch/fieldwatch/internal/rbac"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// namespacedChartRules watch ConfigMaps in every watched namespace and
// record Events for their updates.
const namespacedChartRules = `rules:
  - name: config
    match: {resources: [{group: "", kind: ConfigMap}], names: [app-*]}
    on: [update]
    actions: [{log: {}}, {event: {reason: ConfigChanged}}]
`

// TestNamespacedChart installs the chart for a namespaced install, with
// the values `fieldwatch rbac --namespaces -o helm-values` prints, on the
// real control plane. Its service account (impersonated) may read in the
// watched namespaces only: SelfSubjectAccessReviews and the reads
// themselves are refused elsewhere and cluster-wide. fieldwatch, run
// with the arguments of the installed StatefulSet and the rules of the
// installed ConfigMap as that account, reports the changes in the watched
// namespaces and none of the others, without a forbidden request.
func TestNamespacedChart(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	const release, releaseNS, a, b, outside = "fw", "ns-chart-tools", "ns-chart-a", "ns-chart-b", "ns-chart-out"
	for _, ns := range []string{releaseNS, a, b, outside} {
		ensureNamespace(t, env, ns)
	}
	vals, _ := helmValues(t, namespacedChartRules, rbac.Options{
		Resources: served, Namespaces: []string{a, b}, Namespace: releaseNS, LeaderElection: true,
	})
	admin := env.WriteKubeconfig(t)
	cfg := helmConfig(t, admin, releaseNS)
	helmInstall(t, cfg, release, releaseNS, vals)
	fullname := release + "-fieldwatch"

	cs := env.Clientset(t)
	if _, err := cs.RbacV1().ClusterRoles().Get(ctx, fullname, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a namespaced install made ClusterRole %s (%v)", fullname, err)
	}
	sa := impersonating(t, admin, "system:serviceaccount:"+releaseNS+":"+fullname)
	saConfig, err := clientcmd.BuildConfigFromFlags("", sa)
	if err != nil {
		t.Fatal(err)
	}
	saClient := kubernetes.NewForConfigOrDie(saConfig)
	for _, ac := range []struct {
		namespace, group, resource, verb string
		want                             bool
	}{
		{a, "", "configmaps", "watch", true}, {b, "", "configmaps", "list", true},
		{b, "events.k8s.io", "events", "create", true}, {releaseNS, "coordination.k8s.io", "leases", "update", true},
		{outside, "", "configmaps", "list", false}, {"kube-system", "", "configmaps", "list", false},
		{"", "", "configmaps", "list", false}, {a, "", "secrets", "get", false},
		{releaseNS, "", "configmaps", "list", false}, {outside, "events.k8s.io", "events", "create", false},
		{"", "", "namespaces", "list", false}, {"", "apiextensions.k8s.io", "customresourcedefinitions", "list", false},
		{"", "rbac.authorization.k8s.io", "clusterroles", "list", false},
	} {
		review, err := saClient.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ac.namespace, Group: ac.group, Resource: ac.resource, Verb: ac.verb,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if review.Status.Allowed != ac.want {
			t.Errorf("%s %s.%s in %q: allowed %v, want %v", ac.verb, ac.resource, ac.group, ac.namespace, review.Status.Allowed, ac.want)
		}
	}
	saDyn := dynamic.NewForConfigOrDie(saConfig)
	configMaps := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	for _, ns := range []string{outside, "kube-system", ""} {
		if _, err := saDyn.Resource(configMaps).Namespace(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("list configmaps in %q as the chart's service account: %v, want forbidden", ns, err)
		}
	}

	// fieldwatch as the pod would run it: the StatefulSet's arguments, the
	// ConfigMap's rules, the service account's rights.
	sts, err := cs.AppsV1().StatefulSets(releaseNS).Get(ctx, fullname, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm, err := cs.CoreV1().ConfigMaps(releaseNS).Get(ctx, fullname+"-rules", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rulesFile := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rulesFile, []byte(cm.Data["rules.yaml"]), 0o644); err != nil {
		t.Fatal(err)
	}
	args := podArgs(t, sts.Spec.Template.Spec.Containers[0].Args, map[string]string{
		"--rules": rulesFile, "--state-dir": filepath.Join(dir, "state"), "--http-addr": "127.0.0.1:0", "--history-addr": "127.0.0.1:0",
	})
	if !strings.Contains(strings.Join(args, " "), "--namespaces="+a+","+b) {
		t.Errorf("the StatefulSet's arguments %v lack --namespaces=%s,%s", args, a, b)
	}
	p := startProcess(t, append(args, "--kubeconfig", sa, "--leader-elect-namespace", releaseNS, "--discovery-interval", "2s"))
	for _, ns := range []string{a, b, outside} {
		if _, err := env.Apply(ctx, testenv.ApplyOptions{}, fmt.Appendf(nil, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app-1, namespace: %s}\ndata: {v: '1'}\n", ns)); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, time.Minute, "fieldwatch ready", p.ready)
	for _, ns := range []string{outside, a, b} {
		if _, err := cs.CoreV1().ConfigMaps(ns).Patch(ctx, "app-1", types.MergePatchType, []byte(`{"data":{"v":"2"}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 30*time.Second, "the updates in both namespaces", func() bool {
		return len(p.payloadsIn(a)) == 1 && len(p.payloadsIn(b)) == 1
	})
	testenv.Eventually(t, 30*time.Second, "the Event in "+b, func() bool {
		evs, err := cs.EventsV1().Events(b).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Reason == "ConfigChanged" && e.Regarding.Name == "app-1" {
				return true
			}
		}
		return false
	})
	if n := len(p.payloadsIn(outside)); n != 0 {
		t.Errorf("%d payloads about %s, which is not watched", n, outside)
	}
	if strings.Contains(strings.ToLower(p.logs()), "forbidden") {
		t.Errorf("fieldwatch hit a forbidden request with the chart's RBAC:\n%s", tail(p.logs(), 4096))
	}
	p.stop()
	helmUninstall(t, cfg, release)
}

// podArgs returns the container's arguments (after "run") with the values
// of the flags in set replaced by those given.
func podArgs(t *testing.T, args []string, set map[string]string) []string {
	t.Helper()
	if len(args) == 0 || args[0] != "run" {
		t.Fatalf("the container's arguments %v do not start with run", args)
	}
	out := []string{"run"}
	for _, a := range args[1:] {
		name, _, _ := strings.Cut(a, "=")
		if v, ok := set[name]; ok {
			a = name + "=" + v
			delete(set, name)
		}
		out = append(out, a)
	}
	if len(set) > 0 {
		t.Fatalf("the container's arguments %v lack %v", args, set)
	}
	return out
}

// impersonating writes a copy of the admin kubeconfig that acts as user
// (a service account: the apiserver adds its groups).
func impersonating(t *testing.T, admin, user string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(admin)
	if err != nil {
		t.Fatal(err)
	}
	for _, auth := range cfg.AuthInfos {
		auth.Impersonate = user
	}
	path := filepath.Join(t.TempDir(), "kubeconfig-impersonating")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// fieldwatchBinary is the fieldwatch binary the tests run, built with
// -race from this checkout on first use.
var fieldwatchBinary = sync.OnceValues(func() (string, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "fieldwatch-charts-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "fieldwatch")
	build := exec.Command("go", "build", "-race", "-o", bin, "./cmd/fieldwatch")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build fieldwatch: %v\n%s", err, out)
	}
	return bin, nil
})

// process is a fieldwatch run by a test.
type process struct {
	t      *testing.T
	cmd    *exec.Cmd
	mu     sync.Mutex
	out    []string // stdout: the log action's payloads
	stderr bytes.Buffer
	done   chan struct{}
}

// startProcess runs fieldwatch with args until the test ends.
func startProcess(t *testing.T, args []string) *process {
	t.Helper()
	bin, err := fieldwatchBinary()
	if err != nil {
		t.Fatal(err)
	}
	p := &process{t: t, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stderr = lockedWriter{p}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		s := bufio.NewScanner(stdout)
		s.Buffer(make([]byte, 1<<20), 4<<20)
		for s.Scan() {
			p.mu.Lock()
			p.out = append(p.out, s.Text())
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.stop()
		}
		if t.Failed() {
			t.Logf("fieldwatch stderr (last 4 KiB):\n%s", tail(p.logs(), 4096))
		}
	})
	return p
}

// lockedWriter appends to the process's stderr under its lock.
type lockedWriter struct{ p *process }

func (w lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.stderr.Write(b)
}

// stop sends SIGTERM and expects a clean exit within 30 seconds.
func (p *process) stop() {
	p.t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	select {
	case err := <-exited:
		<-p.done
		if err != nil {
			p.t.Errorf("fieldwatch exited with %v", err)
		}
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		p.t.Errorf("fieldwatch did not exit 30s after SIGTERM")
	}
}

func (p *process) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// ready reports whether fieldwatch logged that its watcher synced.
func (p *process) ready() bool { return strings.Contains(p.logs(), `"msg":"watcher synced"`) }

// payloadsIn returns the payloads about objects of namespace ns.
func (p *process) payloadsIn(ns string) []map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []map[string]any
	for _, line := range p.out {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			p.t.Errorf("stdout line is not JSON: %q", line)
			continue
		}
		if m["namespace"] == ns {
			out = append(out, m)
		}
	}
	return out
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
