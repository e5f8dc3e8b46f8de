package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// admissionSetup is a namespace whose ConfigMap writes the apiserver
// sends, over TLS, to the admission webhook at url, and the flags of a
// fieldwatch serving it.
type admissionSetup struct {
	ns    string
	flags []string // --admission-cert-file, --admission-key-file
}

// setUpAdmission creates namespace ns and registers a webhook of its
// ConfigMaps at url (failurePolicy Ignore, timeoutSeconds 2) for the
// test, served with a certificate for 127.0.0.1 of a CA of its own.
func setUpAdmission(t *testing.T, env *testenv.Env, ns, url string) *admissionSetup {
	t.Helper()
	ca, err := testenv.NewCA("fieldwatch-admission-" + ns)
	if err != nil {
		t.Fatal(err)
	}
	crt, key, err := ca.ServerCert("fieldwatch-admission")
	if err != nil {
		t.Fatal(err)
	}
	files, err := testenv.WriteFiles(t.TempDir(), testenv.NamedData{Name: "tls.crt", Data: crt}, testenv.NamedData{Name: "tls.key", Data: key})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cs := env.Clientset(t)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{"fieldwatch.io/admission-test": ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	scope := admissionregistrationv1.NamespacedScope
	none := admissionregistrationv1.SideEffectClassNone
	ignore := admissionregistrationv1.Ignore
	timeout := int32(2)
	name := "fieldwatch-e2e-" + ns
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         "record.fieldwatch.io",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca.CertPEM},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}, Scope: &scope},
			}},
			FailurePolicy: &ignore, SideEffects: &none, TimeoutSeconds: &timeout, AdmissionReviewVersions: []string{"v1"},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fieldwatch.io/admission-test": ns}},
		}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, name, metav1.DeleteOptions{})
	})
	return &admissionSetup{ns: ns, flags: []string{"--admission-cert-file", files[0], "--admission-key-file", files[1]}}
}

// rules returns a rules file logging every ConfigMap change of s.ns.
func (s *admissionSetup) rules(t *testing.T) string {
	return writeFile(t, "rules.yaml", `rules:
  - name: cm
    match:
      resources: [{group: "", kind: ConfigMap}]
      namespaces: [`+s.ns+`]
    actions: [{log: {}}]
`)
}

// waitCalled waits until p keeps reviews of probe writes to a ConfigMap
// of s.ns: the apiserver has the configuration and reaches p.
func (s *admissionSetup) waitCalled(t *testing.T, env *testenv.Env, ps ...*proc) {
	t.Helper()
	cms := env.Dynamic(t).Resource(cmGVR).Namespace(s.ns)
	i := 0
	testenv.Eventually(t, time.Minute, "the apiserver to call fieldwatch's admission webhook", func() bool {
		i++
		_, _ = cms.Create(context.Background(), configMapObject(fmt.Sprintf("probe-%d", i)), metav1.CreateOptions{})
		for _, p := range ps {
			if p.metric(`fieldwatch_admission_reviews_total{result="kept"}`)+p.metric(`fieldwatch_admission_reviews_total{result="peer"}`) == 0 {
				return false
			}
		}
		return true
	})
}

var cmGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

func configMapObject(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name}, "data": map[string]any{"v": "0"}}}
}

// writeLog is the writes made to ConfigMaps, by object and
// resourceVersion, with who made them and when.
type writeLog struct {
	mu     sync.Mutex
	writer map[string]string // name/rv -> user
	at     map[string]time.Time
	n      int
}

func (w *writeLog) add(name, rv, user string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.writer == nil {
		w.writer, w.at = map[string]string{}, map[string]time.Time{}
	}
	w.writer[name+"/"+rv], w.at[name+"/"+rv] = user, time.Now()
	w.n++
}

