package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// auditPolicy audits writes to ConfigMaps at Metadata level, the level
// docs/audit-setup.md advises, and nothing else.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
omitManagedFields: true
rules:
- level: None
  verbs: [get, list, watch]
- level: Metadata
  resources: [{group: "", resources: [configmaps]}]
- level: None
`

// auditSection measures attribution on against off, side by side on one
// stream of updates of a control plane that audits ConfigMap writes and
// sends them in batches of at most a second (as docs/audit-setup.md advises) to
// the receiver of the fieldwatch with attribution: CPU per change with a
// log action (the bare informer, fieldwatch without and with attribution,
// three processes), then the latency from update to webhook receipt with
// the default --audit-wait.
func (b *bench) auditSection(ctx context.Context) error {
	_, _ = fmt.Fprintln(os.Stderr, "bench: attribution: a control plane that audits ConfigMap writes to fieldwatch's webhook")
	ca, err := testenv.NewCA("fieldwatch-bench-audit")
	if err != nil {
		return err
	}
	serverCert, serverKey, err := ca.ServerCert("fieldwatch-audit")
	if err != nil {
		return err
	}
	clientCert, clientKey, err := ca.ClientCert("kube-apiserver")
	if err != nil {
		return err
	}
	files, err := testenv.WriteFiles(b.dir,
		testenv.NamedData{Name: "audit-tls.crt", Data: serverCert},
		testenv.NamedData{Name: "audit-tls.key", Data: serverKey},
		testenv.NamedData{Name: "audit-client-ca.crt", Data: ca.CertPEM})
	if err != nil {
		return err
	}
	hookAddr, err := freeAddr()
	if err != nil {
		return err
	}
	env, err := testenv.New(testenv.Options{Audit: &testenv.Audit{Policy: auditPolicy, Webhook: &testenv.AuditWebhook{
		URL: "https://" + hookAddr + "/", CAPEM: ca.CertPEM, ClientCertPEM: clientCert, ClientKeyPEM: clientKey,
		BatchMaxWait: time.Second}}})
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	kubeconfig := filepath.Join(b.dir, "kubeconfig-audit")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(env.Config())
	if err != nil {
		return err
	}
	for _, ns := range []string{cmNS, "bench-warm-up"} {
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	n := min(b.o.updates, 5000)
	cms := dyn.Resource(configMapsGVR).Namespace(cmNS)
	if err := createMany(ctx, cms, n, benchConfigMap); err != nil {
		return err
	}
	auditFlags := []string{"--audit-webhook-addr", hookAddr, "--audit-webhook-cert-file", files[0],
		"--audit-webhook-key-file", files[1], "--audit-webhook-client-ca-file", files[2],
		"--audit-webhook-client-name", "kube-apiserver"} // the apiserver's client certificate above
	// warmUp makes a write the policy audits and waits until p's receiver
	// got its event: the apiserver's backend reached it.
	warmUp := func(p *process) error {
		before := p.metric(`fieldwatch_audit_events_total{result="indexed",source="webhook"}`)
		warm := benchConfigMap(0)
		warm.SetNamespace("bench-warm-up")
		warm.SetName(fmt.Sprintf("warm-%d", time.Now().UnixNano()))
		if _, err := dyn.Resource(configMapsGVR).Namespace("bench-warm-up").Create(ctx, warm, metav1.CreateOptions{}); err != nil {
			return err
		}
		deadline := time.Now().Add(time.Minute)
		for p.metric(`fieldwatch_audit_events_total{result="indexed",source="webhook"}`) <= before {
			if time.Now().After(deadline) {
				return fmt.Errorf("%s received no audit event", p.name)
			}
			time.Sleep(20 * time.Millisecond)
		}
		return nil
	}

	// CPU per change, log action.
	logRules, err := b.counterRules("audit-log", "log: {}")
	if err != nil {
		return err
	}
	bare, err := startBare(kubeconfig, cmNS, "configmaps")
	if err != nil {
		return err
	}
	defer bare.stop()
	off, err := startFieldwatch("fieldwatch-attribution-off", b.binary, kubeconfig, logRules, nil)
	if err != nil {
		return err
	}
	defer off.stop()
	on, err := startFieldwatch("fieldwatch-attribution-on", b.binary, kubeconfig, logRules, nil, auditFlags...)
	if err != nil {
		return err
	}
	defer on.stop()
	for _, p := range []*process{bare, off, on} {
		if err := p.waitSynced(3 * time.Minute); err != nil {
			return err
		}
	}
	if err := warmUp(on); err != nil {
		return err
	}
	time.Sleep(2 * time.Second) // let start-up work settle before reading CPU
	cpu0 := map[*process]time.Duration{bare: bare.cpu(), off: off.cpu(), on: on.cpu()}
	run := time.Now().UnixNano()
	_, _ = fmt.Fprintf(os.Stderr, "bench: %d audited updates to three consumers\n", n)
	if err := patchUpdates(ctx, cms, n, func(i int) string { return fmt.Sprintf("%d-%d", run, i) }); err != nil {
		return err
	}
	for _, p := range []*process{bare, off, on} {
		if _, err := p.waitCount(int64(n), 5*time.Minute); err != nil {
			return err
		}
	}
	cpu := map[*process]time.Duration{}
	for p, c0 := range cpu0 {
		cpu[p] = (p.cpu() - c0) / time.Duration(n)
	}
	matches := func(p *process) string {
		m := func(kind string) float64 {
			return p.metric(`fieldwatch_audit_matches_total{match="` + kind + `"}`)
		}
		return fmt.Sprintf("%.0f exact, %.0f window, %.0f ambiguous, %.0f none", m("exact"), m("window"), m("ambiguous"),
			p.metric("fieldwatch_audit_unmatched_total"))
	}
	b.t.add("CPU per change, log action, attribution off", msCol(cpu[bare]), msCol(cpu[off]), ratio(float64(cpu[off]), float64(cpu[bare])),
		fmt.Sprintf("%d ConfigMap updates audited at Metadata level, 3 consumers on one stream", n))
	b.t.add("same, attribution on (audit webhook, batches of 1s)", msCol(cpu[bare]), msCol(cpu[on]), ratio(float64(cpu[on]), float64(cpu[bare])),
		fmt.Sprintf("on/off %.2fx; %s", float64(cpu[on])/float64(cpu[off]), matches(on)))
	off.stop()
	on.stop()

	// Latency, webhook action, default --audit-wait.
	recOff, err := newReceiver()
	if err != nil {
		return err
	}
	recOn, err := newReceiver()
	if err != nil {
		return err
	}
	offRules, err := b.counterRules("audit-hook-off", "webhook: {url: 'http://"+recOff.addr+"/hook', timeout: 60s}")
	if err != nil {
		return err
	}
	onRules, err := b.counterRules("audit-hook-on", "webhook: {url: 'http://"+recOn.addr+"/hook', timeout: 60s}")
	if err != nil {
		return err
	}
	hookOff, err := startFieldwatch("fieldwatch-webhook-attribution-off", b.binary, kubeconfig, offRules, nil)
	if err != nil {
		return err
	}
	defer hookOff.stop()
	hookOn, err := startFieldwatch("fieldwatch-webhook-attribution-on", b.binary, kubeconfig, onRules, nil, auditFlags...)
	if err != nil {
		return err
	}
	defer hookOn.stop()
	for _, p := range []*process{hookOff, hookOn} {
		if err := p.waitSynced(3 * time.Minute); err != nil {
			return err
		}
	}
	if err := warmUp(hookOn); err != nil {
		return err
	}
	type latencies struct {
		mu sync.Mutex
		d  []time.Duration
	}
	var latOff, latOn latencies
	record := func(l *latencies) func([]byte) {
		return func(body []byte) {
			sent, ok := sentAt(body)
			if !ok {
				return
			}
			l.mu.Lock()
			l.d = append(l.d, time.Since(sent))
			l.mu.Unlock()
		}
	}
	recOff.reset(nil, record(&latOff))
	recOn.reset(nil, record(&latOn))
	const rate = 100
	m := min(rate*b.o.latencySeconds, n)
	_, _ = fmt.Fprintf(os.Stderr, "bench: latency with attribution at %d updates/s for %d updates\n", rate, m)
	var wg sync.WaitGroup
	next := time.Now()
	for i := range m {
		time.Sleep(time.Until(next))
		next = next.Add(time.Second / rate)
		wg.Go(func() {
			body := fmt.Appendf(nil, `{"data":{"counter":"%d-lat"}}`, time.Now().UnixNano())
			_, _ = cms.Patch(ctx, fmt.Sprintf("cm-%05d", i), types.MergePatchType, body, metav1.PatchOptions{})
		})
	}
	wg.Wait()
	for _, r := range []*receiver{recOff, recOn} {
		if _, err := r.waitReceived(m, 2*time.Minute); err != nil {
			return err
		}
	}
	var bareLat []time.Duration
	for len(bareLat) < m {
		select {
		case d := <-bare.lat:
			bareLat = append(bareLat, d)
		case <-time.After(time.Minute):
			return fmt.Errorf("the bare informer reported %d of %d latencies", len(bareLat), m)
		}
	}
	b50, b99 := percentiles(bareLat)
	for _, row := range []struct {
		label string
		l     *latencies
		note  string
	}{
		{"latency update -> webhook received, attribution off, p50 / p99", &latOff, fmt.Sprintf("%d updates at %d/s", m, rate)},
		{"same, attribution on, default --audit-wait 2s", &latOn, "the audit batch (1s) sets it: " + matches(hookOn)},
	} {
		row.l.mu.Lock()
		p50, p99 := percentiles(row.l.d)
		row.l.mu.Unlock()
		b.t.add(row.label, fmt.Sprintf("%s / %s", msCol(b50), msCol(b99)), fmt.Sprintf("%s / %s", msCol(p50), msCol(p99)),
			fmt.Sprintf("%.2fx / %.2fx", float64(p50)/float64(b50), float64(p99)/float64(b99)), row.note)
	}
	return nil
}
