//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// writerRole is the ClusterRole the test users are bound to in their
// namespace: they may write Widgets.
const writerRole = "e2e-widget-writer"

// auditServiceIP is the ClusterIP deploy/audit/service.yaml pins, which
// the apiserver's audit webhook (make cluster configures it with
// deploy/audit/webhook-kubeconfig.yaml) posts to.
const auditServiceIP = "10.96.0.250"

// testAuditAttribution applies deploy/audit/ with the receiver's
// certificates make cluster wrote (the Secret its README describes) while
// the apiserver's audit webhook posts to the pinned ClusterIP of its
// Service: changes made by two users, alice and bob, are attributed to
// them in the payloads, by both replicas, also after the leader's pod is
// deleted mid-stream.
func testAuditAttribution(t *testing.T) {
	deployed(t)
	ctx := context.Background()
	const ns = "e2e-audit"
	c.ensureNamespace(t, ns)
	secret := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: "fieldwatch-audit-tls", Namespace: namespace},
		Data:       map[string][]byte{},
	}
	for _, f := range []string{"tls.crt", "tls.key", "client-ca.crt"} {
		data, err := os.ReadFile(filepath.Join(c.root, "bin/cluster/audit", f))
		if err != nil {
			t.Fatal(err)
		}
		secret.Data[f] = data
	}
	if _, err := c.cs.CoreV1().Secrets(namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	start := time.Now()
	c.apply(t, c.render(t, "deploy/audit", c.image)...)
	c.waitRolledOut(t, 5*time.Minute)
	t.Logf("deploy/audit/ rolled out in %s", time.Since(start).Round(100*time.Millisecond))
	svc, err := c.cs.CoreV1().Services(namespace).Get(ctx, "fieldwatch-audit", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP != auditServiceIP {
		t.Fatalf("Service fieldwatch-audit has ClusterIP %s, not the %s the apiserver posts to", svc.Spec.ClusterIP, auditServiceIP)
	}
	checkPeersResolve(t)

	users := []string{"alice", "bob"}
	var ws []testenv.WidgetWriter
	for _, u := range users {
		ws = append(ws, testenv.WidgetWriter{User: u, Prefix: u, Client: c.userClient(t, u, ns)})
	}
	logs := c.followLogs(t)
	// The apiserver's webhook backs off while the receiver is not there
	// yet: wait until a change is attributed before the measured writes.
	probes := ws[0].Client.Resource(widgetsGVR).Namespace(ns)
	attributed := false
	for i := 0; !attributed && i < 60; i++ {
		probe := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "example.com/v1", "kind": "Widget",
			"metadata": map[string]any{"name": fmt.Sprintf("probe-%d", i), "namespace": ns},
			"spec":     map[string]any{"size": int64(i)},
		}}
		created, err := probes.Create(ctx, probe, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		attributed = poll(4*time.Second, func() bool {
			for _, p := range logs.payloads("crd-audit") {
				if p.UID == string(created.GetUID()) {
					return p.Actor != nil && p.Actor.User != nil && p.Actor.User.Username == users[0]
				}
			}
			return false
		})
	}
	if !attributed {
		t.Fatal("no change was attributed within 4 minutes of deploy/audit/'s rollout")
	}
	w := testenv.StartWidgetWriters(t, ns, 100*time.Millisecond, ws...)
	w.WaitWrites(t, 50)
	leader := c.leader(t)
	handover := time.Now()
	oldUID := c.deletePod(t, leader)
	var next string
	if !poll(time.Minute, func() bool { next = c.leadingPod(t, oldUID); return next != "" }) {
		t.Fatalf("no replica led within a minute of %s's deletion", leader)
	}
	c.waitReplaced(t, leader, oldUID, 3*time.Minute)
	w.WaitWrites(t, 50) // under the new leader, both replicas up
	o := settle(t, logs, w, "crd-audit", 2*time.Minute)
	t.Logf("attribution with a failover: %s", o)

	// Every payload names the user who wrote the object (its name's
	// prefix), by exact or window match.
	type tally struct{ ok, wrong int }
	counts := map[string]*tally{} // "before"/"after" the handover, by pod and match
	var wrong []string
	for _, p := range onlyOurs(logs.payloads("crd-audit"), w) {
		who, _, _ := strings.Cut(p.Name, "-")
		user, match := "", "no actor"
		if p.Actor != nil {
			match = string(p.Actor.Match)
			if p.Actor.User != nil {
				user = p.Actor.User.Username
			}
		}
		when := "before"
		if p.at.After(handover) {
			when = "after"
		}
		k := fmt.Sprintf("%s the handover, %s, match %s", when, p.pod, match)
		if counts[k] == nil {
			counts[k] = &tally{}
		}
		if user == who && (match == "exact" || match == "window") {
			counts[k].ok++
			continue
		}
		counts[k].wrong++
		wrong = append(wrong, fmt.Sprintf("%s %s %s rv %s by %s at %s: user %q, match %q", p.pod, p.Type, p.Name, p.ResourceVersion, who, p.at.Format("15:04:05.000"), user, match))
	}
	var keys []string
	for k := range counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		t.Logf("%s: %d attributed to their writer, %d not", k, counts[k].ok, counts[k].wrong)
	}
	pages := map[string]string{}
	for _, p := range c.pods(t) {
		pages[p.Name] = c.podMetrics(t, p.Name)
	}
	if len(wrong) > 0 {
		t.Errorf("%d payloads not attributed to the user who made the change (leader %s deleted at %s, %s led next), first %d:\n  %s",
			len(wrong), leader, handover.Format("15:04:05.000"), next, min(20, len(wrong)), strings.Join(wrong[:min(20, len(wrong))], "\n  "))
		logAuditState(t, logs, pages)
	}
	now := c.leader(t)
	if n, _ := metric(pages[now], `fieldwatch_audit_webhook_requests_total{code="200"`); n == 0 {
		t.Errorf("the leader %s took no audit post from the apiserver", now)
	}
	// The replicas found each other through the cluster DNS (the peers'
	// headless Service, --audit-webhook-peers): forwards went through,
	// and no replica logged that it could not resolve its peers.
	var forwarded, peerEvents float64
	for _, page := range pages {
		n, _ := metric(page, `fieldwatch_audit_peer_forwards_total{result="ok"`)
		forwarded += n
		n, _ = metric(page, `fieldwatch_audit_events_total{result="indexed",source="peer"`)
		peerEvents += n
	}
	t.Logf("the replicas now running forwarded %.0f event lists to their peer and indexed %.0f events a peer forwarded", forwarded, peerEvents)
	if forwarded == 0 || peerEvents == 0 {
		t.Errorf("the replicas forwarded %.0f event lists to their peer and indexed %.0f events from one: want both above 0", forwarded, peerEvents)
		logAuditState(t, logs, pages)
	}
	for _, p := range c.pods(t) {
		if n := len(logs.Logged(p.Name, "cannot resolve a peer")); n > 0 {
			t.Errorf("%s logged %d times that it could not resolve a peer", p.Name, n)
		}
	}
}