func (w *writeLog) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// patchLoop patches the ConfigMaps named user-0..2 of each client in
// turn, one write every interval, until ctx ends, logging each. A
// write's own context is not ctx: one that stop cancelled could be
// applied and go unlogged.
func patchLoop(ctx context.Context, t *testing.T, clients map[string]dynamic.ResourceInterface, log *writeLog, interval time.Duration) {
	users := make([]string, 0, len(clients))
	for u := range clients {
		users = append(users, u)
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for i := 1; ctx.Err() == nil; i++ {
		user := users[i%len(users)]
		name := fmt.Sprintf("%s-%d", user, i%3)
		wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		o, err := clients[user].Patch(wctx, name, types.MergePatchType, fmt.Appendf(nil, `{"data":{"v":"%d"}}`, i), metav1.PatchOptions{})
		cancel()
		if err != nil {
			t.Errorf("patch %s: %v", name, err)
			return
		}
		log.add(name, o.GetResourceVersion(), user)
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
}

// actorUser returns the effective user a payload names, and its match
// and source.
func actorUser(pl map[string]any) (user, match, source string) {
	actor, _ := pl["actor"].(map[string]any)
	u, _ := actor["user"].(map[string]any)
	if imp, ok := actor["impersonatedUser"].(map[string]any); ok {
		u = imp
	}
	return fmt.Sprint(u["username"]), fmt.Sprint(actor["match"]), fmt.Sprint(actor["source"])
}

// TestAdmissionFailover: two replicas behind one Service for the
// apiserver's admission calls (a proxy that sends each connection to
// either), each forwarding the records it keeps to the other
// (--admission-peers). alice and bob patch ConfigMaps of their own; the
// leader is SIGKILLed mid-stream and started again. The replica that
// takes over delivers every change the killed leader had not, and names
// the writer of each, exactly, from admission: those whose reviews the
// apiserver had sent to the killed leader too. Only a write whose review
// reached the killed leader just before it died, not yet forwarded, may
// go out unattributed; none is ever credited to the wrong user.
func TestAdmissionFailover(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	pods := map[string]*testenv.Proxy{"a": testenv.NewProxy(t, ""), "b": testenv.NewProxy(t, "")}
	service := testenv.NewProxy(t, "")
	service.SetTargets(pods["a"].Addr(), pods["b"].Addr())
	s := setUpAdmission(t, env, "adm-failover", "https://"+service.Addr()+"/validate")
	kc := env.WriteKubeconfig(t)
	rules := s.rules(t)
	dirs := map[string]string{"a": t.TempDir(), "b": t.TempDir()}
	start := func(name string) *proc {
		t.Helper()
		args := append(append([]string{"--rules", rules, "--state-dir", dirs[name], "--leader-elect", "--leader-elect-namespace", s.ns,
			"--leader-elect-name", "fw", "--leader-elect-identity", name,
			"--admission-addr", "127.0.0.1:0", "--admission-peers", pods["a"].Addr() + "," + pods["b"].Addr(),
			// A race-built process on a loaded machine may read a write
			// late; its record is held for the TTL from when it came.
			"--admission-candidate-ttl", "30s"}, s.flags...), fastLease...)
		p := launch(t, kc, args...)
		pods[name].SetTarget(p.loggedAddr("admission webhook listening"))
		p.waitReady(60 * time.Second)
		return p
	}
	a := start("a")
	leaderOf(t, 30*time.Second, a)
	b := start("b")
	s.waitCalled(t, env, a, b)

	log := &writeLog{}
	clients := map[string]dynamic.ResourceInterface{}
	for _, user := range []string{"alice", "bob"} {
		clients[user] = env.Impersonating(t, user).Dynamic.Resource(cmGVR).Namespace(s.ns)
		for i := range 3 {
			o, err := clients[user].Create(context.Background(), configMapObject(fmt.Sprintf("%s-%d", user, i)), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			log.add(o.GetName(), o.GetResourceVersion(), user)
		}
	}
	ctx, stop := context.WithCancel(context.Background())
	written := make(chan struct{})
	go func() {
		defer close(written)
		patchLoop(ctx, t, clients, log, 50*time.Millisecond)
	}()
	testenv.Eventually(t, 30*time.Second, "b to follow a", func() bool { return b.metric("fieldwatch_baseline_confirmed_total") > 0 })
	before := log.count()
	testenv.Eventually(t, 30*time.Second, "twenty more writes", func() bool { return log.count() >= before+20 })
	forwardedByA := a.metric(`fieldwatch_admission_peer_forwards_total{result="ok"}`)
	// Killed right after a write returns, the leader has not confirmed it
	// on its Lease (it confirms with each renewal, every 500 ms here): the
	// new leader has changes from before the kill to deliver, however
	// slowly a loaded machine writes.
	n := log.count()
	if !testenv.PollEvery(time.Millisecond, 10*time.Second, func() bool { return log.count() > n }) {
		t.Fatal("no write for 10 s")
	}
	killed := time.Now()
	a.kill()
	restarted := start("a")
	testenv.Eventually(t, 30*time.Second, "b to take over", func() bool { return b.metric("fieldwatch_leader ") == 1 })
	atKill := log.count()
	testenv.Eventually(t, 60*time.Second, "twenty writes after the takeover", func() bool { return log.count() >= atKill+20 })
	stop()
	<-written

	log.mu.Lock()
	defer log.mu.Unlock()
	delivered := func() map[string]map[string]any {
		out := map[string]map[string]any{}
		for _, p := range []*proc{a, b} {
			for _, pl := range inNamespace(p.payloads(), s.ns) {
				out[fmt.Sprint(pl["name"])+"/"+fmt.Sprint(pl["resourceVersion"])] = pl
			}
		}
		return out
	}
	testenv.Eventually(t, time.Minute, "every write delivered", func() bool {
		got := delivered()
		for k := range log.writer {
			if got[k] == nil {
				return false
			}
		}
		return true
	})
	var early, late, lost int
	for _, pl := range inNamespace(b.payloads(), s.ns) {
		k := fmt.Sprint(pl["name"]) + "/" + fmt.Sprint(pl["resourceVersion"])
		want, ok := log.writer[k]
		if !ok {
			continue // a probe
		}
		user, match, source := actorUser(pl)
		// A review the killed leader kept and had not forwarded yet (a
		// few milliseconds), or that the apiserver could not finish
		// with it (its write went on, failurePolicy Ignore), is lost:
		// such a write, returned around the kill, goes out none.
		around := log.at[k].After(killed.Add(-time.Second)) && log.at[k].Before(killed.Add(3*time.Second))
		switch {
		case match == "none" && around:
			lost++
		case user != want || match != "exact" || source != "admission":
			t.Errorf("the new leader delivered %s attributed %s (%s from %s), want %s", k, user, match, source, want)
		}
		if log.at[k].Before(killed) {
			early++
		} else {
			late++
		}
	}
	forwardedByB := b.metric(`fieldwatch_admission_peer_forwards_total{result="ok"}`)
	t.Logf("%d writes by alice and bob; the new leader delivered %d made before the kill and %d after, %d around it unattributed; record batches forwarded: %v by the killed a, %v by b, %v by the restarted a",
		len(log.writer), early, late, lost, forwardedByA, forwardedByB, restarted.metric(`fieldwatch_admission_peer_forwards_total{result="ok"}`))
	if lost > 3 {
		t.Errorf("%d writes around the kill unattributed, want a few at most", lost)
	}
	if early == 0 || late == 0 {
		t.Errorf("the new leader delivered %d changes made before the kill and %d after, want some of each", early, late)
	}
	if forwardedByA+forwardedByB == 0 {
		t.Error("no replica forwarded records to the other")
	}
}

// TestAdmissionStoppedAndKilled: fieldwatch is stopped (SIGSTOP) while
// alice and bob go on writing: every write succeeds, the apiserver giving
// up on the webhook after its timeout (failurePolicy Ignore); continued,
// fieldwatch delivers those changes unattributed or attributed to their
// writer, never to someone else. Then it is SIGKILLed, the writes go on,
// and it is started again: what it replays is never credited to the
// wrong user either.
func TestAdmissionStoppedAndKilled(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	pod := testenv.NewProxy(t, "")
	s := setUpAdmission(t, env, "adm-stopped", "https://"+pod.Addr()+"/validate")
	kc := env.WriteKubeconfig(t)
	dir := t.TempDir()
	args := append([]string{"--rules", s.rules(t), "--state-dir", dir, "--admission-addr", "127.0.0.1:0"}, s.flags...)
	start := func() *proc {
		p := launch(t, kc, args...)
		pod.SetTarget(p.loggedAddr("admission webhook listening"))
		p.waitReady(60 * time.Second)
		return p
	}
	p := start()
	s.waitCalled(t, env, p)
	log := &writeLog{}
	clients := map[string]dynamic.ResourceInterface{}
	for _, user := range []string{"alice", "bob"} {
		clients[user] = env.Impersonating(t, user).Dynamic.Resource(cmGVR).Namespace(s.ns)
		for i := range 3 {
			o, err := clients[user].Create(context.Background(), configMapObject(fmt.Sprintf("%s-%d", user, i)), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			log.add(o.GetName(), o.GetResourceVersion(), user)
		}
	}
	// Stopped: each write waits for the webhook's timeout, then goes on.
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stoppedAt := log.count()
	var slowest time.Duration
	for i := range 6 {
		user := []string{"alice", "bob"}[i%2]
		name := fmt.Sprintf("%s-%d", user, i%3)
		began := time.Now()
		o, err := clients[user].Patch(context.Background(), name, types.MergePatchType, fmt.Appendf(nil, `{"data":{"v":"stopped-%d"}}`, i), metav1.PatchOptions{})
		if err != nil {
			t.Fatalf("patch %s while fieldwatch is stopped: %v", name, err)
		}
		slowest = max(slowest, time.Since(began))
		log.add(name, o.GetResourceVersion(), user)
	}
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d writes while fieldwatch was stopped, each succeeded; the slowest took %s (webhook timeout 2s)", log.count()-stoppedAt, slowest)
	waitWritesDelivered(t, log, s.ns, p)

	// Killed: no drain; the writes go on; started again, it replays them.
	p.kill()
	for i := range 6 {
		user := []string{"alice", "bob"}[i%2]
		name := fmt.Sprintf("%s-%d", user, i%3)
		o, err := clients[user].Patch(context.Background(), name, types.MergePatchType, fmt.Appendf(nil, `{"data":{"v":"killed-%d"}}`, i), metav1.PatchOptions{})
		if err != nil {
			t.Fatalf("patch %s while fieldwatch is down: %v", name, err)
		}
		log.add(name, o.GetResourceVersion(), user)
	}
	p2 := start()
	waitLatest(t, log, s.ns, p, p2)
	matches := map[string]int{}
	for _, q := range []*proc{p, p2} {
		for _, pl := range inNamespace(q.payloads(), s.ns) {
			k := fmt.Sprint(pl["name"]) + "/" + fmt.Sprint(pl["resourceVersion"])
			want, ok := log.writer[k]
			user, match, _ := actorUser(pl)
			if !ok && strings.HasPrefix(fmt.Sprint(pl["name"]), "probe-") {
				continue
			}
			if match == "exact" && user != want {
				t.Errorf("%s (by %s) attributed to %s", k, want, user)
			}
			if match != "exact" && match != "none" {
				t.Errorf("%s (by %s): match %s", k, want, match)
			}
			matches[match]++
		}
	}
	t.Logf("%d writes, stopped and killed; payloads matched %v", len(log.writer), matches)
}

// waitWritesDelivered waits until ps delivered every write of log.
func waitWritesDelivered(t *testing.T, log *writeLog, ns string, ps ...*proc) {
	t.Helper()
	testenv.Eventually(t, time.Minute, "every write delivered", func() bool {
		got := map[string]bool{}
		for _, p := range ps {
			for _, pl := range inNamespace(p.payloads(), ns) {
				got[fmt.Sprint(pl["name"])+"/"+fmt.Sprint(pl["resourceVersion"])] = true
			}
		}
		log.mu.Lock()
		defer log.mu.Unlock()
		for k := range log.writer {
			if !got[k] {
				return false
			}
		}
		return true
	})
}

// waitLatest waits until ps delivered the latest write of each object of
// log: a replay after a restart may deliver the writes made meanwhile as
// one net change.
func waitLatest(t *testing.T, log *writeLog, ns string, ps ...*proc) {
	t.Helper()
	latest := map[string]string{}
	log.mu.Lock()
	for k, at := range log.at {
		name, _, _ := strings.Cut(k, "/")
		if prev, ok := latest[name]; !ok || log.at[prev].Before(at) {
			latest[name] = k
		}
	}
	log.mu.Unlock()
	testenv.Eventually(t, time.Minute, "the latest write of each object delivered", func() bool {
		got := map[string]bool{}
		for _, p := range ps {
			for _, pl := range inNamespace(p.payloads(), ns) {
				got[fmt.Sprint(pl["name"])+"/"+fmt.Sprint(pl["resourceVersion"])] = true
			}
		}
		for _, k := range latest {
			if !got[k] {
				return false
			}
		}
		return true
	})
}

// TestAdmissionWebhookAccepted: the ValidatingWebhookConfiguration that
// `fieldwatch rbac -o admission-webhook` prints is one the apiserver
// takes (its matchConditions compile), for the rules of the crd-audit
// example and their CRDs.
func TestAdmissionWebhookAccepted(t *testing.T) {
	env := testenv.Shared(t)
	code, out, stderr := runCLI(t, "rbac", "--offline", "--rules", repo(t, "examples/crd-audit/rules.yaml"), "--crds", repo(t, "examples/crds"),
		"--name", "fieldwatch-accepted", "-o", "admission-webhook")
	if code != 0 {
		t.Fatalf("fieldwatch rbac -o admission-webhook: %d %s", code, stderr)
	}
	_, doc, _ := strings.Cut(out, "\n---\n")
	var cfg admissionregistrationv1.ValidatingWebhookConfiguration
	if err := yaml.Unmarshal([]byte(doc), &cfg); err != nil {
		t.Fatal(err)
	}
	vwc := env.Clientset(t).AdmissionregistrationV1().ValidatingWebhookConfigurations()
	if _, err := vwc.Create(context.Background(), &cfg, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the apiserver refuses the configuration: %v", err)
	}
	_ = vwc.Delete(context.Background(), cfg.Name, metav1.DeleteOptions{})
}
