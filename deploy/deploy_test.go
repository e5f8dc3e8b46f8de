// Package deploy holds the manifests that run fieldwatch as a cluster-wide
// pod; its test checks that the real apiserver accepts them.
package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/fieldwatch/fieldwatch/internal/rbac"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
	"github.com/fieldwatch/fieldwatch/rules"
)

// TestMain starts the control plane with kubeadm's default Service range,
// which holds the ClusterIP deploy/audit/service.yaml pins.
func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Options{APIServerArgs: map[string][]string{"service-cluster-ip-range": {"10.96.0.0/12"}}})
}

// kustomization is the part of kustomize's schema deploy/ uses; decoding
// is strict, so a key this test does not understand fails it.
type kustomization struct {
	Namespace          string   `yaml:"namespace"`
	Resources          []string `yaml:"resources"`
	ConfigMapGenerator []struct {
		Name  string   `yaml:"name"`
		Files []string `yaml:"files"`
	} `yaml:"configMapGenerator"`
	GeneratorOptions struct {
		DisableNameSuffixHash bool `yaml:"disableNameSuffixHash"`
	} `yaml:"generatorOptions"`
}

func readKustomization(t *testing.T) kustomization {
	t.Helper()
	data, err := os.ReadFile("base/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&k); err != nil {
		t.Fatalf("base/kustomization.yaml: %v", err)
	}
	return k
}

// TestManifestsAccepted renders the kustomization (resources and the rules
// ConfigMap) and has the real apiserver accept every object with a
// server-side dry run; the namespace is created for real first so that the
// namespaced objects can be admitted.
func TestManifestsAccepted(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	k := readKustomization(t)
	if k.Namespace == "" || !k.GeneratorOptions.DisableNameSuffixHash {
		t.Errorf("kustomization: namespace %q, disableNameSuffixHash %v: the StatefulSet mounts the ConfigMap by its fixed name", k.Namespace, k.GeneratorOptions.DisableNameSuffixHash)
	}
	_, err := env.Clientset(t).CoreV1().Namespaces().Create(ctx,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: k.Namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) { // TestAuditOverlay may have made it
		t.Fatal(err)
	}
	for _, r := range k.Resources {
		objs, err := env.ApplyFiles(ctx, testenv.ApplyOptions{DryRun: true}, filepath.Join("base", r))
		if err != nil {
			t.Errorf("%s: %v", r, err)
			continue
		}
		if len(objs) == 0 {
			t.Errorf("%s holds no object", r)
		}
		for _, o := range objs {
			if ns := o.GetNamespace(); ns != "" && ns != k.Namespace {
				t.Errorf("%s: %s %s is in namespace %s, not %s", r, o.GetKind(), o.GetName(), ns, k.Namespace)
			}
		}
	}
	for _, g := range k.ConfigMapGenerator {
		cm := &corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: g.Name, Namespace: k.Namespace},
			Data:       map[string]string{},
		}
		for _, f := range g.Files {
			data, err := os.ReadFile(filepath.Join("base", f))
			if err != nil {
				t.Fatal(err)
			}
			cm.Data[filepath.Base(f)] = string(data)
		}
		if _, err := env.Clientset(t).CoreV1().ConfigMaps(k.Namespace).Create(ctx, cm, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("ConfigMap %s: %v", g.Name, err)
		}
	}
}

