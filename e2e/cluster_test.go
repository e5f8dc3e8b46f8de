//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// What deploy/ creates.
const (
	namespace    = "fieldwatch"
	statefulName = "fieldwatch"
	leaseName    = "fieldwatch"
	podLabel     = "app.kubernetes.io/name=fieldwatch"
	container    = "fieldwatch"
	metricsSvc   = "fieldwatch-metrics"
	// deployImage is the image deploy/base/statefulset.yaml names; the tests
	// replace it with the one make image built, as a user's overlay would.
	deployImage = "ghcr.io/fieldwatch/fieldwatch"
	// fieldManager is the field manager of the tests' server-side applies:
	// kubectl's.
	fieldManager = "kubectl"
)

// cluster is the running cluster of make cluster.
type cluster struct {
	root       string // the repository
	kubeconfig string
	kubectl    string // bin/kubectl
	tool       string // bin/fieldwatch-cluster
	image      string // FIELDWATCH_IMAGE: the image make image built and make cluster loaded
	cfg        *rest.Config
	cs         kubernetes.Interface
	dyn        dynamic.Interface
	mapper     *restmapper.DeferredDiscoveryRESTMapper
}

func newCluster() (*cluster, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return nil, err
	}
	c := &cluster{
		root:       root,
		kubeconfig: filepath.Join(root, "bin/cluster/kubeconfig"),
		kubectl:    filepath.Join(root, "bin/kubectl"),
		tool:       filepath.Join(root, "bin/fieldwatch-cluster"),
		image:      os.Getenv("FIELDWATCH_IMAGE"),
	}
	if c.image == "" || !strings.Contains(c.image, ":") {
		return nil, errors.New("FIELDWATCH_IMAGE is not set to the image's name:tag: run the tests with make e2e")
	}
	if err := exec.Command(c.tool, "status").Run(); err != nil {
		return nil, fmt.Errorf("the cluster does not run (%s status: %v): run the tests with make e2e", c.tool, err)
	}
	c.cfg, err = clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		return nil, err
	}
	c.cfg.QPS, c.cfg.Burst = 100, 200
	if c.cs, err = kubernetes.NewForConfig(c.cfg); err != nil {
		return nil, err
	}
	if c.dyn, err = dynamic.NewForConfig(c.cfg); err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(c.cfg)
	if err != nil {
		return nil, err
	}
	c.mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	return c, nil
}

// imageNameTag splits an image reference name:tag.
func imageNameTag(ref string) (string, string) {
	i := strings.LastIndex(ref, ":")
	return ref[:i], ref[i+1:]
}

// render renders the kustomization dir (deploy/ or deploy/audit/) with
// kustomize's API, in an overlay that sets the image to image (name:tag),
// as `kustomize edit set image` does.
func (c *cluster) render(t testing.TB, dir, image string) []*unstructured.Unstructured {
	t.Helper()
	overlay := t.TempDir()
	name, tag := imageNameTag(image)
	// kustomize takes a base by a relative path only.
	base, err := filepath.Rel(overlay, filepath.Join(c.root, dir))
	if err != nil {
		t.Fatal(err)
	}
	k := fmt.Sprintf("resources:\n  - %s\nimages:\n  - name: %s\n    newName: %s\n    newTag: %q\n",
		base, deployImage, name, tag)
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	return c.kustomize(t, overlay)
}

// kustomize renders the kustomization in dir with sigs.k8s.io/kustomize/api.
func (c *cluster) kustomize(t testing.TB, dir string) []*unstructured.Unstructured {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize %s: %v", dir, err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return decodeObjects(t, out)
}

func decodeObjects(t testing.TB, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var o map[string]any
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatal(err)
		}
		if len(o) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: o})
		}
	}
}

