//go:build e2e

package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/kube"
	release "helm.sh/helm/v4/pkg/release/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// rolloutTimeout bounds a helm install, upgrade or rollback that waits
// for its pods.
const rolloutTimeout = 5 * time.Minute

// chartRelease is the cluster-wide install of TestChart.
var chartRelease = install{ns: releaseNS, fullname: releaseName + "-fieldwatch"}

// reloadedRule is the rule the rules upgrade adds to the chart's default
// rules.
const reloadedRule = `
  - name: chart-reloaded
    description: added by helm upgrade
    match:
      resources: [{group: example.com, kind: Widget}]
      namespaces: [chart-e2e-reload]
    on: [create]
    actions:
      - log: {}
`

// imageValues sets the chart's image to name:tag.
func imageValues(image string) map[string]any {
	i := strings.LastIndex(image, ":")
	return map[string]any{"repository": image[:i], "tag": image[i+1:]}
}

// ensureNamespace creates a namespace unless it exists.
func ensureNamespace(t testing.TB, name string) {
	t.Helper()
	_, err := c.cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// chartSteps is the state TestChart's steps hand on: Helm's
// configuration and the values of the release's last revision.
type chartSteps struct {
	cfg  *action.Configuration
	vals map[string]any
}

// step is one named part of a test that runs its parts in order.
type step struct {
	name string
	run  func(*testing.T)
}

// runSteps runs steps in order as subtests, logging how long each took,
// and stops at the first that fails: each builds on the one before.
func runSteps(t *testing.T, steps []step) {
	t.Helper()
	for _, st := range steps {
		start := time.Now()
		ok := t.Run(st.name, st.run)
		t.Logf("%s: %s", st.name, time.Since(start).Round(100*time.Millisecond))
		if !ok {
			t.FailNow()
		}
	}
}

// TestChart installs the chart as its users do, with Helm's SDK, and takes
// it through a release's life on the cluster, in order: install (both
// pods ready, a custom resource fires), an upgrade with new rules (the
// running pods reload them), an upgrade to a new image tag under a
// steady writer (nothing lost), a rollback (the same), and the uninstall
// (nothing left but the claims). A step that fails stops the others.
func TestChart(t *testing.T) {
	ensureNamespace(t, releaseNS)
	cfg, err := helmConfig(c.kubeconfig, releaseNS)
	if err != nil {
		t.Fatal(err)
	}
	// The trail is signed with a key from a Secret of the user's, and
	// the cluster is named: the pods start only if they read the key.
	createSigningKeySecret(t, releaseNS, signingKeySecret)
	s := &chartSteps{cfg: cfg, vals: map[string]any{
		"image":       imageValues(c.image),
		"clusterName": chartClusterName,
		"history":     map[string]any{"signingKeySecret": map[string]any{"name": signingKeySecret, "key": "ed25519.pem"}},
	}}
	runSteps(t, []step{
		{"Install", s.install},
		{"CustomResourceFires", s.fires},
		{"UpgradeRules", s.upgradeRules},
		{"UpgradeImage", s.upgradeImage},
		{"Rollback", s.rollback},
		{"Uninstall", s.uninstall},
	})
}

// signingKeySecret is the Secret of TestChart's trail signing key, and
// chartClusterName the cluster's name it installs with.
const (
	signingKeySecret = "chart-history-signing"
	chartClusterName = "chart-e2e-cluster"
)

// createSigningKeySecret creates Secret name in ns with a new Ed25519
// private key (PKCS #8 PEM) under ed25519.pem.
func createSigningKeySecret(t *testing.T, ns, name string) {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Data:       map[string][]byte{"ed25519.pem": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})},
	}
	_, err = c.cs.CoreV1().Secrets(ns).Create(context.Background(), secret, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = c.cs.CoreV1().Secrets(ns).Update(context.Background(), secret, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// install runs helm install --wait with the image make image built, and
// checks the pods: both ready, running that image, as the chart's
// service account, each on a claim the cluster's provisioner bound.
func (s *chartSteps) install(t *testing.T) {
	in := action.NewInstall(s.cfg)
	in.ReleaseName = releaseName
	in.Namespace = releaseNS
	in.ServerSideApply = true
	in.WaitStrategy = kube.StatusWatcherStrategy
	in.Timeout = rolloutTimeout
	start := time.Now()
	if _, err := in.Run(loadChart(t), s.vals); err != nil {
		chartRelease.describePods(t)
		t.Fatalf("helm install --wait: %v", err)
	}
	t.Logf("helm install --wait: %s", time.Since(start).Round(100*time.Millisecond))
	pods := chartRelease.pods(t)
	if len(pods) != 2 {
		t.Fatalf("%d pods, want the chart's 2 replicas", len(pods))
	}
	for _, p := range pods {
		if !ready(&p) {
			t.Errorf("%s is not ready after helm install --wait", p.Name)
			chartRelease.describePods(t)
			chartRelease.logTail(t, p.Name)
		}
		if got := p.Spec.Containers[0].Image; got != c.image {
			t.Errorf("%s runs %s, not %s", p.Name, got, c.image)
		}
		if p.Spec.ServiceAccountName != chartRelease.fullname {
			t.Errorf("%s runs as %q, not the chart's service account %s", p.Name, p.Spec.ServiceAccountName, chartRelease.fullname)
		}
	}
	claims, err := c.cs.CoreV1().PersistentVolumeClaims(releaseNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var bound []string
	for _, pvc := range claims.Items {
		if pvc.Status.Phase == corev1.ClaimBound {
			bound = append(bound, pvc.Name)
		}
	}
	slices.Sort(bound)
	if want := []string{"state-chart-fieldwatch-0", "state-chart-fieldwatch-1"}; !slices.Equal(bound, want) {
		t.Errorf("bound claims %v, want %v", bound, want)
	}
}

// fires: a Widget created, changed and deleted shows up as three payloads
// of the default rule crd-audit in the leader's log, each naming the
// cluster (clusterName).
func (s *chartSteps) fires(t *testing.T) {
	const ns = nsPrefix + "-fire"
	ensureNamespace(t, ns)
	leader := chartRelease.leader(t)
	widgets := c.dyn.Resource(widgetsGVR).Namespace(ns)
	ctx := context.Background()
	created, err := widgets.Create(ctx, widget(ns, "fires"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := widgets.Patch(ctx, "fires", "application/merge-patch+json", []byte(`{"spec":{"size":2}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := widgets.Delete(ctx, "fires", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var got []string
	if !poll(time.Minute, func() bool {
		got = nil
		for _, p := range chartRelease.payloadsOf(t, leader) {
			if p.UID == string(created.GetUID()) && p.Rule == "crd-audit" {
				got = append(got, string(p.Type)+" in "+p.Cluster)
			}
		}
		return slices.Equal(got, []string{"created in " + chartClusterName, "updated in " + chartClusterName, "deleted in " + chartClusterName})
	}) {
		t.Errorf("the leader %s logged %v for the Widget, want created, updated, deleted in %s", leader, got, chartClusterName)
	}
}

func widget(ns, name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"size": int64(1)},
	}}
}

// with returns the values of the last revision with key set to v.
func (s *chartSteps) with(key string, v any) map[string]any {
	vals := maps.Clone(s.vals)
	vals[key] = v
	return vals
}

// upgrade runs helm upgrade --wait with vals, which become the values of
// the release's last revision.
func (s *chartSteps) upgrade(t *testing.T, vals map[string]any) {
	t.Helper()
	up := action.NewUpgrade(s.cfg)
	up.Namespace = releaseNS
	up.WaitStrategy = kube.StatusWatcherStrategy
	up.Timeout = rolloutTimeout
	start := time.Now()
	if _, err := up.Run(releaseName, loadChart(t), vals); err != nil {
		chartRelease.describePods(t)
		t.Fatalf("helm upgrade --wait: %v", err)
	}
	t.Logf("helm upgrade --wait: %s", time.Since(start).Round(100*time.Millisecond))
	s.vals = vals
}

// upgradeRules runs helm upgrade with the chart's default rules and one
// more: the ConfigMap changes and nothing else, the running pods reload
// it (fieldwatch_rules_reloads_total) without a restart, and the new rule
// fires.
func (s *chartSteps) upgradeRules(t *testing.T) {
	const ns = nsPrefix + "-reload"
	ensureNamespace(t, ns)
	type seen struct {
		container string
		restarts  int32
		reloads   float64
	}
	before := map[string]seen{}
	for _, p := range chartRelease.pods(t) {
		st := containerOf(&p)
		before[p.Name] = seen{st.ContainerID, st.RestartCount, chartRelease.metric(t, p.Name, "fieldwatch_rules_reloads_total ")}
	}
	revision := chartRelease.statefulSet(t).Status.CurrentRevision
	defaults, _ := loadChart(t).Values["rules"].(map[string]any)["inline"].(string)
	if defaults == "" {
		t.Fatal("the chart's values hold no rules.inline")
	}
	vals := s.with("rules", map[string]any{"inline": defaults + reloadedRule})
	upgraded := time.Now()
	s.upgrade(t, vals)
	if got := chartRelease.statefulSet(t).Status.CurrentRevision; got != revision {
		t.Errorf("the rules upgrade changed the StatefulSet's revision (%s to %s): the pods were replaced", revision, got)
	}
	for name, b := range before {
		if !poll(3*time.Minute, func() bool {
			return chartRelease.metric(t, name, "fieldwatch_rules_reloads_total ") > b.reloads
		}) {
			t.Fatalf("%s did not reload the rules within 3 minutes of the upgrade", name)
		}
		t.Logf("%s reloaded the rules %s after helm upgrade began", name, time.Since(upgraded).Round(time.Second))
		st := containerOf(chartRelease.pod(t, name))
		if st.ContainerID != b.container || st.RestartCount != b.restarts {
			t.Errorf("%s restarted to reload: container %s (%d restarts), was %s (%d)", name, st.ContainerID, st.RestartCount, b.container, b.restarts)
		}
	}
	leader := chartRelease.leader(t)
	created, err := c.dyn.Resource(widgetsGVR).Namespace(ns).Create(context.Background(), widget(ns, "after-upgrade"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !poll(time.Minute, func() bool {
		return slices.ContainsFunc(chartRelease.payloadsOf(t, leader), func(p payload) bool {
			return p.Rule == "chart-reloaded" && p.UID == string(created.GetUID())
		})
	}) {
		t.Errorf("the upgraded rule chart-reloaded did not fire on the leader %s", leader)
	}
}

// rollTo changes the release's image with change (an upgrade or a
// rollback) while a writer changes Widgets every 50 ms: the pods run the
// image after it, and every change is delivered.
func (s *chartSteps) rollTo(t *testing.T, ns, image string, change func(*testing.T)) {
	ensureNamespace(t, ns)
	logs := chartRelease.followLogs(t)
	w := startWriter(t, ns, 50*time.Millisecond)
	w.WaitWrites(t, 20)
	before := chartRelease.statefulSet(t).Status.CurrentRevision
	change(t)
	chartRelease.waitRolledOut(t, rolloutTimeout)
	if after := chartRelease.statefulSet(t).Status.CurrentRevision; after == before {
		t.Errorf("the StatefulSet is still at revision %s", after)
	}
	for _, p := range chartRelease.pods(t) {
		if got := p.Spec.Containers[0].Image; got != image {
			t.Errorf("%s runs %s, want %s", p.Name, got, image)
		}
	}
	w.WaitWrites(t, 20)
	o := settle(t, logs, w, "crd-audit", 2*time.Minute)
	t.Logf("%s", o)
	logs.CheckNoErrors(t)
}

// upgradeImage tags the image anew in the node's containerd (as a new
// release would be) and runs helm upgrade --reuse-values with that tag
// under a steady writer: the pods roll one at a time and nothing is
// lost.
func (s *chartSteps) upgradeImage(t *testing.T) {
	next := nextImage(c.image)
	if out, err := exec.Command(c.tool, "ctr", "-n", "k8s.io", "images", "tag", "--force", c.image, next).CombinedOutput(); err != nil {
		t.Fatalf("tag %s as %s: %v: %s", c.image, next, err, out)
	}
	vals := s.with("image", imageValues(next))
	s.rollTo(t, nsPrefix+"-upgrade", next, func(t *testing.T) { s.upgrade(t, vals) })
}

// rollback runs helm rollback to the previous revision (the rules
// upgrade's) under a steady writer: the pods roll back to the first
// image, nothing is lost, and the release is at a new revision with the
// rules of the one it went back to.
func (s *chartSteps) rollback(t *testing.T) {
	s.rollTo(t, nsPrefix+"-rollback", c.image, func(t *testing.T) {
		rb := action.NewRollback(s.cfg)
		rb.WaitStrategy = kube.StatusWatcherStrategy
		rb.Timeout = rolloutTimeout
		start := time.Now()
		if err := rb.Run(releaseName); err != nil {
			chartRelease.describePods(t)
			t.Fatalf("helm rollback --wait: %v", err)
		}
		t.Logf("helm rollback --wait: %s", time.Since(start).Round(100*time.Millisecond))
	})
	r, err := action.NewGet(s.cfg).Run(releaseName)
	if err != nil {
		t.Fatal(err)
	}
	rel, ok := r.(*release.Release)
	if !ok {
		t.Fatalf("helm get returned a %T", r)
	}
	if rel.Version != 4 || rel.Info.Status != "deployed" {
		t.Errorf("after the rollback the release is at revision %d, %s; want 4, deployed", rel.Version, rel.Info.Status)
	}
	cm, err := c.cs.CoreV1().ConfigMaps(releaseNS).Get(context.Background(), chartRelease.fullname+"-rules", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cm.Data["rules.yaml"], "chart-reloaded") {
		t.Errorf("after the rollback to revision 2 the rules lack its rule chart-reloaded:\n%s", cm.Data["rules.yaml"])
	}
}

// uninstall runs helm uninstall --wait and lists what is left of the
// release: in its namespace every object of every resource the cluster
// serves but the namespace's own (its default ServiceAccount, the root
// CA ConfigMap) and Events; cluster-wide every object labelled with the
// release. The chart's README says what stays: the claims of the pods;
// fieldwatch's own Lease stays too.
func (s *chartSteps) uninstall(t *testing.T) {
	u := action.NewUninstall(s.cfg)
	u.WaitStrategy = kube.StatusWatcherStrategy
	u.Timeout = rolloutTimeout
	start := time.Now()
	if _, err := u.Run(releaseName); err != nil {
		t.Fatalf("helm uninstall --wait: %v", err)
	}
	t.Logf("helm uninstall --wait: %s", time.Since(start).Round(100*time.Millisecond))
	// The signing key's Secret is the user's, not the release's.
	if err := c.cs.CoreV1().Secrets(releaseNS).Delete(context.Background(), signingKeySecret, metav1.DeleteOptions{}); err != nil {
		t.Error(err)
	}
	want := []string{
		"Lease " + chartRelease.fullname,
		"PersistentVolumeClaim state-chart-fieldwatch-0",
		"PersistentVolumeClaim state-chart-fieldwatch-1",
	}
	var left []string
	// The pods and what their StatefulSet owned go after it, by the
	// garbage collector.
	if !poll(2*time.Minute, func() bool {
		left = leftOf(t, releaseNS, "app.kubernetes.io/instance="+releaseName)
		return slices.Equal(left, want)
	}) {
		t.Errorf("helm uninstall left %q, want %q", left, want)
	}
	t.Logf("left after helm uninstall: %q", left)
}

// leftOf lists the objects of namespace ns (but its default
// ServiceAccount, its root CA ConfigMap and Events) and the cluster-wide
// objects that carry label selector, as "Kind name", sorted.
func leftOf(t *testing.T, ns, selector string) []string {
	t.Helper()
	lists, err := c.disco.ServerPreferredResources()
	if err != nil {
		t.Fatalf("discovery: %v", err)
	}
	var left []string
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range l.APIResources {
			if !slices.Contains(r.Verbs, "list") || r.Kind == "Event" {
				continue
			}
			ri := c.dyn.Resource(gv.WithResource(r.Name))
			var objs *unstructured.UnstructuredList
			if r.Namespaced {
				objs, err = ri.Namespace(ns).List(context.Background(), metav1.ListOptions{})
			} else {
				objs, err = ri.List(context.Background(), metav1.ListOptions{LabelSelector: selector})
			}
			if err != nil {
				t.Fatalf("list %s: %v", r.Name, err)
			}
			for _, o := range objs.Items {
				if (r.Kind == "ServiceAccount" && o.GetName() == "default") || (r.Kind == "ConfigMap" && o.GetName() == "kube-root-ca.crt") {
					continue
				}
				left = append(left, fmt.Sprintf("%s %s", r.Kind, o.GetName()))
			}
		}
	}
	slices.Sort(left)
	return left
}
