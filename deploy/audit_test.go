package deploy

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit/policy"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// auditOverlay is the part of kustomize's schema deploy/audit/ uses
// (decoded strictly).
type auditOverlay struct {
	Resources []string `yaml:"resources"`
	Patches   []struct {
		Path string `yaml:"path"`
	} `yaml:"patches"`
}

// TestAuditOverlay renders deploy/audit/ as kustomize would (the base, its
// Service, the StatefulSet patched by strategic merge) and has the real
// apiserver accept the result; the receiver's flags, port, mount and
// Service agree with each other and with the apiserver's kubeconfig.
func TestAuditOverlay(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	data, err := os.ReadFile("audit/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k auditOverlay
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&k); err != nil {
		t.Fatalf("audit/kustomization.yaml: %v", err)
	}
	if !slices.Contains(k.Resources, "../base") || len(k.Patches) != 1 {
		t.Fatalf("audit/kustomization.yaml: resources %v, patches %v: want the base and one StatefulSet patch", k.Resources, k.Patches)
	}
	ns := readKustomization(t).Namespace
	_, err = env.Clientset(t).CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, r := range k.Resources {
		if r == "../base" {
			continue
		}
		if _, err := env.ApplyFiles(ctx, testenv.ApplyOptions{DryRun: true}, filepath.Join("audit", r)); err != nil {
			t.Errorf("audit/%s: %v", r, err)
		}
	}
	var svc corev1.Service
	decodeFile(t, "audit/service.yaml", &svc)
	var np networkingv1.NetworkPolicy
	decodeFile(t, "audit/networkpolicy.yaml", &np)
	if !slices.Contains(k.Resources, "networkpolicy.yaml") || len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].Ports) != 1 ||
		np.Spec.Ingress[0].Ports[0].Port.String() != svc.Spec.Ports[0].TargetPort.String() {
		t.Errorf("audit/networkpolicy.yaml: ingress %+v, want the Service's target port %s let in", np.Spec.Ingress, svc.Spec.Ports[0].TargetPort.String())
	}

	base, err := os.ReadFile("base/statefulset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	patch, err := os.ReadFile(filepath.Join("audit", k.Patches[0].Path))
	if err != nil {
		t.Fatal(err)
	}
	baseJSON, err := utilyaml.ToJSON(base)
	if err != nil {
		t.Fatal(err)
	}
	patchJSON, err := utilyaml.ToJSON(patch)
	if err != nil {
		t.Fatal(err)
	}
	patched, err := strategicpatch.StrategicMergePatch(baseJSON, patchJSON, appsv1.StatefulSet{})
	if err != nil {
		t.Fatalf("patch the StatefulSet: %v", err)
	}
	if _, err := env.Apply(ctx, testenv.ApplyOptions{DryRun: true}, patched); err != nil {
		t.Errorf("the patched StatefulSet: %v", err)
	}
	var baseDep, dep appsv1.StatefulSet
	decodeFile(t, "base/statefulset.yaml", &baseDep)
	if sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector); err != nil || !sel.Matches(labels.Set(baseDep.Spec.Template.Labels)) {
		t.Errorf("audit/networkpolicy.yaml selects %v, not the pods' labels %v", np.Spec.PodSelector, baseDep.Spec.Template.Labels)
	}
	if err := utilyaml.Unmarshal(patched, &dep); err != nil {
		t.Fatal(err)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if base := baseDep.Spec.Template.Spec.Containers[0].Args; !slices.Equal(c.Args[:len(base)], base) {
		t.Errorf("the patch's args %v do not start with the base's %v: keep them in step", c.Args, base)
	}
	flags := map[string]string{}
	for _, a := range c.Args {
		if name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "="); ok {
			flags[name] = value
		}
	}
	var mount string
	for _, m := range c.VolumeMounts {
		if m.Name == "audit-tls" {
			mount = m.MountPath
		}
	}
	for _, f := range []string{"audit-webhook-cert-file", "audit-webhook-key-file", "audit-webhook-client-ca-file"} {
		if mount == "" || filepath.Dir(flags[f]) != mount {
			t.Errorf("--%s=%s is not in the mounted Secret (%s)", f, flags[f], mount)
		}
	}
	if flags["audit-webhook-client-name"] == "" {
		t.Errorf("--audit-webhook-client-ca-file without --audit-webhook-client-name: fieldwatch refuses to start")
	}
	port := ""
	for _, p := range c.Ports {
		if p.Name == svc.Spec.Ports[0].TargetPort.String() {
			port = fmt.Sprint(p.ContainerPort)
		}
	}
	if port == "" || flags["audit-webhook-addr"] != ":"+port {
		t.Errorf("--audit-webhook-addr=%s, the Service's target port %s is container port %q", flags["audit-webhook-addr"], svc.Spec.Ports[0].TargetPort.String(), port)
	}
	// The replicas reach each other through a headless Service of every
	// pod, ready or not.
	var peers corev1.Service
	decodeFile(t, "audit/peers-service.yaml", &peers)
	if !slices.Contains(k.Resources, "peers-service.yaml") || peers.Spec.ClusterIP != corev1.ClusterIPNone || !peers.Spec.PublishNotReadyAddresses ||
		!labels.SelectorFromSet(peers.Spec.Selector).Matches(labels.Set(baseDep.Spec.Template.Labels)) ||
		peers.Spec.Ports[0].TargetPort.String() != svc.Spec.Ports[0].TargetPort.String() ||
		flags["audit-webhook-peers"] != fmt.Sprintf("%s:%d", peers.Name, peers.Spec.Ports[0].Port) {
		t.Errorf("--audit-webhook-peers=%s; audit/peers-service.yaml: %s, clusterIP %q, publishNotReadyAddresses %v, selector %v, ports %+v: want a headless Service of every pod's receiver named by the flag",
			flags["audit-webhook-peers"], peers.Name, peers.Spec.ClusterIP, peers.Spec.PublishNotReadyAddresses, peers.Spec.Selector, peers.Spec.Ports)
	}

	// The apiserver's kubeconfig: the Service's port and name.
	kc, err := clientcmd.LoadFromFile("audit/webhook-kubeconfig.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := clientcmd.Validate(*kc); err != nil && !strings.Contains(err.Error(), "no such file") {
		t.Errorf("webhook-kubeconfig.yaml: %v", err)
	}
	cluster := kc.Clusters[kc.Contexts[kc.CurrentContext].Cluster]
	server, err := url.Parse(cluster.Server)
	if err != nil {
		t.Fatal(err)
	}
	if server.Hostname() != svc.Spec.ClusterIP {
		t.Errorf("webhook-kubeconfig.yaml: server %s, but the Service pins ClusterIP %q: the apiserver would post nowhere", cluster.Server, svc.Spec.ClusterIP)
	}
	if server.Scheme != "https" || server.Port() != fmt.Sprint(svc.Spec.Ports[0].Port) ||
		cluster.TLSServerName != svc.Name+"."+svc.Namespace+".svc" {
		t.Errorf("webhook-kubeconfig.yaml: server %s, tls-server-name %s; the Service is %s.%s.svc port %d",
			cluster.Server, cluster.TLSServerName, svc.Name, svc.Namespace, svc.Spec.Ports[0].Port)
	}
	user := kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo]
	if user.ClientCertificate == "" || user.ClientKey == "" {
		t.Errorf("webhook-kubeconfig.yaml: the apiserver presents no client certificate, which the receiver requires")
	}
}

