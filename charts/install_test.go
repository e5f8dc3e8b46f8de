package charts

import (
	"context"
	"slices"
	"testing"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/kube"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// helmConfig is Helm's configuration for the cluster of kubeconfig, with
// releases in namespace (Secrets, as the helm command keeps them).
func helmConfig(t *testing.T, kubeconfig, namespace string) *action.Configuration {
	t.Helper()
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &kubeconfig
	flags.Namespace = &namespace
	cfg := action.NewConfiguration()
	cfg.SetLogger(discard)
	if err := cfg.Init(flags, namespace, "secret"); err != nil {
		t.Fatalf("helm configuration: %v", err)
	}
	return cfg
}

// helmInstall installs the chart as release name in namespace, as `helm
// install` does.
func helmInstall(t *testing.T, cfg *action.Configuration, name, namespace string, vals map[string]any) {
	t.Helper()
	install := action.NewInstall(cfg)
	install.ReleaseName = name
	install.Namespace = namespace
	install.ServerSideApply = true
	install.WaitStrategy = kube.HookOnlyStrategy // helm install without --wait
	t.Cleanup(func() {                           // a test that failed halfway leaves no release for the next
		uninstall := action.NewUninstall(cfg)
		uninstall.WaitStrategy = kube.HookOnlyStrategy
		uninstall.IgnoreNotFound = true
		_, _ = uninstall.Run(name)
	})
	if _, err := install.Run(loadChart(t), vals); err != nil {
		t.Fatalf("helm install %s: %v", name, err)
	}
}

// helmUninstall uninstalls a release, as `helm uninstall` does.
func helmUninstall(t *testing.T, cfg *action.Configuration, name string) {
	t.Helper()
	uninstall := action.NewUninstall(cfg)
	uninstall.WaitStrategy = kube.HookOnlyStrategy
	if _, err := uninstall.Run(name); err != nil {
		t.Fatalf("helm uninstall %s: %v", name, err)
	}
}

// ensureNamespace creates a namespace unless it exists.
func ensureNamespace(t *testing.T, env *testenv.Env, name string) {
	t.Helper()
	_, err := env.Clientset(t).CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// gvrOf maps the kinds the chart renders to their resources.
var gvrOf = map[string]schema.GroupVersionResource{
	"ServiceAccount":      {Version: "v1", Resource: "serviceaccounts"},
	"ConfigMap":           {Version: "v1", Resource: "configmaps"},
	"Service":             {Version: "v1", Resource: "services"},
	"StatefulSet":         {Group: "apps", Version: "v1", Resource: "statefulsets"},
	"PodDisruptionBudget": {Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"},
	"NetworkPolicy":       {Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"},
	"ClusterRole":         {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
	"ClusterRoleBinding":  {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
	"Role":                {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
	"RoleBinding":         {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
	"ServiceMonitor":      {Group: "monitoring.coreos.com", Version: "v1", Resource: "servicemonitors"},
	"Secret":              {Version: "v1", Resource: "secrets"},

	"ValidatingWebhookConfiguration": {Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"},
}

// exists reports whether the cluster holds obj (by kind, namespace and
// name).
func exists(t *testing.T, env *testenv.Env, obj *unstructured.Unstructured) bool {
	t.Helper()
	gvr, ok := gvrOf[obj.GetKind()]
	if !ok {
		t.Fatalf("the chart renders a %s the test does not know", obj.GetKind())
	}
	_, err := env.Dynamic(t).Resource(gvr).Namespace(obj.GetNamespace()).Get(context.Background(), obj.GetName(), metav1.GetOptions{})
	switch {
	case err == nil:
		return true
	case apierrors.IsNotFound(err):
		return false
	}
	t.Fatalf("get %s: %v", key(obj), err)
	return false
}

// serviceMonitorCRD serves monitoring.coreos.com/v1 ServiceMonitor, as
// the Prometheus Operator's CRD does (without its schema).
const serviceMonitorCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: servicemonitors.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  names: {kind: ServiceMonitor, plural: servicemonitors, singular: servicemonitor, listKind: ServiceMonitorList}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`

// TestInstallOnAPIServer installs the chart with Helm's SDK on the real
// control plane for the defaults and each values file: the apiserver
// accepts every object (admission and validation included), the objects
// of the render are there, and `helm uninstall` removes them all. The
// ServiceMonitor is made once the cluster serves its CRD, as Helm
// discovers it, and not before.
func TestInstallOnAPIServer(t *testing.T) {
	env := testenv.Shared(t)
	kubeconfig := env.WriteKubeconfig(t)
	for _, ns := range []string{releaseNamespace, "shop", "staging"} {
		ensureNamespace(t, env, ns)
	}
	install := func(t *testing.T, vals map[string]any, apiVersions ...string) {
		t.Helper()
		cfg := helmConfig(t, kubeconfig, releaseNamespace)
		helmInstall(t, cfg, releaseName, releaseNamespace, vals)
		want := objects(t, mustRender(t, vals, apiVersions...).manifest)
		for _, o := range want {
			if !exists(t, env, o) {
				t.Errorf("helm install did not make %s", key(o))
			}
		}
		helmUninstall(t, cfg, releaseName)
		for _, o := range want {
			if exists(t, env, o) {
				t.Errorf("helm uninstall left %s", key(o))
			}
		}
	}
	for _, c := range valueCases(t) {
		if slices.Contains(c.apiVersions, serviceMonitorAPI) {
			continue // below, once the CRD is served
		}
		t.Run(c.name, func(t *testing.T) { install(t, c.values(t)) })
	}
	t.Run("with the ServiceMonitor CRD", func(t *testing.T) {
		if _, err := env.Apply(context.Background(), testenv.ApplyOptions{}, []byte(serviceMonitorCRD)); err != nil {
			t.Fatal(err)
		}
		for _, c := range valueCases(t) {
			if slices.Contains(c.apiVersions, serviceMonitorAPI) {
				t.Run(c.name, func(t *testing.T) { install(t, c.values(t), serviceMonitorAPI) })
			}
		}
	})
}
