package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// TestAuditAttribution runs `fieldwatch run --audit-webhook-addr ...` out
// of process against a control plane that sends its audit events there (as
// deploy/ and docs/audit-setup.md set it up: Metadata level, batches of a second,
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

// TestAuditFailover: two replicas behind one Service for the apiserver's
// audit webhook (a proxy that sends each connection to either, or to the
// other when one is down), each forwarding what it receives to the other
// (--audit-webhook-peers). alice and bob patch ConfigMaps of their own.
// The leader's receiver fails for three seconds, so that it holds changes
// whose audit events it received, then it is SIGKILLed and started again.
// The replica that takes over names the writer of every change it
// delivers: those the killed leader held, whose events the apiserver had
// sent to it, and those made after.
func TestAuditFailover(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certs, err := testenv.NewAuditTLS(dir, "fieldwatch-failover-audit")
	if err != nil {
		t.Fatal(err)
	}
	pods := map[string]*testenv.Proxy{"a": testenv.NewProxy(t, ""), "b": testenv.NewProxy(t, "")}
	service := testenv.NewProxy(t, "")
	service.SetTargets(pods["a"].Addr(), pods["b"].Addr())
	webhook := certs.Webhook("https://" + service.Addr() + "/")
	webhook.BatchMaxWait = time.Second
	env := testenv.Start(t, testenv.Options{Audit: &testenv.Audit{Policy: testenv.AttributionPolicy, Webhook: webhook}})
	ns := namespace(t, env, "audit-failover")
	kc := env.WriteKubeconfig(t)
	// a delivers to a receiver that can be made to fail; b logs.
	h := newHooks(t)
	rules := map[string]string{"a": h.rules(t, ns, "a"), "b": writeFile(t, "rules.yaml", `rules:
  - name: cm
    match:
      resources: [{group: "", kind: ConfigMap}]
      namespaces: [`+ns+`]
    actions: [{log: {}}]
`)}
	dirs := map[string]string{"a": t.TempDir(), "b": t.TempDir()}
	start := func(name string) *proc {
		t.Helper()
		args := append([]string{"--rules", rules[name], "--state-dir", dirs[name], "--leader-elect", "--leader-elect-namespace", ns,
			"--leader-elect-name", "fw", "--leader-elect-identity", name,
			"--audit-webhook-addr", "127.0.0.1:0", "--audit-webhook-cert-file", certs.CertFile, "--audit-webhook-key-file", certs.KeyFile,
			"--audit-webhook-client-ca-file", certs.CAFile, "--audit-webhook-client-name", certs.ClientName,
			"--audit-webhook-peers", pods["a"].Addr() + "," + pods["b"].Addr(),
			// A race-built process on a loaded machine may read a write
			// or its event seconds late; one writer per object: no
			// window makes a match ambiguous.
			"--audit-wait", "10s", "--audit-match-window", "10s"}, fastLease...)
		p := launch(t, kc, args...)
		pods[name].SetTarget(p.loggedAddr("audit webhook listening"))
		p.waitReady(60 * time.Second)
		return p
	}
	a := start("a")
	leaderOf(t, 30*time.Second, a)
	b := start("b")

	cms := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	type write struct {
		name, rv, user string
		at             time.Time
	}
	var (
		mu     sync.Mutex
		writes []write
	)
	clients := map[string]dynamic.ResourceInterface{}
	var names []string
	for _, user := range []string{"alice", "bob"} {
		clients[user] = env.Impersonating(t, user).Dynamic.Resource(cms).Namespace(ns)
		for i := range 3 {
			name := fmt.Sprintf("%s-%d", user, i)
			o, err := clients[user].Create(context.Background(), &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": name}, "data": map[string]any{"v": "0"}}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			writes = append(writes, write{name, o.GetResourceVersion(), user, time.Now()})
			names = append(names, name)
		}
	}
	testenv.Eventually(t, time.Minute, "both replicas to hold audit events", func() bool {
		for _, p := range []*proc{a, b} {
			if p.metric(`fieldwatch_audit_events_total{result="indexed",source="webhook"}`)+
				p.metric(`fieldwatch_audit_events_total{result="indexed",source="peer"}`) == 0 {
				return false
			}
		}
		return true
	})
	ctx, stop := context.WithCancel(context.Background())
	written := make(chan struct{})
	go func() {
		defer close(written)
		for i := 1; ctx.Err() == nil; i++ {
			name := names[i%len(names)]
			user := strings.SplitN(name, "-", 2)[0]
			// Not under ctx: a patch that stop cancels could be applied
			// by the apiserver and not recorded here, and its delivery
			// then has no writer to check against.
			pctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			o, err := clients[user].Patch(pctx, name, types.MergePatchType, fmt.Appendf(nil, `{"data":{"v":"%d"}}`, i), metav1.PatchOptions{})
			cancel()
			if err != nil {
				t.Errorf("patch %s: %v", name, err)
				return
			}
			mu.Lock()
			writes = append(writes, write{name, o.GetResourceVersion(), user, time.Now()})
			mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	testenv.Eventually(t, 30*time.Second, "b to follow a", func() bool {
		return b.metric("fieldwatch_baseline_confirmed_total") > 0
	})
	// patches waits until the writer has made n more patches.
	patches := func(n int) {
		t.Helper()
		mu.Lock()
		target := len(writes) + n
		mu.Unlock()
		testenv.Eventually(t, 30*time.Second, fmt.Sprintf("%d more patches", n), func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(writes) >= target
		})
	}
	h.fail("a", true)
	patches(30)
	killed := time.Now()
	a.kill()
	h.fail("a", false)
	restarted := start("a")
	testenv.Eventually(t, 30*time.Second, "b to take over", func() bool { return b.metric("fieldwatch_leader ") == 1 })
	patches(20)
	stop()
	<-written

	mu.Lock()
	defer mu.Unlock()
	writer := map[string]string{} // name/rv -> user
	at := map[string]time.Time{}
	for _, w := range writes {
		writer[w.name+"/"+w.rv] = w.user
		at[w.name+"/"+w.rv] = w.at
	}
	testenv.Eventually(t, time.Minute, "every write delivered", func() bool {
		delivered := map[string]bool{}
		for _, p := range h.payloads() {
			delivered[p.name+"/"+p.rv] = true
		}
		for _, pl := range inNamespace(b.payloads(), ns) {
			delivered[fmt.Sprint(pl["name"])+"/"+fmt.Sprint(pl["resourceVersion"])] = true
		}
		for k := range writer {
			if !delivered[k] {
				return false
			}
		}
		return true
	})
	var before, after int
	matches := map[string]int{}
	for _, pl := range inNamespace(b.payloads(), ns) {
		k := fmt.Sprint(pl["name"]) + "/" + fmt.Sprint(pl["resourceVersion"])
		actor, _ := pl["actor"].(map[string]any)
		matches[fmt.Sprint(actor["match"])]++
		who := actor["user"]
		if imp, ok := actor["impersonatedUser"]; ok {
			who = imp
		}
		user, _ := who.(map[string]any)
		if want := writer[k]; user["username"] != want || (actor["match"] != "window" && actor["match"] != "exact") {
			t.Errorf("the new leader delivered %s attributed %v (%v), want %s", k, user["username"], actor["match"], want)
		}
		if at[k].Before(killed) {
			before++
		} else {
			after++
		}
	}
	t.Logf("%d writes by alice and bob; the new leader delivered %d made before the kill (their events sent to the killed leader) and %d after, matched %v; lists forwarded to the peer: %v by b, %v by the restarted a",
		len(writes), before, after, matches, b.metric(`fieldwatch_audit_peer_forwards_total{result="ok"}`), restarted.metric(`fieldwatch_audit_peer_forwards_total{result="ok"}`))
	if before < 10 || after == 0 {
		t.Errorf("the new leader delivered %d changes made before the kill and %d after, want at least the 3 s the killed leader held, and some after", before, after)
	}
}