// TestAuditPolicy loads deploy/audit/policy.yaml with kube-apiserver's own
// loader and checks the level it gives requests: nothing for reads,
// Metadata for writes to custom resources (what deploy/base/rules.yaml
// watches), Secrets never above Metadata, RequestResponse only for the
// group that asks for exact matching, nothing for built-in noise.
func TestAuditPolicy(t *testing.T) {
	data, err := os.ReadFile("audit/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.LoadPolicyFromBytes(data)
	if err != nil {
		t.Fatalf("kube-apiserver would not load policy.yaml: %v", err)
	}
	eval := policy.NewPolicyRuleEvaluator(p)
	someone := &user.DefaultInfo{Name: "alice", Groups: []string{"system:authenticated"}}
	level := func(verb, group, resource, sub string) audit.Level {
		return eval.EvaluatePolicyRule(authorizer.AttributesRecord{User: someone, Verb: verb, APIGroup: group, APIVersion: "v1",
			Resource: resource, Subresource: sub, Namespace: "shop", Name: "x", ResourceRequest: true}).Level
	}
	writes := []string{"create", "update", "patch", "delete", "deletecollection"}
	tests := []struct {
		name                 string
		verbs                []string
		group, resource, sub string
		want                 audit.Level
	}{
		{"reads of anything", []string{"get", "list", "watch"}, "stable.example.org", "crontabs", "", audit.LevelNone},
		{"reads of Secrets", []string{"get", "list", "watch"}, "", "secrets", "", audit.LevelNone},
		{"writes to a custom resource", writes, "stable.example.org", "crontabs", "", audit.LevelMetadata},
		{"writes to its status", []string{"update", "patch"}, "stable.example.org", "crontabs", "status", audit.LevelMetadata},
		{"writes to a CRD in a *.k8s.io group", writes, "gateway.networking.k8s.io", "httproutes", "", audit.LevelMetadata},
		{"exact matching for example.com", writes, "example.com", "widgets", "", audit.LevelRequestResponse},
		{"Secrets", writes, "", "secrets", "", audit.LevelMetadata},
		{"ConfigMaps: not watched", writes, "", "configmaps", "", audit.LevelNone},
		{"Leases", writes, "coordination.k8s.io", "leases", "", audit.LevelNone},
		{"Events", writes, "events.k8s.io", "events", "", audit.LevelNone},
		{"Deployments: not watched", writes, "apps", "deployments", "", audit.LevelNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, v := range tt.verbs {
				if got := level(v, tt.group, tt.resource, tt.sub); got != tt.want {
					t.Errorf("%s %s/%s/%s: %s, want %s", v, tt.group, tt.resource, tt.sub, got, tt.want)
				}
			}
		})
	}
	for _, v := range append(writes, "get", "list", "watch") {
		if l := level(v, "", "secrets", ""); audit.LevelMetadata.Less(l) {
			t.Errorf("%s secrets at %s: Secrets must never be above Metadata", v, l)
		}
	}
	if !slices.Contains(p.OmitStages, audit.StageRequestReceived) {
		t.Errorf("the policy keeps the RequestReceived stage: twice the events for nothing")
	}
}
