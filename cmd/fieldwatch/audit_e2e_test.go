package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// TestAuditAttribution runs `fieldwatch run --audit-webhook-addr ...` out
// of process against a control plane that sends its audit events there (as
// deploy/ and the README set it up: Metadata level, batches of a second,
// client certificate): payloads name who made each change; a rule with
// excludeUsers drops a controller's writes and keeps a person's; the
// receiver refuses posts without the apiserver's credentials.
func TestAuditAttribution(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certs, err := testenv.NewAuditTLS(dir, "fieldwatch-e2e-audit")
	if err != nil {
		t.Fatal(err)
	}
	token, err := testenv.WriteFiles(dir, testenv.NamedData{Name: "token", Data: []byte("e2e-token\n")})
	if err != nil {
		t.Fatal(err)
	}
	// The apiserver is told the webhook's address before fieldwatch runs
	// (and picks its port): a proxy holds the address.
	px := testenv.NewProxy(t, "")
	addr := px.Addr()
	env := testenv.Start(t, testenv.Options{Audit: &testenv.Audit{
		Policy: `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: None
  verbs: [get, list, watch]
- level: Metadata
  resources: [{group: "", resources: [configmaps]}]
- level: None
`,
		Webhook: certs.Webhook("https://" + addr + "/"),
	}})
	const ns = "e2e-audit"
	ctx := context.Background()
	cs := env.Clientset(t)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rules := writeFile(t, "rules.yaml", `rules:
  - name: humans
    match:
      resources: [{group: "", kind: ConfigMap}]
      namespaces: [e2e-audit]
      excludeUsers: ["system:serviceaccount:e2e-audit:*"]
    actions: [{log: {}}]
  - name: all
    match:
      resources: [{group: "", kind: ConfigMap}]
      namespaces: [e2e-audit]
    actions: [{log: {}}]
`)
	p := startFieldwatch(t, env.WriteKubeconfig(t), "--rules", rules, "--audit-webhook-addr", "127.0.0.1:0",
		"--audit-webhook-cert-file", certs.CertFile, "--audit-webhook-key-file", certs.KeyFile,
		"--audit-webhook-client-ca-file", certs.CAFile, "--audit-webhook-client-name", certs.ClientName, "--audit-webhook-token-file", token[0])
	px.SetTarget(p.loggedAddr("audit webhook listening"))

	// The apiserver retries its first batches until fieldwatch listens:
	// wait until one went through.
	warm := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "warm-up", "namespace": "default"}}}
	if _, err := env.Dynamic(t).Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace("default").Create(ctx, warm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the apiserver's first audit batch", func() bool {
		return p.metric(`fieldwatch_audit_events_total{result="indexed",source="webhook"}`) > 0
	})

	// The receiver: only the apiserver's credentials.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certs.CAPEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}, Timeout: 10 * time.Second}
	for token, want := range map[string]int{"": http.StatusUnauthorized, "not-it": http.StatusForbidden} {
		req, err := http.NewRequest(http.MethodPost, "https://"+addr+"/", strings.NewReader(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[]}`))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("POST with token %q: %d, want %d", token, resp.StatusCode, want)
		}
	}

	// A person (impersonated) and a controller (a service account) write.
	person := env.Config()
	person.Impersonate = rest.ImpersonationConfig{UserName: "erin", Groups: []string{"people"}}
	person.UserAgent = "erin-kubectl"
	bind(t, env, rbacv1.Subject{Kind: rbacv1.UserKind, Name: "erin", APIGroup: rbacv1.GroupName})
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "ctl"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expiry := int64(3600)
	tok, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "ctl", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bind(t, env, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "ctl", Namespace: ns})
	admin := env.Config()
	controller := &rest.Config{Host: admin.Host, BearerToken: tok.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: admin.CAData}, UserAgent: "ctl-manager"}
	writers := []struct {
		cfg  *rest.Config
		user string
	}{{controller, "system:serviceaccount:" + ns + ":ctl"}, {person, "erin"}, {controller, "system:serviceaccount:" + ns + ":ctl"}, {person, "erin"}}
	cms := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	for i, w := range writers {
		cm := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": fmt.Sprintf("cm-%d", i)}, "data": map[string]any{"k": "v"}}}
		if _, err := dynamic.NewForConfigOrDie(w.cfg).Resource(cms).Namespace(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, time.Minute, "the payloads", func() bool {
		return len(p.payloads()) == len(writers)+2 // all four, humans two
	})
	for _, pl := range p.payloads() {
		i := 0
		_, _ = fmt.Sscanf(fmt.Sprint(pl["name"]), "cm-%d", &i)
		actor, _ := pl["actor"].(map[string]any)
		who := actor["user"]
		if imp, ok := actor["impersonatedUser"]; ok {
			who = imp
		}
		user, _ := who.(map[string]any)
		if actor["match"] != "window" || user["username"] != writers[i].user || actor["verb"] != "create" {
			t.Errorf("%s %s: actor %v, want %s, create, window", pl["rule"], pl["name"], actor, writers[i].user)
		}
		if pl["rule"] == "humans" && writers[i].user != "erin" {
			t.Errorf("humans fired on %s's change", writers[i].user)
		}
	}
	if v := p.metric(`fieldwatch_audit_webhook_requests_total{code="401"}`); v != 1 {
		t.Errorf("401s counted: %v", v)
	}
}

func bind(t *testing.T, env *testenv.Env, s rbacv1.Subject) {
	t.Helper()
	_, err := env.Clientset(t).RbacV1().ClusterRoleBindings().Create(context.Background(), &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-audit-" + strings.ToLower(s.Kind) + "-" + s.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{s},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}
