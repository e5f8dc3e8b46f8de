package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// The attribution tests here check the wiring of `fieldwatch run`: that
// the payloads carry what package audit attributes (its tests,
// internal/audit/integration_test.go, run the scenarios against the
// apiserver: many writers at once, two users on one object, events early,
// late or never, the log across rotations), that rules wait for it, and
// what only the app does (its webhook's credentials, rules selecting by
// user, a standby replica, refusing such rules without an audit source).

// allChanges fires on every change of ConfigMaps and Widgets.
const allChanges = `rules:
  - name: all
    match:
      resources: [{group: "", resource: configmaps}, {group: example.com, kind: Widget}]
    actions: [{log: {}}]
`

// TestAttributionPayloads: an impersonated user and a service account
// create, update, patch and delete ConfigMaps and Widgets, one write at a
// time; every payload's actor names the right user (and whom the admin
// impersonated), verb and user agent (exact for deletions, whose response
// names the uid even at Metadata level; window otherwise), and keeps the
// managedFields manager.
func TestAttributionPayloads(t *testing.T) {
	plane := sharedAuditPlane(t)
	env := plane.env
	const ns = "three"
	env.EnsureNamespace(t, ns)
	writers := []testenv.Writer{env.Impersonating(t, "alice"), env.ServiceAccountWriter(t, ns, "deployer")}
	fw := runFieldwatch(t, plane, allChanges, nil)
	fw.warmUp(t, plane)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	type step struct {
		verb, manager string
		// again: by the manager of the write before, which in the same
		// second stamps no new managedFields entry to name it by.
		again bool
		do    func(w testenv.Writer, name string) error
	}
	steps := map[string][]step{
		"configmaps": {
			{"create", "writer-", false, func(w testenv.Writer, name string) error {
				_, err := w.Dynamic.Resource(cmGVR).Namespace(ns).Create(ctx, testConfigMap(name, map[string]any{"k": "1"}), metav1.CreateOptions{})
				return err
			}},
			{"update", "writer-", true, func(w testenv.Writer, name string) error {
				cm, err := w.Dynamic.Resource(cmGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
				if err == nil {
					_ = unstructured.SetNestedField(cm.Object, "2", "data", "k")
					_, err = w.Dynamic.Resource(cmGVR).Namespace(ns).Update(ctx, cm, metav1.UpdateOptions{})
				}
				return err
			}},
			{"patch", "writer-", true, func(w testenv.Writer, name string) error {
				_, err := w.Dynamic.Resource(cmGVR).Namespace(ns).Patch(ctx, name, types.MergePatchType, []byte(`{"data":{"k":"3"}}`), metav1.PatchOptions{})
				return err
			}},
			{"delete", "", false, func(w testenv.Writer, name string) error {
				return w.Dynamic.Resource(cmGVR).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{})
			}},
		},
		"widgets": {
			{"create", "writer-", false, func(w testenv.Writer, name string) error {
				_, err := w.Dynamic.Resource(widgetGVR).Namespace(ns).Create(ctx, testWidget(name, 1), metav1.CreateOptions{})
				return err
			}},
			{"patch", "sizer", false, func(w testenv.Writer, name string) error {
				force := true
				_, err := w.Dynamic.Resource(widgetGVR).Namespace(ns).Patch(ctx, name, types.ApplyPatchType,
					[]byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"`+name+`"},"spec":{"size":2}}`),
					metav1.PatchOptions{FieldManager: "sizer", Force: &force})
				return err
			}},
			{"delete", "", false, func(w testenv.Writer, name string) error {
				return w.Dynamic.Resource(widgetGVR).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{})
			}},
		},
	}
	n := 0
	for _, resource := range []string{"configmaps", "widgets"} {
		for _, w := range writers {
			name := strings.ReplaceAll(strings.TrimPrefix(w.Username, "system:serviceaccount:"+ns+":"), ":", "-")
			for _, s := range steps[resource] {
				if err := s.do(w, name); err != nil {
					t.Fatalf("%s %s %s as %s: %v", s.verb, resource, name, w.Username, err)
				}
				n++
				got := fw.out.waitFor(t, 30*time.Second, n, inNamespace(ns, ""))
				p := got[n-1].p
				a := actorOf(p)
				what := fmt.Sprintf("%s %s %s by %s", resource, p["type"], p["name"], w.Username)
				want := "window"
				if s.verb == "delete" {
					want = "exact"
				}
				if effectiveUser(p) != w.Username || a["verb"] != s.verb || a["userAgent"] != w.UserAgent || a["match"] != want || a["auditID"] == nil {
					t.Errorf("%s: actor %v, want %s, verb %s, agent %s, match %s, an auditID", what, a, w.Username, s.verb, w.UserAgent, want)
				}
				// managedFields tell the creator and the applier.
				if m, _ := a["manager"].(string); (!s.again || m != "") && (!strings.HasPrefix(m, s.manager) || (s.manager == "") != (m == "")) {
					t.Errorf("%s: manager %q, want %q...", what, m, s.manager)
				}
				user, _ := a["user"].(map[string]any)
				if strings.HasPrefix(w.Username, "system:serviceaccount:") {
					if a["impersonatedUser"] != nil || user["username"] != w.Username {
						t.Errorf("%s: a service account's write names %v", what, a)
					}
				} else {
					imp, _ := a["impersonatedUser"].(map[string]any)
					if user["username"] != "admin" || !strings.Contains(fmt.Sprint(imp["groups"]), "fieldwatch:writers") {
						t.Errorf("%s: impersonated write names user %v impersonating %v, want admin as %s in fieldwatch:writers", what, user, imp, w.Username)
					}
				}
			}
		}
	}
	if v := fw.metric(t, "fieldwatch_audit_unmatched_total"); v != 0 {
		t.Errorf("fieldwatch_audit_unmatched_total = %v", v)
	}
}

// TestAttributionWaits: the rules wait for a change's audit event, within
// the bound (2s, the default). The receiver's proxy holds the apiserver's
// POSTs a second: no payload goes out meanwhile; once they come, the
// payloads of the ConfigMap's lifecycle go out in order, each naming
// alice, within the bound of when its change was watched.
func TestAttributionWaits(t *testing.T) {
	plane := sharedAuditPlane(t)
	env := plane.env
	alice := env.Impersonating(t, "alice")
	fw := runFieldwatch(t, plane, allChanges, nil)
	fw.warmUp(t, plane)
	ctx := context.Background()
	const ns, wait = "late", 2 * time.Second
	env.EnsureNamespace(t, ns)

	release := plane.hook.hold()
	defer release()
	cms := alice.Dynamic.Resource(cmGVR).Namespace(ns)
	if _, err := cms.Create(ctx, testConfigMap("l", map[string]any{"k": "0"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := cms.Patch(ctx, "l", types.MergePatchType, fmt.Appendf(nil, `{"data":{"k":"%d"}}`, i+1), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cms.Delete(ctx, "l", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the changes to be watched", func() bool {
		return fw.metric(t, "fieldwatch_audit_waiting_changes") >= 1
	})
	time.Sleep(time.Second) // the audit events are late by this: it is what the test is about, and nothing happens to poll for
	if got := fw.out.where(inNamespace(ns, "")); len(got) != 0 {
		t.Fatalf("%d payloads out while the audit events were held a second (wait %s)", len(got), wait)
	}
	release()

	testenv.Eventually(t, 30*time.Second, "the deletion's payload", func() bool {
		return len(fw.out.where(func(p map[string]any) bool { return p["namespace"] == ns && p["type"] == "deleted" })) == 1
	})
	got := fw.out.where(inNamespace(ns, ""))
	if len(got) < 3 || len(got) > 5 {
		t.Fatalf("%d payloads, want the create, one to three updates (updates watched in a burst may merge), the deletion", len(got))
	}
	last := int64(0)
	for i, l := range got {
		wantType, wantMatch := "updated", "window"
		switch i {
		case 0:
			wantType = "created"
		case len(got) - 1:
			wantType, wantMatch = "deleted", "exact"
		}
		rv, _ := strconv.ParseInt(fmt.Sprint(l.p["resourceVersion"]), 10, 64)
		if l.p["type"] != wantType || (wantType != "deleted" && rv <= last) {
			t.Errorf("payload %d: %s rv %d after rv %d: out of order", i, l.p["type"], rv, last)
		}
		last = rv
		if a := actorOf(l.p); a["match"] != wantMatch || effectiveUser(l.p) != "alice" {
			t.Errorf("payload %d (%s): actor %v, want %s alice", i, wantType, a, wantMatch)
		}
		watched, err := time.Parse(time.RFC3339Nano, fmt.Sprint(l.p["time"]))
		if err != nil {
			t.Fatal(err)
		}
		// The last change was watched a little before the hold began.
		if d := l.at.Sub(watched); d < 900*time.Millisecond || d > wait+time.Second {
			t.Errorf("payload %d (%s) went out %s after the change was watched, want within [900ms, %s]", i, wantType, d, wait+time.Second)
		}
	}
}

// TestAttributionLogFile: with --audit-log (no webhook) fieldwatch
// follows the apiserver's audit log, and the changes are attributed
// exactly (RequestResponse level in namespace exact). Rotation and
// truncation are internal/audit's TestAttributionFromLogFile.
func TestAttributionLogFile(t *testing.T) {
	plane := sharedAuditPlane(t)
	env := plane.env
	carol := env.Impersonating(t, "carol")
	state := filepath.Join(t.TempDir(), "audit-log.state")
	// A generous wait: this test is about reading the file, not about
	// timing.
	fw := runFieldwatch(t, plane, allChanges, func(c *Config) {
		c.Audit = AuditConfig{LogPath: plane.logPath, LogStateFile: state, Wait: 10 * time.Second}
	})
	testenv.Eventually(t, 10*time.Second, "the follower to open the log", func() bool {
		return strings.Contains(fw.logs.String(), "audit log: following")
	})
	ctx := context.Background()
	const ns = "exact"
	env.EnsureNamespace(t, ns)
	cms := carol.Dynamic.Resource(cmGVR).Namespace(ns)
	final := map[string]string{} // object -> its last resourceVersion
	for i := range 2 {
		name := fmt.Sprintf("logged-%d", i)
		o, err := cms.Create(ctx, testConfigMap(name, map[string]any{"v": "0"}), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for p := range 4 {
			if o, err = cms.Patch(ctx, name, types.MergePatchType, fmt.Appendf(nil, `{"data":{"v":"%d"}}`, p+1), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		final[name] = o.GetResourceVersion()
	}
	// Updates that pile up behind a busy worker merge into one payload:
	// wait for each object's last version.
	testenv.Eventually(t, time.Minute, "every object's last change", func() bool {
		seen := map[string]bool{}
		for _, l := range fw.out.where(inNamespace(ns, "")) {
			name, _ := l.p["name"].(string)
			if final[name] == l.p["resourceVersion"] {
				seen[name] = true
			}
		}
		return len(seen) == len(final)
	})
	for _, l := range fw.out.where(inNamespace(ns, "")) {
		if a := actorOf(l.p); a["match"] != "exact" || effectiveUser(l.p) != "carol" {
			t.Errorf("%s %s: actor %v, want exact carol", l.p["type"], l.p["name"], a)
		}
	}
	if v := fw.metric(t, "fieldwatch_audit_decode_errors_total"); v != 0 {
		t.Errorf("%v audit log lines failed to decode", v)
	}
}

// TestAttributionWebhookRefuses: the receiver accepts only the apiserver's
// credentials: no credentials get 401, a wrong token or a certificate of
// another CA 403, and the refusals are counted.
func TestAttributionWebhookRefuses(t *testing.T) {
	plane := sharedAuditPlane(t)
	fw := runFieldwatch(t, plane, allChanges, nil)
	other, err := testenv.NewCA("impostor")
	if err != nil {
		t.Fatal(err)
	}
	impostorCert, impostorKey, err := other.ClientCert("kube-apiserver")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(plane.caPEM)
	client := func(cert []byte, key []byte) *http.Client {
		cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		if cert != nil {
			c, err := tls.X509KeyPair(cert, key)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{c}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
	}
	body := `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[]}`
	for _, tc := range []struct {
		name   string
		client *http.Client
		token  string
		want   int
	}{
		{"no credentials", client(nil, nil), "", http.StatusUnauthorized},
		{"wrong token", client(nil, nil), "not-the-token", http.StatusForbidden},
		{"certificate of another CA", client(impostorCert, impostorKey), "", http.StatusForbidden},
		{"the token", client(nil, nil), plane.token, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, "https://"+fw.webhookAddr+"/", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, err := tc.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.want)
			}
		})
	}
	if v := fw.metric(t, "fieldwatch_audit_webhook_requests_total"); v < 4 {
		t.Errorf("fieldwatch_audit_webhook_requests_total = %v, want the 4 requests counted", v)
	}
}

// TestAttributionExcludeUsers: a rule that leaves out a controller's
// service account drops its writes and keeps a person's; a rule for that
// person only keeps hers; a CEL actor test on the username agrees.
func TestAttributionExcludeUsers(t *testing.T) {
	plane := sharedAuditPlane(t)
	env := plane.env
	const ns = "humans"
	controller := env.ServiceAccountWriter(t, ns, "controller")
	dana := env.Impersonating(t, "dana")
	fw := runFieldwatch(t, plane, `rules:
  - name: humans
    match:
      resources: [{group: "", resource: configmaps}]
      namespaces: [humans]
      excludeUsers: ["system:serviceaccount:humans:*"]
    actions: [{log: {}}]
  - name: dana
    match:
      resources: [{group: "", resource: configmaps}]
      namespaces: [humans]
      users: [dana]
    actions: [{log: {}}]
  - name: not-system
    match:
      resources: [{group: "", resource: configmaps}]
      namespaces: [humans]
    when: '!actor.user.username.startsWith("system:") && actor.match != "none"'
    actions: [{log: {}}]
  - name: everyone
    match:
      resources: [{group: "", resource: configmaps}]
      namespaces: [humans]
    actions: [{log: {}}]
`, nil)
	fw.warmUp(t, plane)
	ctx := context.Background()
	for i, w := range []testenv.Writer{controller, dana, controller, dana} {
		name := fmt.Sprintf("cm-%d", i)
		if _, err := w.Dynamic.Resource(cmGVR).Namespace(ns).Create(ctx, testConfigMap(name, map[string]any{"k": "v"}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// One at a time: a rule that does not fire has no payload to wait
		// for, the everyone rule has.
		fw.out.waitFor(t, 30*time.Second, i+1, inNamespace(ns, "everyone"))
	}
	for _, rule := range []string{"humans", "dana", "not-system"} {
		// Each rule's actions have a queue of their own.
		got := fw.out.waitFor(t, 30*time.Second, 2, inNamespace(ns, rule))
		var names []string
		for _, l := range got {
			names = append(names, fmt.Sprint(l.p["name"]))
			if u := effectiveUser(l.p); u != "dana" {
				t.Errorf("rule %s fired on %s's change", rule, u)
			}
		}
		if fmt.Sprint(names) != "[cm-1 cm-3]" {
			t.Errorf("rule %s fired on %v, want dana's cm-1 and cm-3", rule, names)
		}
	}
}

// TestAttributionNeedsASource: rules that select by user cannot run
// without an audit source: fieldwatch run says so at start, and a reload
// to such rules is refused while the running rules stay.
func TestAttributionNeedsASource(t *testing.T) {
	env := testenv.Shared(t)
	dir := t.TempDir()
	needs := "rules:\n  - name: humans\n    match: {resources: [{group: '', kind: ConfigMap}], excludeUsers: ['system:*']}\n    actions: [{log: {}}]\n" +
		"  - name: cel\n    match: {resources: [{group: '', kind: ConfigMap}]}\n    when: 'actor.user.username != \"\"'\n    actions: [{log: {}}]\n"
	plain := "rules:\n  - name: plain\n    match: {resources: [{group: '', kind: ConfigMap}]}\n    when: 'actor.manager != \"\"'\n    actions: [{log: {}}]\n"
	file := filepath.Join(dir, "rules.yaml")
	if err := writeTestFile(file, needs); err != nil {
		t.Fatal(err)
	}
	_, err := newApp(t.Context(), Config{RulesFiles: []string{file}, Rest: env.Config(), Logger: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), "rules humans, cel use match.users, match.excludeUsers or the audit fields of the CEL actor") ||
		!strings.Contains(err.Error(), "set --audit-webhook-addr or --audit-log") {
		t.Fatalf("start without an audit source: %v", err)
	}

	if err := writeTestFile(file, plain); err != nil {
		t.Fatal(err)
	}
	a, err := newApp(t.Context(), Config{RulesFiles: []string{file}, Rest: env.Config(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("actor.manager needs no audit source: %v", err)
	}
	if err := writeTestFile(file, needs); err != nil {
		t.Fatal(err)
	}
	a.reloadRules(t.Context())
	if got := a.set.Load().Rules(); len(got) != 1 || got[0].Name != "plain" {
		t.Errorf("after a refused reload the rules are %v", got)
	}
	if v := testutil.ToFloat64(a.metrics.reloadFails); v != 1 {
		t.Errorf("fieldwatch_rules_reload_failures_total = %v, want 1", v)
	}

	for _, c := range []AuditConfig{
		{WebhookAddr: ":0", WebhookCertFile: "x"},
		{WebhookCertFile: "x"},
		{LogStateFile: "x"},
	} {
		_, err := newApp(t.Context(), Config{RulesFiles: []string{file}, Rest: env.Config(), Audit: c, TotalShards: 2})
		if err == nil {
			t.Errorf("%+v with 2 shards: no error", c)
		}
	}
}

// TestAuditWebhookLingers: two replicas with leader election forward to
// each other (--audit-webhook-peers) and the apiserver posts only to the
// leader's receiver, as a Service still does for a moment after the
// leader's pod is deleted. The leader is stopped (SIGTERM): while it
// lingers its receiver takes the apiserver's posts and relays them to the
// replica that took over, which names the writer of every change made
// after. Without the linger the posts find no listener, the apiserver
// drops them, and the changes go out unattributed.
func TestAuditWebhookLingers(t *testing.T) {
	plane := sharedAuditPlane(t)
	env := plane.env
	const ns = "lingers"
	env.EnsureNamespace(t, ns)
	pods := map[string]*testenv.Proxy{"a": testenv.NewProxy(t, ""), "b": testenv.NewProxy(t, "")}
	replica := func(id string) *fieldwatchRun {
		return runFieldwatch(t, plane, allChanges, func(c *Config) {
			c.LeaderElect, c.LeaseNamespace, c.LeaseName, c.Identity = true, ns, "fieldwatch-linger-test", id
			c.Audit.WebhookPeers = []string{pods["a"].Addr(), pods["b"].Addr()}
			c.Audit.WebhookLinger = 15 * time.Second
			c.Audit.Wait = 10 * time.Second
			c.Audit.WebhookReady = func(addr string) { pods[id].SetTarget(addr) }
		})
	}
	leads := func(r *fieldwatchRun) func() bool {
		return func() bool {
			w := r.app.watcher.Load()
			return !r.app.standby.Load() && w != nil && w.Synced()
		}
	}
	a := replica("a")
	testenv.Eventually(t, time.Minute, "a to lead", leads(a))
	b := replica("b")
	plane.hook.setTarget(a.webhookAddr)
	a.warmUp(t, plane)
	testenv.Eventually(t, 30*time.Second, "b to hold the events a forwards", func() bool { return b.auditEvents(t, "peer") > 0 })

	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		a.stop()
	}()
	testenv.Eventually(t, time.Minute, "b to take over", leads(b))
	alice := env.Impersonating(t, "alice").Dynamic.Resource(cmGVR).Namespace(ns)
	const n = 3
	for i := range n {
		if _, err := alice.Create(context.Background(), testConfigMap(fmt.Sprintf("cm-%d", i), map[string]any{"k": "v"}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range b.out.waitFor(t, time.Minute, n, inNamespace(ns, "")) {
		if m := actorOf(p.p)["match"]; (m != "window" && m != "exact") || effectiveUser(p.p) != "alice" {
			t.Errorf("%v: actor %v, want alice", p.p["name"], actorOf(p.p))
		}
	}
	select {
	case <-stopped:
		t.Error("a's run returned before the changes made after its stop were attributed: it did not linger")
	default:
	}
	<-stopped
}

// TestAttributionStandbyReplica: two replicas with leader election behind
// one address (the proxy sends each new connection to the next, as a
// Service does), the first connection to the standby. The standby turns
// the apiserver's posts away (503, connection closed) and its retry
// reaches the leader, which attributes every change.
func TestAttributionStandbyReplica(t *testing.T) {
	plane := sharedAuditPlane(t)
	env := plane.env
	alice := env.Impersonating(t, "alice")
	env.EnsureNamespace(t, "replicas")
	addrs := make(chan string, 2)
	replica := func(id string) *fieldwatchRun {
		return runFieldwatch(t, plane, allChanges, func(c *Config) {
			c.LeaderElect, c.LeaseNamespace, c.LeaseName, c.Identity = true, "replicas", "fieldwatch-audit-test", id
			c.Audit.WebhookReady = func(addr string) { addrs <- addr }
		})
	}
	leader := replica("leader")
	// A replica is ready while it stands by: wait until this one leads
	// and its watcher has synced.
	testenv.Eventually(t, time.Minute, "the first replica to lead", func() bool {
		w := leader.app.watcher.Load()
		return !leader.app.standby.Load() && w != nil && w.Synced()
	})
	standby := replica("standby")
	leaderAddr, standbyAddr := <-addrs, <-addrs
	plane.hook.setTarget(standbyAddr, leaderAddr)
	if !standby.app.standby.Load() {
		t.Fatal("the second replica leads too")
	}
	leader.warmUp(t, plane)
	if v := standby.metric(t, "fieldwatch_audit_webhook_requests_total"); v < 1 {
		t.Errorf("the standby was posted %v times, want the apiserver's first post", v)
	}
	ctx := context.Background()
	for i := range 5 {
		name := fmt.Sprintf("cm-%d", i)
		if _, err := alice.Dynamic.Resource(cmGVR).Namespace("replicas").Create(ctx, testConfigMap(name, map[string]any{"k": "v"}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got := leader.out.waitFor(t, 30*time.Second, i+1, inNamespace("replicas", ""))
		if a := actorOf(got[i].p); a["match"] != "window" || effectiveUser(got[i].p) != "alice" {
			t.Errorf("%s: actor %v, want alice", name, a)
		}
	}
	if n := len(standby.out.where(func(map[string]any) bool { return true })); n != 0 {
		t.Errorf("the standby printed %d payloads", n)
	}
	if v := standby.auditEvents(t, "webhook"); v != 0 {
		t.Errorf("the standby took %v audit events", v)
	}
}