// apply applies objects server-side, as `kubectl apply --server-side`
// does, waiting for a CRD to be established before going on.
func (c *cluster) apply(t testing.TB, objs ...*unstructured.Unstructured) {
	t.Helper()
	ctx := context.Background()
	for _, o := range objs {
		mapping, err := c.mapper.RESTMapping(o.GroupVersionKind().GroupKind(), o.GroupVersionKind().Version)
		if err != nil {
			c.mapper.Reset()
			if mapping, err = c.mapper.RESTMapping(o.GroupVersionKind().GroupKind(), o.GroupVersionKind().Version); err != nil {
				t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
		var ri dynamic.ResourceInterface = c.dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = c.dyn.Resource(mapping.Resource).Namespace(o.GetNamespace())
		}
		if _, err := ri.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: fieldManager, Force: true}); err != nil {
			t.Fatalf("apply %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
		if o.GetKind() == "CustomResourceDefinition" {
			c.waitEstablished(t, o.GetName())
		}
	}
}

func (c *cluster) waitEstablished(t testing.TB, name string) {
	t.Helper()
	crds := c.dyn.Resource(crdGVR)
	testenv.Eventually(t, time.Minute, "CRD "+name+" established", func() bool {
		o, err := crds.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
		for _, cond := range conds {
			if m, ok := cond.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
				return true
			}
		}
		return false
	})
	c.mapper.Reset()
}

// applyFiles applies the objects of YAML files of the repository.
func (c *cluster) applyFiles(t testing.TB, paths ...string) {
	t.Helper()
	for _, p := range paths {
		data, err := os.ReadFile(filepath.Join(c.root, p))
		if err != nil {
			t.Fatal(err)
		}
		c.apply(t, decodeObjects(t, data)...)
	}
}

