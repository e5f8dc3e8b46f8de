//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// c is the cluster of make cluster; guardAtStart the egress guard as read
// back before any pod of these tests started.
var (
	c            *cluster
	guardAtStart guardReport
)

func TestMain(m *testing.M) {
	var err error
	if c, err = newCluster(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		os.Exit(1)
	}
	guardAtStart = readGuard(c)
	code := m.Run()
	if os.Getenv("E2E_KEEP") == "" {
		if err := c.cleanUp(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: clean up: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// TestEndToEnd runs fieldwatch as its users do, in order: the cluster's
// network is checked before the first pod; deploy/ is applied; then each
// step exercises the running deployment. A step that needs the deployment
// and finds it broken by an earlier one waits for it to roll out first.
func TestEndToEnd(t *testing.T) {
	steps := []struct {
		name   string
		run    func(*testing.T)
		needed bool // the steps after it cannot run without it
	}{
		{"NetworkGuard", testNetworkGuard, false},
		{"Deploy", testDeploy, true},
		{"ServiceAccount", testServiceAccount, false},
		{"CustomResourceFires", testCustomResourceFires, false},
		{"MetricsThroughService", testMetricsThroughService, false},
		{"RulesReload", testRulesReload, false},
		{"LeaderPodDeleted", testLeaderPodDeleted, false},
		{"RollingUpdate", testRollingUpdate, false},
		{"AuditAttribution", testAuditAttribution, false},
		{"OOMKilled", testOOMKilled, false},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.run) && s.needed {
			t.FailNow()
		}
	}
}

// deployed makes sure deploy/ runs (applying it when a step runs alone)
// and has rolled out.
func deployed(t testing.TB) {
	t.Helper()
	if _, err := c.cs.AppsV1().StatefulSets(namespace).Get(context.Background(), statefulName, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		c.applyFiles(t, "examples/crds/widgets.yaml", "examples/crds/gadgets.yaml")
		c.apply(t, c.render(t, "deploy", c.image)...)
	}
	c.waitRolledOut(t, 5*time.Minute)
}

// cleanUp deletes what the tests created: deploy/audit/'s objects (a
// superset of deploy/'s), the test namespaces and RBAC, the example CRDs,
// the image tag of the rolling update; then waits until the namespaces
// and the CRDs are gone and the provisioner deleted the released volumes.
func (c *cluster) cleanUp() error {
	ctx := context.Background()
	var errs []string
	del := func(args ...string) {
		out, err := exec.Command(c.kubectl, append([]string{"--kubeconfig", c.kubeconfig, "delete", "--ignore-not-found", "--wait=false"}, args...)...).CombinedOutput()
		if err != nil {
			errs = append(errs, fmt.Sprintf("kubectl delete %s: %v: %s", strings.Join(args, " "), err, out))
		}
	}
	del("-k", filepath.Join(c.root, "deploy/audit"))
	del("namespace", namespace)
	ours := []string{namespace}
	nss, err := c.cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err == nil {
		for _, ns := range nss.Items {
			if strings.HasPrefix(ns.Name, "e2e-") {
				del("namespace", ns.Name)
				ours = append(ours, ns.Name)
			}
		}
	}
	del("clusterrole", writerRole)
	del("-f", filepath.Join(c.root, "examples/crds/widgets.yaml"), "-f", filepath.Join(c.root, "examples/crds/gadgets.yaml"))
	_ = exec.Command(c.tool, "ctr", "-n", "k8s.io", "images", "rm", c.image+"-rollout").Run()
	// Gone, not going: the namespaces (their Widgets, deleted one by
	// one, are changes to whatever watches next on this cluster, the
	// chart's tests for one), the example CRDs (one still terminating
	// when the next tests apply them is not created again, and vanishes
	// under them) and the volumes.
	if !poll(3*time.Minute, func() bool {
		for _, ns := range ours {
			if _, err := c.cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false
			}
		}
		crds := c.dyn.Resource(crdGVR)
		for _, name := range []string{"widgets.example.com", "gadgets.example.com"} {
			if _, err := crds.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false
			}
		}
		pvs, err := c.cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, pv := range pvs.Items {
			if pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Namespace == namespace {
				return false
			}
		}
		return true
	}) {
		errs = append(errs, fmt.Sprintf("namespaces %v, the example CRDs or the volumes still there after 3 minutes", ours))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}
