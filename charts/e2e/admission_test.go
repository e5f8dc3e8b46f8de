//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/kube"
	release "helm.sh/helm/v4/pkg/release/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/rbac"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
	"github.com/fieldwatch/fieldwatch/rules"
)

// The CRD of testdata/gizmos, which the CRD guard steps upgrade.
const (
	gizmosCRD   = "gizmos.guard.chart-e2e.example.com"
	gizmosGroup = "guard.chart-e2e.example.com"
)

var gizmosGVR = schema.GroupVersionResource{Group: gizmosGroup, Version: "v1", Resource: "gizmos"}

// admissionSteps is the state TestChartAdmission's steps hand on.
type admissionSteps struct {
	rel     install
	cfg     *action.Configuration
	vals    map[string]any
	gizmoNS string
	helmEnv []string // a home of its own for the helm command
}

// TestChartAdmission installs the chart with its defaults for a managed
// cluster: attribution from fieldwatch's admission webhook and no audit
// source, the CRD guard in warn mode, and the RBAC `fieldwatch rbac
// --crd-guard -o helm-values` prints for the cluster's CRDs. In order: the
// admission NetworkPolicy is applied as rendered; `helm upgrade` of a
// chart whose CRD narrows an enum prints fieldwatch's warning (the helm
// command, as users run it); two users writing Widgets in a steady stream
// each get every change attributed to them, from admission, exactly,
// through the deletion of the leader's pod and a rolling update (helm
// upgrade to the guard's deny mode); then the narrowing upgrade fails with
// the guard's message, and `kubectl delete crd` is refused while the CRD
// has objects. A step that fails stops the others.
func TestChartAdmission(t *testing.T) {
	helm := filepath.Join(c.root, "bin/helm")
	if _, err := os.Stat(helm); err != nil {
		t.Fatalf("%v: make e2e builds bin/helm (make helm)", err)
	}
	const name = "adm"
	s := &admissionSteps{rel: install{ns: nsPrefix + "-adm", fullname: name + "-fieldwatch"}, gizmoNS: nsPrefix + "-adm-gizmos"}
	for _, n := range []string{s.rel.ns, s.gizmoNS} {
		ensureNamespace(t, n)
	}
	home := t.TempDir()
	s.helmEnv = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	var err error
	if s.cfg, err = helmConfig(c.kubeconfig, s.rel.ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.removeGizmos)
	runSteps(t, []step{
		{"Install", s.install},
		{"NetworkPolicy", s.networkPolicy},
		{"GuardWarns", s.guardWarns},
		{"Attribution", s.attribution},
		{"GuardDenies", s.guardDenies},
		{"DeleteRefused", s.deleteRefused},
		{"Uninstall", s.uninstall},
	})
}