// TestDefaultRules: the rules the pod starts with load, and the RBAC in
// rbac.yaml is what `fieldwatch rbac` prints for them.
func TestDefaultRules(t *testing.T) {
	set, err := rules.Load("base/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	crds, err := rbac.CRDResources("../examples/crds")
	if err != nil {
		t.Fatal(err)
	}
	want, err := rbac.Generate(set, rbac.Options{LeaderElection: true, HistoryAPI: true, CRDs: crds})
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("base/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(got, want) {
		t.Errorf("base/rbac.yaml is not what `fieldwatch rbac --offline --rules deploy/base/rules.yaml --leader-elect --history-api --crds examples/crds` prints; run `make deploy/base/rbac.yaml`")
	}
}

// TestStatefulSet checks what the pods need to lose nothing and to be
// safe: leader election, a state directory on a volume of each pod's own
// that outlives it, time to drain before the kill, and the hardening, so
// that an edit cannot quietly drop them.
func TestStatefulSet(t *testing.T) {
	data, err := os.ReadFile("base/statefulset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"runAsNonRoot: true", "readOnlyRootFilesystem: true", "allowPrivilegeEscalation: false",
		"drop: [ALL]", "type: RuntimeDefault", "path: /healthz", "path: /readyz", "limits:", "requests:",
	} {
		if !strings.Contains(string(data), want) {
			t.Errorf("base/statefulset.yaml lacks %q", want)
		}
	}
	var sts appsv1.StatefulSet
	if err := sigsyaml.UnmarshalStrict(data, &sts); err != nil {
		t.Fatalf("statefulset.yaml: %v", err)
	}
	if n := deref(sts.Spec.Replicas, 1); n < 2 {
		t.Errorf("%d replicas: a standby is needed to take over", n)
	}
	c := sts.Spec.Template.Spec.Containers[0]
	args := map[string]string{}
	for _, a := range c.Args {
		k, v, _ := strings.Cut(a, "=")
		args[k] = v
	}
	if _, ok := args["--leader-elect"]; !ok {
		t.Error("the pods do not run --leader-elect")
	}
	stateDir := args["--state-dir"]
	claims := map[string]bool{}
	for _, pvc := range sts.Spec.VolumeClaimTemplates {
		claims[pvc.Name] = true
	}
	onClaim := false
	for _, m := range c.VolumeMounts {
		if m.MountPath == stateDir && claims[m.Name] {
			onClaim = true
		}
	}
	if stateDir == "" || !onClaim {
		t.Errorf("--state-dir %q is not on a volume claim of each pod: the baseline would not outlive the pod", stateDir)
	}
	grace := deref(sts.Spec.Template.Spec.TerminationGracePeriodSeconds, 30)
	if time.Duration(grace)*time.Second <= 20*time.Second {
		t.Errorf("terminationGracePeriodSeconds %d is not above fieldwatch's --grace-period (20s)", grace)
	}
	if sts.Spec.ServiceName == "" {
		t.Error("no serviceName")
	}
	// The Go runtime keeps the heap under the container's limit: RSS
	// follows the heap instead of the GC's default headroom (twice the
	// live heap) running into the limit.
	memLimit := false
	for _, e := range c.Env {
		if e.Name == "GOMEMLIMIT" && e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil &&
			e.ValueFrom.ResourceFieldRef.Resource == "limits.memory" {
			memLimit = true
		}
	}
	if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok || !memLimit {
		t.Error("GOMEMLIMIT is not set from the container's memory limit (env GOMEMLIMIT from resourceFieldRef limits.memory, and a memory limit)")
	}

	data, err = os.ReadFile("base/pdb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var pdb policyv1.PodDisruptionBudget
	if err := sigsyaml.UnmarshalStrict(data, &pdb); err != nil {
		t.Fatalf("pdb.yaml: %v", err)
	}
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if !sel.Matches(labels.Set(sts.Spec.Template.Labels)) {
		t.Error("the PodDisruptionBudget does not select the pods")
	}
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget maxUnavailable %v, want 1: one replica at a time", pdb.Spec.MaxUnavailable)
	}
}

// deref returns *p, or def when p is nil (the API's default).
func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// TestDockerfile checks that the Dockerfile builds a static binary (no
// cgo: the base is empty) that runs as non-root, and the layout make image
// builds without Docker: the same base, user, entrypoint and command.
func TestDockerfile(t *testing.T) {
	dockerfile, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	makefile, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CGO_ENABLED=0", "FROM scratch", "USER 65532:65532", `ENTRYPOINT ["/fieldwatch"]`} {
		if !strings.Contains(string(dockerfile), want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	var cmd []string
	for line := range strings.Lines(string(dockerfile)) {
		if rest, ok := strings.CutPrefix(line, "CMD "); ok {
			if err := json.Unmarshal([]byte(rest), &cmd); err != nil {
				t.Fatalf("Dockerfile CMD: %v", err)
			}
		}
	}
	if len(cmd) == 0 || !strings.Contains(string(makefile), "--cmd "+strings.Join(cmd, " --cmd ")) ||
		!strings.Contains(string(makefile), "--binary $(dir $(IMAGE_TAR))image/fieldwatch --tag $(IMAGE):$(IMAGE_TAG) --user 65532:65532") {
		t.Errorf("make image does not build the Dockerfile's layout: user 65532:65532 and the command %q", cmd)
	}
}

// TestNetworkPolicy: the NetworkPolicy selects the pod's labels and lets
// in nothing but the http port (the Service's target), from selected
// peers only; the container's other port, the history's, is reached by
// kubectl port-forward only.
func TestNetworkPolicy(t *testing.T) {
	var np networkingv1.NetworkPolicy
	decodeFile(t, "base/networkpolicy.yaml", &np)
	var sts appsv1.StatefulSet
	decodeFile(t, "base/statefulset.yaml", &sts)
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil || sel.Empty() || !sel.Matches(labels.Set(sts.Spec.Template.Labels)) {
		t.Errorf("podSelector %v does not select the pod's labels %v", np.Spec.PodSelector, sts.Spec.Template.Labels)
	}
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
		t.Errorf("policyTypes %v lack Ingress", np.Spec.PolicyTypes)
	}
	if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].From) == 0 || len(np.Spec.Ingress[0].Ports) != 1 ||
		np.Spec.Ingress[0].Ports[0].Port.String() != "http" {
		t.Fatalf("ingress %+v, want one rule: the http port from selected peers", np.Spec.Ingress)
	}
	ports := sts.Spec.Template.Spec.Containers[0].Ports
	if len(ports) != 2 || ports[0].Name != "http" || ports[1].Name != "history" {
		t.Errorf("the container's ports %v are not http, which the policy lets in, and history, which it does not", ports)
	}
	if args := strings.Join(sts.Spec.Template.Spec.Containers[0].Args, " "); !strings.Contains(args, fmt.Sprintf("--history-addr=:%d", ports[1].ContainerPort)) {
		t.Errorf("the arguments %s do not serve the history on port history", args)
	}
}

// decodeFile decodes a manifest strictly into obj.
func decodeFile(t *testing.T, path string, obj any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := sigsyaml.UnmarshalStrict(data, obj); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