// statefulSet returns deploy/'s StatefulSet.
func (c *cluster) statefulSet(t testing.TB) *appsv1.StatefulSet {
	t.Helper()
	sts, err := c.cs.AppsV1().StatefulSets(namespace).Get(context.Background(), statefulName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return sts
}

// pods returns the fieldwatch pods.
func (c *cluster) pods(t testing.TB) []corev1.Pod {
	t.Helper()
	l, err := c.cs.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{LabelSelector: podLabel})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

func (c *cluster) pod(t testing.TB, name string) *corev1.Pod {
	t.Helper()
	p, err := c.cs.CoreV1().Pods(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ready reports whether a pod runs with every container ready.
func ready(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return false
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitRolledOut waits until the StatefulSet's pods all run its current
// revision and are ready.
func (c *cluster) waitRolledOut(t testing.TB, timeout time.Duration) {
	t.Helper()
	var last string
	ok := poll(timeout, func() bool {
		sts := c.statefulSet(t)
		want := *sts.Spec.Replicas
		s := sts.Status
		last = fmt.Sprintf("generation %d observed %d, replicas %d ready %d updated %d, revision %s update %s",
			sts.Generation, s.ObservedGeneration, s.Replicas, s.ReadyReplicas, s.UpdatedReplicas, s.CurrentRevision, s.UpdateRevision)
		if s.ObservedGeneration < sts.Generation || s.ReadyReplicas != want || s.UpdatedReplicas != want || s.CurrentRevision != s.UpdateRevision {
			return false
		}
		n := 0
		for _, p := range c.pods(t) {
			if ready(&p) && p.Labels[appsv1.StatefulSetRevisionLabel] == s.UpdateRevision {
				n++
			}
		}
		return n == int(want)
	})
	if !ok {
		c.describePods(t)
		t.Fatalf("the StatefulSet did not roll out within %s: %s", timeout, last)
	}
}

// poll polls cond every 200 ms until it holds or timeout passes: the
// conditions read the cluster through its API, less often than
// testenv.Poll reads memory.
func poll(timeout time.Duration, cond func() bool) bool {
	return testenv.PollEvery(200*time.Millisecond, timeout, cond)
}

// describePods logs the pods' state and recent events, for a failure.
func (c *cluster) describePods(t testing.TB) {
	t.Helper()
	for _, p := range c.pods(t) {
		t.Logf("pod %s: phase %s, conditions %v", p.Name, p.Status.Phase, p.Status.Conditions)
		for _, s := range p.Status.ContainerStatuses {
			t.Logf("  container %s: ready %v, restarts %d, state %+v, last %+v", s.Name, s.Ready, s.RestartCount, s.State, s.LastTerminationState)
		}
	}
	ev, err := c.cs.CoreV1().Events(namespace).List(context.Background(), metav1.ListOptions{})
	if err == nil {
		for _, e := range ev.Items[max(0, len(ev.Items)-20):] {
			t.Logf("event %s %s/%s: %s: %s", e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
}

// leader returns the pod that holds the Lease.
func (c *cluster) leader(t testing.TB) string {
	t.Helper()
	var holder string
	testenv.Eventually(t, 2*time.Minute, "a leader", func() bool {
		l, err := c.cs.CoordinationV1().Leases(namespace).Get(context.Background(), leaseName, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			return false
		}
		holder = replicaOf(*l.Spec.HolderIdentity)
		p, err := c.cs.CoreV1().Pods(namespace).Get(context.Background(), holder, metav1.GetOptions{})
		return err == nil && ready(p)
	})
	return holder
}

// holder returns the pod whose process holds the Lease now ("" when
// none).
func (c *cluster) holder() string {
	l, err := c.cs.CoordinationV1().Leases(namespace).Get(context.Background(), leaseName, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return replicaOf(*l.Spec.HolderIdentity)
}

// replicaOf returns the pod name of a Lease holder identity: fieldwatch
// holds the Lease as its replica's name and an ID of its process
// ("fieldwatch-0_<uuid>"), so that a container restarted under the pod's
// name does not take its previous life's Lease for its own.
func replicaOf(holder string) string {
	if i := strings.LastIndexByte(holder, '_'); i >= 0 {
		return holder[:i]
	}
	return holder
}

// leadingPod returns a ready pod, other than the one of UID gone, whose
// metrics say it leads ("" when none does).
func (c *cluster) leadingPod(t testing.TB, gone types.UID) string {
	t.Helper()
	for _, p := range c.pods(t) {
		if p.UID == gone || !ready(&p) {
			continue
		}
		page, err := get(fmt.Sprintf("http://%s:8080/metrics", p.Status.PodIP))
		if v, _ := metric(page, "fieldwatch_leader "); err == nil && v == 1 {
			return p.Name
		}
	}
	return ""
}

// get fetches url from this machine (a pod's or a Service's address,
// reached over the cluster's bridge).
func get(url string) (string, error) {
	// A new connection each time: behind a Service, kube-proxy picks an
	// endpoint per connection.
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(body), err
}

// metric returns the sum of the samples of a metric (a name and the
// start of its labels, "fieldwatch_leader " or `x{rule="a"`) in a
// Prometheus text page, and whether any was found.
func metric(page, series string) (float64, bool) {
	var sum float64
	found := false
	for line := range strings.Lines(page) {
		if !strings.HasPrefix(line, series) {
			continue
		}
		f := strings.Fields(line)
		var v float64
		if _, err := fmt.Sscan(f[len(f)-1], &v); err == nil {
			sum += v
			found = true
		}
	}
	return sum, found
}

// podMetrics scrapes a pod's /metrics on its address.
func (c *cluster) podMetrics(t testing.TB, name string) string {
	t.Helper()
	p := c.pod(t, name)
	page, err := get(fmt.Sprintf("http://%s:8080/metrics", p.Status.PodIP))
	if err != nil {
		t.Fatalf("metrics of %s: %v", name, err)
	}
	return page
}

// run runs a program and returns its output, failing the test with it
// when the program fails.
func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// kubectl runs bin/kubectl on the cluster.
func (c *cluster) kubectlRun(t testing.TB, args ...string) string {
	t.Helper()
	return run(t, c.kubectl, append([]string{"--kubeconfig", c.kubeconfig}, args...)...)
}

// ensureNamespace creates a namespace for a test and deletes it when the
// test ends.
func (c *cluster) ensureNamespace(t testing.TB, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.cs.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.cs.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// deletePod deletes a pod as a user does: kubectl delete pod, with the
// pod's grace period.
func (c *cluster) deletePod(t testing.TB, name string) types.UID {
	t.Helper()
	uid := c.pod(t, name).UID
	c.kubectlRun(t, "-n", namespace, "delete", "pod", name, "--wait=false")
	return uid
}

// waitReplaced waits until pod name is a new pod (not old) and ready.
func (c *cluster) waitReplaced(t testing.TB, name string, old types.UID, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var p *corev1.Pod
	if !poll(timeout, func() bool {
		got, err := c.cs.CoreV1().Pods(namespace).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil || got.UID == old || !ready(got) {
			return false
		}
		p = got
		return true
	}) {
		c.describePods(t)
		t.Fatalf("pod %s was not replaced and ready within %s", name, timeout)
	}
	return p
}
