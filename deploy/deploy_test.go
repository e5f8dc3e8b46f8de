// Package deploy holds the manifests that run fieldwatch as a cluster-wide
// pod; its test checks that the real apiserver accepts them.
package deploy

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fieldwatch/fieldwatch/internal/app"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
	"github.com/fieldwatch/fieldwatch/rules"
)

func TestMain(m *testing.M) { testenv.Main(m, testenv.Options{}) }

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
	data, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
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
		t.Errorf("kustomization: namespace %q, disableNameSuffixHash %v: the Deployment mounts the ConfigMap by its fixed name", k.Namespace, k.GeneratorOptions.DisableNameSuffixHash)
	}
	_, err := env.Clientset(t).CoreV1().Namespaces().Create(ctx,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: k.Namespace}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range k.Resources {
		objs, err := env.ApplyFiles(ctx, testenv.ApplyOptions{DryRun: true}, r)
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
			data, err := os.ReadFile(f)
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
	set, err := rules.Load("rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want, err := app.RBAC(set, app.RBACOptions{LeaderElection: true})
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(got, want) {
		t.Errorf("rbac.yaml is not what `fieldwatch rbac --offline --rules deploy/rules.yaml --leader-elect` prints; run `make deploy/rbac.yaml`")
	}
}

// TestDeploymentHardening checks the pod's security settings the issue
// asks for, so that an edit cannot quietly drop them.
func TestDeploymentHardening(t *testing.T) {
	data, err := os.ReadFile("deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"runAsNonRoot: true", "readOnlyRootFilesystem: true", "allowPrivilegeEscalation: false",
		"drop: [ALL]", "type: RuntimeDefault", "path: /healthz", "path: /readyz", "limits:", "requests:",
	} {
		if !strings.Contains(string(data), want) {
			t.Errorf("deployment.yaml lacks %q", want)
		}
	}
}

// TestDockerfile checks that the image builds a static binary (no cgo:
// the distroless static base has no C library) and runs as non-root.
func TestDockerfile(t *testing.T) {
	dockerfile, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CGO_ENABLED=0", "distroless/static", "nonroot", "USER 65532"} {
		if !strings.Contains(string(dockerfile), want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
}
