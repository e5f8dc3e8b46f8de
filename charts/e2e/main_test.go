//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/action"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/kube"
	release "helm.sh/helm/v4/pkg/release/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// The tests' namespaces all start with nsPrefix; the cluster-wide
// install is release releaseName in namespace releaseNS.
const (
	nsPrefix    = "chart-e2e"
	releaseName = "chart"
	releaseNS   = "chart-e2e"
	container   = "fieldwatch"
)

// c is the cluster of make cluster.
var c *cluster

// cluster is the running cluster and the image make image built.
type cluster struct {
	root       string // the repository
	kubeconfig string
	kubectl    string // bin/kubectl
	tool       string // bin/fieldwatch-cluster
	image      string // FIELDWATCH_IMAGE: name:tag
	cfg        *rest.Config
	cs         kubernetes.Interface
	dyn        dynamic.Interface
	disco      discovery.DiscoveryInterface
}

func TestMain(m *testing.M) {
	var err error
	if c, err = newCluster(); err != nil {
		fmt.Fprintf(os.Stderr, "charts/e2e: %v\n", err)
		os.Exit(1)
	}
	if err := c.setUp(); err != nil {
		fmt.Fprintf(os.Stderr, "charts/e2e: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	if os.Getenv("E2E_KEEP") == "" {
		if err := c.cleanUp(); err != nil {
			fmt.Fprintf(os.Stderr, "charts/e2e: clean up: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
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
	if c.cfg, err = clientcmd.BuildConfigFromFlags("", c.kubeconfig); err != nil {
		return nil, err
	}
	c.cfg.QPS, c.cfg.Burst = 100, 200
	// Listing every resource (what an uninstall left) lists deprecated
	// ones too, each with a warning that says nothing of the chart.
	c.cfg.WarningHandler = rest.NoWarnings{}
	if c.cs, err = kubernetes.NewForConfig(c.cfg); err != nil {
		return nil, err
	}
	if c.dyn, err = dynamic.NewForConfig(c.cfg); err != nil {
		return nil, err
	}
	c.disco = c.cs.Discovery()
	return c, nil
}

// exampleCRDs are the CRDs of examples/crds/ the tests apply.
var exampleCRDs = []string{"widgets.example.com", "gadgets.example.com"}

// crdsGone reports whether none of the example CRDs exists, not even
// terminating.
func (c *cluster) crdsGone(ctx context.Context) bool {
	crds := c.dyn.Resource(crdsGVR)
	for _, name := range exampleCRDs {
		if _, err := crds.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return false
		}
	}
	return true
}

// setUp applies the example CRDs the default rules and RBAC name, once
// those a previous run deleted are gone: applied while it terminates, a
// CRD is not created again and vanishes under the tests.
func (c *cluster) setUp() error {
	crds := c.dyn.Resource(crdsGVR)
	if !poll(3*time.Minute, func() bool {
		for _, name := range exampleCRDs {
			crd, err := crds.Get(context.Background(), name, metav1.GetOptions{})
			if err == nil && crd.GetDeletionTimestamp() != nil {
				return false
			}
		}
		return true
	}) {
		return fmt.Errorf("the example CRDs %v still terminating after 3 minutes", exampleCRDs)
	}
	files := []string{"-f", filepath.Join(c.root, "examples/crds/widgets.yaml"), "-f", filepath.Join(c.root, "examples/crds/gadgets.yaml")}
	if out, err := c.kubectlCmd(append([]string{"apply", "--server-side"}, files...)...); err != nil {
		return fmt.Errorf("apply the example CRDs: %v: %s", err, out)
	}
	if out, err := c.kubectlCmd(append([]string{"wait", "--for=condition=Established", "--timeout=60s"}, files...)...); err != nil {
		return fmt.Errorf("wait for the example CRDs: %v: %s", err, out)
	}
	return nil
}

func (c *cluster) kubectlCmd(args ...string) ([]byte, error) {
	return exec.Command(c.kubectl, append([]string{"--kubeconfig", c.kubeconfig}, args...)...).CombinedOutput()
}

// cleanUp uninstalls the releases left by a failed test, deletes the
// tests' namespaces (the claims the uninstalls left with them), the
// example CRDs and the image's second tag, and waits until the
// namespaces, their volumes and the CRDs are gone.
func (c *cluster) cleanUp() error {
	ctx := context.Background()
	var errs []string
	nss, err := c.cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var ours []string
	for _, ns := range nss.Items {
		if strings.HasPrefix(ns.Name, nsPrefix) {
			ours = append(ours, ns.Name)
		}
	}
	for _, ns := range ours {
		cfg, err := helmConfig(c.kubeconfig, ns)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		list := action.NewList(cfg)
		rels, err := list.Run()
		if err != nil {
			errs = append(errs, fmt.Sprintf("helm list -n %s: %v", ns, err))
		}
		for _, r := range rels {
			rel, ok := r.(*release.Release)
			if !ok {
				continue
			}
			u := action.NewUninstall(cfg)
			u.WaitStrategy = kube.HookOnlyStrategy
			u.IgnoreNotFound = true
			if _, err := u.Run(rel.Name); err != nil {
				errs = append(errs, fmt.Sprintf("helm uninstall -n %s %s: %v", ns, rel.Name, err))
			}
		}
		if err := c.cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err.Error())
		}
	}
	if out, err := c.kubectlCmd("delete", "--ignore-not-found", "--wait=false",
		"-f", filepath.Join(c.root, "examples/crds/widgets.yaml"), "-f", filepath.Join(c.root, "examples/crds/gadgets.yaml")); err != nil {
		errs = append(errs, fmt.Sprintf("delete the example CRDs: %v: %s", err, out))
	}
	_ = exec.Command(c.tool, "ctr", "-n", "k8s.io", "images", "rm", nextImage(c.image)).Run()
	if !poll(3*time.Minute, func() bool {
		if !c.crdsGone(ctx) {
			return false
		}
		for _, ns := range ours {
			if _, err := c.cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false
			}
		}
		pvs, err := c.cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, pv := range pvs.Items {
			if pv.Spec.ClaimRef != nil && strings.HasPrefix(pv.Spec.ClaimRef.Namespace, nsPrefix) {
				return false
			}
		}
		return true
	}) {
		errs = append(errs, fmt.Sprintf("namespaces %v, their volumes or the example CRDs still there after 3 minutes", ours))
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// nextImage is the second tag of the image, which the upgrade installs.
func nextImage(image string) string { return image + "-chart" }

// helmConfig is Helm's configuration for the cluster, with releases in
// namespace (Secrets, as the helm command keeps them).
func helmConfig(kubeconfig, namespace string) (*action.Configuration, error) {
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &kubeconfig
	flags.Namespace = &namespace
	cfg := action.NewConfiguration()
	cfg.SetLogger(slog.DiscardHandler)
	if err := cfg.Init(flags, namespace, "secret"); err != nil {
		return nil, fmt.Errorf("helm configuration: %w", err)
	}
	return cfg, nil
}

// loadChart loads charts/fieldwatch.
func loadChart(t testing.TB) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(filepath.Join(c.root, "charts/fieldwatch"))
	if err != nil {
		t.Fatalf("load the chart: %v", err)
	}
	return ch
}

// poll polls cond every 200 ms until it holds or timeout passes: the
// conditions read the cluster through its API, less often than
// testenv.Poll reads memory.
func poll(timeout time.Duration, cond func() bool) bool {
	return testenv.PollEvery(200*time.Millisecond, timeout, cond)
}