// checkPeersResolve checks, through the cluster DNS on the bridge's
// address (the pods' name server), that the peers' headless Service of
// deploy/audit/ names every pod of the StatefulSet, and that a name
// outside the cluster does not exist there.
func checkPeersResolve(t *testing.T) {
	t.Helper()
	resolver := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, net.JoinHostPort(nodeIP, "53"))
	}}
	const name = "fieldwatch-audit-peers." + namespace + ".svc.cluster.local."
	var got, want []string
	ok := poll(time.Minute, func() bool {
		want = nil
		for _, p := range c.pods(t) {
			if p.Status.PodIP != "" {
				want = append(want, p.Status.PodIP)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		got, _ = resolver.LookupHost(ctx, name)
		slices.Sort(got)
		slices.Sort(want)
		return len(want) > 1 && slices.Equal(got, want)
	})
	if !ok {
		t.Fatalf("the cluster DNS resolves %s to %v, want the pods' %v", name, got, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := resolver.LookupHost(ctx, "proxy.golang.org.")
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
		t.Errorf("the cluster DNS answers proxy.golang.org with %v, want no such host", err)
	}
	t.Logf("the cluster DNS resolves %s to %v", name, got)
}

// logAuditState logs, for a failure's diagnosis, each replica's audit
// metrics and the lines its log holds about the audit webhook.
func logAuditState(t *testing.T, logs podLogs, pages map[string]string) {
	t.Helper()
	for pod, page := range pages {
		var lines []string
		for line := range strings.Lines(page) {
			if strings.HasPrefix(line, "fieldwatch_audit_") {
				lines = append(lines, strings.TrimSpace(line))
			}
		}
		t.Logf("%s's audit metrics:\n  %s", pod, strings.Join(lines, "\n  "))
		var logged []string
		for _, l := range logs.Logged(pod, "audit") {
			if !strings.Contains(l.Text, `"rule":`) { // not the payloads
				logged = append(logged, l.At.Format("15:04:05.000")+" "+l.Container+" "+l.Text)
			}
		}
		t.Logf("%s's log lines about the audit webhook (%d, last 40):\n  %s", pod, len(logged), strings.Join(logged[max(0, len(logged)-40):], "\n  "))
	}
	// The apiserver logs each event list its webhook dropped.
	data, err := os.ReadFile(filepath.Join(c.root, "bin/cluster/logs/kube-apiserver.log"))
	if err != nil {
		t.Logf("the apiserver's log: %v", err)
		return
	}
	var dropped []string
	for line := range strings.Lines(string(data)) {
		if strings.Contains(line, "Error in audit plugin") {
			dropped = append(dropped, strings.TrimSpace(line))
		}
	}
	t.Logf("the apiserver's audit webhook dropped event lists %d times (last 20):\n  %s", len(dropped), strings.Join(dropped[max(0, len(dropped)-20):], "\n  "))
}

// userClient returns a client of the cluster authenticated as user (a
// client certificate of the cluster's CA) and allowed to write Widgets in
// ns.
func (c *cluster) userClient(t testing.TB, user, ns string) dynamic.Interface {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: writerRole},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"example.com"}, Resources: []string{"widgets"}, Verbs: []string{"*"}}},
	}
	if _, err := c.cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: writerRole + "-" + user, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: writerRole},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if _, err := c.cs.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	certPEM, keyPEM := c.issueClientCert(t, user)
	cfg := rest.AnonymousClientConfig(c.cfg)
	cfg.CertData, cfg.KeyData = certPEM, keyPEM
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return dyn
}

// issueClientCert issues a client certificate for user with the cluster's
// CA (bin/cluster/pki).
func (c *cluster) issueClientCert(t testing.TB, user string) (certPEM, keyPEM []byte) {
	t.Helper()
	caPEM, err := os.ReadFile(filepath.Join(c.root, "bin/cluster/pki/ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	caKeyPEM, err := os.ReadFile(filepath.Join(c.root, "bin/cluster/pki/ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := testenv.LoadCA(caPEM, caKeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err = ca.ClientCert(user)
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, keyPEM
}