// install installs the chart with its defaults (admission on, the guard
// in warn mode) and the RBAC of its default rules for the Widgets,
// Gadgets and Gizmos there are, with the guard's lists.
func (s *admissionSteps) install(t *testing.T) {
	rulesText, _ := loadChart(t).Values["rules"].(map[string]any)["inline"].(string)
	set, err := rules.Parse("rules.yaml", []byte(rulesText))
	if err != nil {
		t.Fatal(err)
	}
	custom := func(group, version, resource, kind string) change.Resource {
		return change.Resource{Group: group, Version: version, Resource: resource, Kind: kind, Namespaced: true, Custom: true, Preferred: true}
	}
	opts := rbac.Options{
		Resources: []change.Resource{custom("example.com", "v1", "widgets", "Widget"), custom("example.com", "v1alpha1", "gadgets", "Gadget"),
			custom(gizmosGroup, "v1", "gizmos", "Gizmo")},
		Namespace: s.rel.ns, ServiceAccount: s.rel.fullname, LeaderElection: true, HistoryAPI: true, CRDGuard: true,
	}
	perms, err := rbac.Compute(set, opts)
	if err != nil {
		t.Fatal(err)
	}
	out, err := perms.HelmValues(opts)
	if err != nil {
		t.Fatal(err)
	}
	s.vals = map[string]any{}
	if err := yaml.Unmarshal(out, &s.vals); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	s.vals["image"] = imageValues(c.image)
	in := action.NewInstall(s.cfg)
	in.ReleaseName = "adm"
	in.Namespace = s.rel.ns
	in.ServerSideApply = true
	in.WaitStrategy = kube.StatusWatcherStrategy
	in.Timeout = rolloutTimeout
	start := time.Now()
	if _, err := in.Run(loadChart(t), s.vals); err != nil {
		s.rel.describePods(t)
		t.Fatalf("helm install --wait: %v", err)
	}
	t.Logf("helm install --wait (admission, CRD guard warn): %s", time.Since(start).Round(100*time.Millisecond))
	if pods := s.rel.pods(t); len(pods) != 2 {
		t.Fatalf("%d pods, want 2", len(pods))
	}
	vwc, err := c.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(context.Background(), s.rel.fullname, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, h := range vwc.Webhooks {
		names = append(names, h.Name)
	}
	if !slices.Equal(names, []string{rbac.WebhookName, rbac.GuardWebhookName}) {
		t.Errorf("webhooks %v, want the record's and the guard's", names)
	}
}

// networkPolicy: the release's NetworkPolicies, the admission one among
// them, are in the cluster as the chart rendered them.
func (s *admissionSteps) networkPolicy(t *testing.T) {
	r, err := action.NewGet(s.cfg).Run("adm")
	if err != nil {
		t.Fatal(err)
	}
	rel, ok := r.(*release.Release)
	if !ok {
		t.Fatalf("helm get returned a %T", r)
	}
	nps := c.dyn.Resource(schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"}).Namespace(s.rel.ns)
	var rendered []string
	for doc := range strings.SplitSeq(rel.Manifest, "\n---\n") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil || obj["kind"] != "NetworkPolicy" {
			continue
		}
		u := unstructured.Unstructured{Object: obj}
		rendered = append(rendered, u.GetName())
		live, err := nps.Get(context.Background(), u.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Errorf("NetworkPolicy %s: %v", u.GetName(), err)
			continue
		}
		if !reflect.DeepEqual(jsonValue(t, live.Object["spec"]), jsonValue(t, obj["spec"])) {
			t.Errorf("NetworkPolicy %s: in the cluster %v, rendered %v", u.GetName(), live.Object["spec"], obj["spec"])
		}
	}
	if !slices.Contains(rendered, s.rel.fullname+"-admission") {
		t.Errorf("the release renders NetworkPolicies %v, without %s-admission", rendered, s.rel.fullname)
	}
}

// jsonValue returns v as encoding/json decodes it (numbers as float64).
func jsonValue(t *testing.T, v any) any {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := yaml.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// helm runs the helm command with args and returns its output, stdout
// and stderr (where client-go's warnings go).
func (s *admissionSteps) helm(args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(c.root, "bin/helm"), append([]string{"--kubeconfig", c.kubeconfig}, args...)...)
	cmd.Env = s.helmEnv
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// gizmos runs helm upgrade --install of testdata/gizmos with colors.
func (s *admissionSteps) gizmos(colors ...string) (string, error) {
	return s.helm("upgrade", "--install", "gizmos", filepath.Join(c.root, "charts/e2e/testdata/gizmos"), "-n", s.gizmoNS,
		"--set", "colors={"+strings.Join(colors, ",")+"}")
}

// guardWarns installs testdata/gizmos, makes a Gizmo of each color, waits
// until the guard answers the apiserver's calls, and runs helm upgrade
// with green left out: the upgrade goes through and helm prints the
// guard's warning naming the green Gizmo.
func (s *admissionSteps) guardWarns(t *testing.T) {
	if out, err := s.gizmos("red", "green", "blue"); err != nil {
		t.Fatalf("helm install gizmos: %v\n%s", err, out)
	}
	if out, err := c.kubectlCmd("wait", "--for=condition=Established", "--timeout=60s", "crd/"+gizmosCRD); err != nil {
		t.Fatalf("the gizmos CRD: %v: %s", err, out)
	}
	ctx := context.Background()
	for _, color := range []string{"red", "green", "blue"} {
		g := &unstructured.Unstructured{Object: map[string]any{"apiVersion": gizmosGroup + "/v1", "kind": "Gizmo",
			"metadata": map[string]any{"name": color}, "spec": map[string]any{"color": color}}}
		if _, err := c.dyn.Resource(gizmosGVR).Namespace(s.gizmoNS).Create(ctx, g, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	// Dry runs of a label on the CRD until a replica counts a review.
	n := 0
	if !poll(2*time.Minute, func() bool {
		n++
		_, _ = c.kubectlCmd("label", "--overwrite", "--dry-run=server", "crd/"+gizmosCRD, fmt.Sprintf("probe=%d", n))
		var reviews float64
		for _, p := range s.rel.pods(t) {
			if ready(&p) {
				reviews += s.rel.metric(t, p.Name, "fieldwatch_crd_guard_reviews_total")
			}
		}
		return reviews > 0
	}) {
		t.Fatal("no replica reviewed a CRD change within 2 minutes")
	}
	out, err := s.gizmos("red", "blue")
	if err != nil {
		t.Fatalf("helm upgrade gizmos in warn mode: %v\n%s", err, out)
	}
	want := "fieldwatch: enum-values-removed spec.color (v1): 1 object rejected: " + s.gizmoNS + "/green"
	if !strings.Contains(out, want) {
		t.Errorf("helm upgrade printed\n%s\nwithout %q", out, want)
	}
	t.Logf("helm upgrade printed:\n%s", out)
}

// writerUser is a user writing Widgets in a namespace of its own.
type writerUser struct {
	name, ns string
	w        *testenv.WidgetWriters
}

// userClient returns a client that acts as user (the admin impersonating
// it), allowed to write Widgets in ns.
func userClient(t *testing.T, user, ns string) dynamic.Interface {
	t.Helper()
	ctx := context.Background()
	const role = nsPrefix + "-widget-writer"
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"example.com"}, Resources: []string{"widgets"}, Verbs: []string{"*"}}}}
	if _, err := c.cs.RbacV1().ClusterRoles().Create(ctx, cr, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.cs.RbacV1().ClusterRoles().Delete(context.Background(), role, metav1.DeleteOptions{}) })
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role + "-" + user, Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}}
	if _, err := c.cs.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(c.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !poll(time.Minute, func() bool {
		_, err := dyn.Resource(widgetsGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		return err == nil
	}) {
		t.Fatalf("%s may not list Widgets in %s a minute after the binding", user, ns)
	}
	return dyn
}

// attribution runs alice and bob writing Widgets every 100 ms, each in a
// namespace of its own, deletes the leader's pod, then rolls the pods
// with helm upgrade to the guard's deny mode: every change of their
// Widgets is delivered, and each payload names its writer, from
// admission, exactly.
func (s *admissionSteps) attribution(t *testing.T) {
	ctx := context.Background()
	users := []*writerUser{{name: "alice"}, {name: "bob"}}
	clients := map[string]dynamic.Interface{}
	for _, u := range users {
		u.ns = nsPrefix + "-adm-" + u.name
		ensureNamespace(t, u.ns)
		clients[u.name] = userClient(t, u.name, u.ns)
	}
	logs := s.rel.followLogs(t)
	// A first change attributed to alice: the apiserver calls the
	// endpoint with the caBundle fieldwatch keeps.
	probes := clients["alice"].Resource(widgetsGVR).Namespace(users[0].ns)
	attributed := false
	for i := 0; !attributed && i < 30; i++ {
		created, err := probes.Create(ctx, widget(users[0].ns, fmt.Sprintf("probe-%d", i)), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		attributed = poll(4*time.Second, func() bool {
			return slices.ContainsFunc(logs.payloads("crd-audit"), func(p payload) bool {
				return p.UID == string(created.GetUID()) && p.Actor != nil && p.Actor.User != nil && p.Actor.User.Username == "alice"
			})
		})
	}
	if !attributed {
		t.Fatal("no change was attributed to its writer within 2 minutes of the install")
	}
	for _, u := range users {
		u.w = startWriterAs(t, clients[u.name], u.ns, 100*time.Millisecond)
	}
	for _, u := range users {
		u.w.WaitWrites(t, 20)
	}

	leader := s.rel.leader(t)
	oldUID := s.rel.pod(t, leader).UID
	deleted := time.Now()
	if err := c.cs.CoreV1().Pods(s.rel.ns).Delete(ctx, leader, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if !poll(3*time.Minute, func() bool {
		p, err := c.cs.CoreV1().Pods(s.rel.ns).Get(ctx, leader, metav1.GetOptions{})
		return err == nil && p.UID != oldUID && ready(p)
	}) {
		s.rel.describePods(t)
		t.Fatalf("%s was not replaced by a ready pod within 3 minutes", leader)
	}
	next := s.rel.leader(t)
	t.Logf("the leader %s was deleted; %s leads %s later", leader, next, time.Since(deleted).Round(100*time.Millisecond))
	for _, u := range users {
		u.w.WaitWrites(t, 20)
	}

	revision := s.rel.statefulSet(t).Status.CurrentRevision
	vals := map[string]any{}
	for k, v := range s.vals {
		vals[k] = v
	}
	vals["crdGuard"] = map[string]any{"mode": "deny"}
	up := action.NewUpgrade(s.cfg)
	up.Namespace = s.rel.ns
	up.WaitStrategy = kube.StatusWatcherStrategy
	up.Timeout = rolloutTimeout
	rolled := time.Now()
	if _, err := up.Run("adm", loadChart(t), vals); err != nil {
		s.rel.describePods(t)
		t.Fatalf("helm upgrade to crdGuard.mode deny: %v", err)
	}
	s.rel.waitRolledOut(t, rolloutTimeout)
	if got := s.rel.statefulSet(t).Status.CurrentRevision; got == revision {
		t.Fatalf("the upgrade left the StatefulSet at revision %s", got)
	}
	s.vals = vals
	t.Logf("helm upgrade rolled both pods in %s", time.Since(rolled).Round(100*time.Millisecond))
	for _, u := range users {
		u.w.WaitWrites(t, 20)
	}

	uids := map[string]string{} // object uid -> its writer
	for _, u := range users {
		o := settle(t, logs, u.w, "crd-audit", 3*time.Minute)
		t.Logf("%s's writes: %s", u.name, o)
		for _, m := range u.w.Made() {
			uids[string(m.UID)] = u.name
		}
	}
	counts := map[string]int{}
	var wrong []string
	for _, p := range logs.payloads("crd-audit") {
		who, ok := uids[p.UID]
		if !ok {
			continue
		}
		user, source, match := "", "", "no actor"
		if a := p.Actor; a != nil {
			source, match = a.Source, string(a.Match)
			if a.User != nil {
				user = a.User.Username
			}
		}
		if user == who && source == change.SourceAdmission && match == string(change.MatchExact) {
			counts[p.pod+" "+who]++
			continue
		}
		wrong = append(wrong, fmt.Sprintf("%s: %s %s/%s rv %s by %s: user %q, source %q, match %q", p.pod, p.Type, p.Namespace, p.Name, p.ResourceVersion, who, user, source, match))
	}
	t.Logf("payloads attributed to their writer, by pod and writer: %v", counts)
	if len(wrong) > 0 {
		t.Errorf("%d payloads not attributed to their writer from admission, first %d:\n  %s", len(wrong), min(20, len(wrong)), strings.Join(wrong[:min(20, len(wrong))], "\n  "))
		var lines []string
		for _, l := range logs.Lines() {
			if strings.Contains(l.Text, `"level":"WARN"`) || strings.Contains(l.Text, "Lease") || strings.Contains(l.Text, "stopping") || strings.Contains(l.Text, "took over") {
				lines = append(lines, l.Pod+": "+l.Text)
			}
		}
		t.Logf("the pods' warnings and turns:\n  %s", strings.Join(lines, "\n  "))
	}
	logs.CheckNoErrors(t)
}

// guardDenies: in deny mode, the upgrade that leaves blue out fails with
// the guard's message naming the Gizmos it strands (blue, and green,
// which the first narrowing stranded already), and the CRD keeps its
// enum.
func (s *admissionSteps) guardDenies(t *testing.T) {
	out, err := s.gizmos("red")
	if err == nil {
		t.Fatalf("helm upgrade gizmos narrowing the enum in deny mode went through:\n%s", out)
	}
	for _, want := range []string{"denied the request", "fieldwatch's CRD guard refuses this change of " + gizmosCRD,
		"enum-values-removed spec.color (v1): 2 objects rejected: " + s.gizmoNS + "/blue"} {
		if !strings.Contains(out, want) {
			t.Errorf("helm upgrade printed\n%s\nwithout %q", out, want)
		}
	}
	t.Logf("helm upgrade printed:\n%s", out)
	crd, err := c.dyn.Resource(crdsGVR).Get(context.Background(), gizmosCRD, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	enum, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	if !strings.Contains(fmt.Sprint(enum), "enum:[red blue]") {
		t.Errorf("the refused upgrade changed the CRD: %v", enum)
	}
}

// deleteRefused: kubectl delete crd is refused while the CRD has objects,
// saying how many and how to go ahead.
func (s *admissionSteps) deleteRefused(t *testing.T) {
	out, err := c.kubectlCmd("delete", "crd", gizmosCRD, "--wait=false")
	if err == nil {
		t.Fatalf("kubectl delete crd %s with 3 Gizmos went through in deny mode:\n%s", gizmosCRD, out)
	}
	// kubectl prints an Invalid refusal by its causes.
	for _, want := range []string{"deleting CRD " + gizmosCRD + " deletes 3 Gizmos", "metadata.annotations[fieldwatch.io/allow-breaking]"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("kubectl delete crd printed\n%s\nwithout %q", out, want)
		}
	}
	t.Logf("kubectl delete crd printed:\n%s", out)
	if _, err := c.dyn.Resource(crdsGVR).Get(context.Background(), gizmosCRD, metav1.GetOptions{}); err != nil {
		t.Errorf("the CRD after the refused delete: %v", err)
	}
}

// uninstall removes testdata/gizmos (its CRD annotated, as the guard asks
// for in deny mode) and the release.
func (s *admissionSteps) uninstall(t *testing.T) {
	s.removeGizmos()
	if _, err := c.dyn.Resource(crdsGVR).Get(context.Background(), gizmosCRD, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		if !poll(2*time.Minute, func() bool {
			_, err := c.dyn.Resource(crdsGVR).Get(context.Background(), gizmosCRD, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}) {
			t.Errorf("the annotated CRD %s is still there 2 minutes after helm uninstall gizmos", gizmosCRD)
		}
	}
	u := action.NewUninstall(s.cfg)
	u.WaitStrategy = kube.StatusWatcherStrategy
	u.Timeout = rolloutTimeout
	if _, err := u.Run("adm"); err != nil {
		t.Fatalf("helm uninstall --wait: %v", err)
	}
}

// removeGizmos annotates the gizmos CRD to let its deletion through the
// guard, and uninstalls testdata/gizmos; it does nothing once they are
// gone.
func (s *admissionSteps) removeGizmos() {
	_, _ = c.kubectlCmd("annotate", "--overwrite", "crd/"+gizmosCRD, "fieldwatch.io/allow-breaking=the end-to-end test is done")
	_, _ = s.helm("uninstall", "gizmos", "-n", s.gizmoNS, "--ignore-not-found")
}
