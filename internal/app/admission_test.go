package app

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// admissionLabel is the namespace label the tests' webhook
// configurations select, each test its own value.
const admissionLabel = "fieldwatch.io/admission-test"

// admissionTLS is the serving certificate of a fieldwatch's admission
// endpoint, for 127.0.0.1, and its CA (the configuration's caBundle).
type admissionTLS struct {
	certFile, keyFile string
	caPEM             []byte
}

func newAdmissionTLS(t *testing.T) admissionTLS {
	t.Helper()
	ca, err := testenv.NewCA("fieldwatch-app-admission")
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
	return admissionTLS{certFile: files[0], keyFile: files[1], caPEM: ca.CertPEM}
}

// withAdmission turns on fieldwatch's admission endpoint on 127.0.0.1,
// telling addr where it listens; without audit, the audit source is off.
func withAdmission(tls admissionTLS, addr chan<- string, audit bool) func(*Config) {
	return func(cfg *Config) {
		if !audit {
			cfg.Audit = AuditConfig{}
		}
		cfg.Admission = AdmissionConfig{Addr: "127.0.0.1:0", CertFile: tls.certFile, KeyFile: tls.keyFile,
			Ready: func(a string) { addr <- a }}
	}
}

// registerAdmission registers the endpoint at addr for the writes to
// ConfigMaps and Widgets in the namespaces labelled label until the test
// ends, and waits until the apiserver calls it.
func registerAdmission(t *testing.T, env *testenv.Env, fw *fieldwatchRun, addr string, caPEM []byte, label string) {
	t.Helper()
	registerAdmissionURL(t, env, "https://"+addr+"/validate", caPEM, label)
	waitCalled(t, env, fw, label)
}

// registerAdmissionURL registers the webhook at url (served with a
// certificate of caPEM; nil: injected later) for the writes to ConfigMaps
// and Widgets in the namespaces labelled label until the test ends.
func registerAdmissionURL(t *testing.T, env *testenv.Env, url string, caPEM []byte, label string) {
	t.Helper()
	scope := admissionregistrationv1.NamespacedScope
	none := admissionregistrationv1.SideEffectClassNone
	ignore := admissionregistrationv1.Ignore
	equivalent := admissionregistrationv1.Equivalent
	name := "fieldwatch-app-test-" + label
	vwc := env.Clientset(t).AdmissionregistrationV1().ValidatingWebhookConfigurations()
	_, err := vwc.Create(context.Background(), &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         "record.fieldwatch.io",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{"", "example.com"}, APIVersions: []string{"v1"},
					Resources: []string{"configmaps", "widgets", "widgets/status"}, Scope: &scope},
			}},
			FailurePolicy: &ignore, SideEffects: &none, TimeoutSeconds: ptrTo(int32(2)), MatchPolicy: &equivalent,
			AdmissionReviewVersions: []string{"v1"},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{admissionLabel: label}},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = vwc.Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// waitCalled waits until fw keeps the review of a probe write in a
// namespace labelled label: the apiserver has the configuration and
// reaches the endpoint.
func waitCalled(t *testing.T, env *testenv.Env, fw *fieldwatchRun, label string) {
	t.Helper()
	probe := label + "-probe"
	labelledNamespace(t, env, probe, label)
	cms := env.Dynamic(t).Resource(cmGVR).Namespace(probe)
	n := 0
	testenv.Eventually(t, time.Minute, "the apiserver to call fieldwatch's admission webhook", func() bool {
		n++
		_, _ = cms.Create(context.Background(), testConfigMap(fmt.Sprintf("probe-%d", n), nil), metav1.CreateOptions{})
		return fw.labelled(t, "fieldwatch_admission_reviews_total", "result", "kept") > 0
	})
}

// labelledNamespace creates ns labelled for the test label.
func labelledNamespace(t *testing.T, env *testenv.Env, ns, label string) {
	t.Helper()
	_, err := env.Clientset(t).CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{admissionLabel: label}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func ptrTo[T any](v T) *T { return &v }

// labelled returns the sample of the counter or gauge family name whose
// label is value.
func (r *fieldwatchRun) labelled(t *testing.T, name, label, value string) float64 {
	t.Helper()
	families, err := r.app.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}

// TestAdmissionPayloads: `fieldwatch run --admission-addr` with no audit
// source names the writer of every change in its payload: an
// impersonated user and a service account create, update, patch, write
// the status of and delete ConfigMaps and Widgets, one write at a time;
// each actor has source admission, match exact, the effective user (the
// impersonated one: admission is not told who impersonated), the verb
// (a patch is an update to admission), and a service account token's
// credential ID. A rule selecting by user fires on the writer's changes
// only.
func TestAdmissionPayloads(t *testing.T) {
	plane := sharedAuditPlane(t)
	env := plane.env
	const ns, label = "adm-payloads", "payloads"
	labelledNamespace(t, env, ns, label)
	writers := []testenv.Writer{env.Impersonating(t, "alice"), env.ServiceAccountWriter(t, ns, "deployer")}
	tls := newAdmissionTLS(t)
	addr := make(chan string, 1)
	fw := runFieldwatch(t, plane, allChanges+`  - name: by-alice
    match:
      resources: [{group: "", resource: configmaps}]
      users: [alice]
    actions: [{log: {}}]
`, withAdmission(tls, addr, false))
	registerAdmission(t, env, fw, <-addr, tls.caPEM, label)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	type step struct {
		verb string
		do   func(w testenv.Writer, name string) error
	}
	cms := func(w testenv.Writer) dynamic.ResourceInterface { return w.Dynamic.Resource(cmGVR).Namespace(ns) }
	ws := func(w testenv.Writer) dynamic.ResourceInterface { return w.Dynamic.Resource(widgetGVR).Namespace(ns) }
	steps := map[string][]step{
		"configmaps": {
			{"create", func(w testenv.Writer, name string) error {
				_, err := cms(w).Create(ctx, testConfigMap(name, map[string]any{"k": "1"}), metav1.CreateOptions{})
				return err
			}},
			{"update", func(w testenv.Writer, name string) error {
				cm, err := cms(w).Get(ctx, name, metav1.GetOptions{})
				if err == nil {
					_ = unstructured.SetNestedField(cm.Object, "2", "data", "k")
					_, err = cms(w).Update(ctx, cm, metav1.UpdateOptions{})
				}
				return err
			}},
			{"update", func(w testenv.Writer, name string) error { // a patch
				_, err := cms(w).Patch(ctx, name, types.MergePatchType, []byte(`{"data":{"k":"3"}}`), metav1.PatchOptions{})
				return err
			}},
			{"delete", func(w testenv.Writer, name string) error { return cms(w).Delete(ctx, name, metav1.DeleteOptions{}) }},
		},
		"widgets": {
			{"create", func(w testenv.Writer, name string) error {
				_, err := ws(w).Create(ctx, testWidget(name, 1), metav1.CreateOptions{})
				return err
			}},
			{"update", func(w testenv.Writer, name string) error { // the status subresource
				wd, err := ws(w).Get(ctx, name, metav1.GetOptions{})
				if err == nil {
					_ = unstructured.SetNestedField(wd.Object, "Ready", "status", "phase")
					_, err = ws(w).UpdateStatus(ctx, wd, metav1.UpdateOptions{})
				}
				return err
			}},
			{"delete", func(w testenv.Writer, name string) error { return ws(w).Delete(ctx, name, metav1.DeleteOptions{}) }},
		},
	}
	all := inNamespace(ns, "all")
	n := 0
	for _, resource := range []string{"configmaps", "widgets"} {
		for _, w := range writers {
			name := strings.ReplaceAll(strings.TrimPrefix(w.Username, "system:serviceaccount:"+ns+":"), ":", "-")
			for _, s := range steps[resource] {
				if err := s.do(w, name); err != nil {
					t.Fatalf("%s %s %s as %s: %v", s.verb, resource, name, w.Username, err)
				}
				n++
				p := fw.out.waitFor(t, 30*time.Second, n, all)[n-1].p
				a := actorOf(p)
				what := fmt.Sprintf("%s %s %s by %s", resource, p["type"], p["name"], w.Username)
				user, _ := a["user"].(map[string]any)
				if a["source"] != "admission" || a["match"] != "exact" || effectiveUser(p) != w.Username || a["verb"] != s.verb ||
					a["impersonatedUser"] != nil || a["auditID"] != nil {
					t.Errorf("%s: actor %v", what, a)
				}
				extra, _ := user["extra"].(map[string]any)
				if _, ok := extra["authentication.kubernetes.io/credential-id"]; ok != strings.HasPrefix(w.Username, "system:serviceaccount:") {
					t.Errorf("%s: user extra %v, want a service account token's credential ID only", what, extra)
				}
			}
		}
	}
	byAlice := fw.out.where(inNamespace(ns, "by-alice"))
	if len(byAlice) != len(steps["configmaps"]) {
		t.Errorf("the rule of alice's writes fired %d times, want %d", len(byAlice), len(steps["configmaps"]))
	}
	for _, l := range byAlice {
		if effectiveUser(l.p) != "alice" {
			t.Errorf("the rule of alice's writes fired on a change by %s", effectiveUser(l.p))
		}
	}
	if v := fw.metric(t, "fieldwatch_audit_unmatched_total"); v != 0 {
		t.Errorf("fieldwatch_audit_unmatched_total = %v", v)
	}
}

// TestAdmissionWithAudit: with both the audit webhook and admission, the
// payloads name the writer from admission at once, and the audit events
// that come after are taken as theirs (confirmed), never as candidates
// for the next change of the object: writes by alice and bob taking
// turns on one ConfigMap are all exact, none ambiguous.
func TestAdmissionWithAudit(t *testing.T) {
	plane := sharedAuditPlane(t)
	env := plane.env
	const ns, label = "adm-both", "both"
	labelledNamespace(t, env, ns, label)
	alice, bob := env.Impersonating(t, "alice"), env.Impersonating(t, "bob")
	tls := newAdmissionTLS(t)
	addr := make(chan string, 1)
	fw := runFieldwatch(t, plane, allChanges, withAdmission(tls, addr, true))
	fw.warmUp(t, plane)
	registerAdmission(t, env, fw, <-addr, tls.caPEM, label)
	ctx := context.Background()
	if _, err := alice.Dynamic.Resource(cmGVR).Namespace(ns).Create(ctx, testConfigMap("turns", map[string]any{"k": "0"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	writers := []testenv.Writer{bob, alice}
	const writes = 10
	for i := range writes {
		w := writers[i%2]
		if _, err := w.Dynamic.Resource(cmGVR).Namespace(ns).Patch(ctx, "turns", types.MergePatchType, fmt.Appendf(nil, `{"data":{"k":"%d"}}`, i+1), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		p := fw.out.waitFor(t, 30*time.Second, i+2, inNamespace(ns, ""))[i+1].p
		if a := actorOf(p); a["source"] != "admission" || a["match"] != "exact" || effectiveUser(p) != w.Username {
			t.Errorf("write %d by %s: actor %v", i, w.Username, a)
		}
	}
	testenv.Eventually(t, 30*time.Second, "the audit events of the writes, confirmed", func() bool {
		return fw.labelled(t, "fieldwatch_admission_audit_echoes_total", "result", "confirmed") >= writes
	})
	if v := fw.labelled(t, "fieldwatch_admission_audit_echoes_total", "result", "conflict"); v != 0 {
		t.Errorf("%v audit events conflicted with admission's answers", v)
	}
	sources := map[string]int{}
	for _, l := range fw.out.where(inNamespace(ns, "")) {
		sources[fmt.Sprint(actorOf(l.p)["source"])]++
	}
	if !slices.Equal([]int{sources["admission"]}, []int{writes + 1}) {
		t.Errorf("sources %v, want every payload's admission", sources)
	}
}

// TestAdmissionCertRotation: with --admission-cert-secret fieldwatch makes
// its serving certificate itself (no cert-manager): it fills the empty
// Secret with a CA and a certificate for the DNS names given, serves it,
// and keeps the configuration's caBundle in step, so that the apiserver,
// trusting nothing else, calls the endpoint and its payloads name the
// writer.
func TestAdmissionCertRotation(t *testing.T) {
	plane := sharedAuditPlane(t)
	env := plane.env
	const ns, label = "adm-certs", "certs"
	labelledNamespace(t, env, ns, label)
	ctx := context.Background()
	cs := env.Clientset(t)
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "fieldwatch-admission-tls"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The port is picked first: the configuration names it, and
	// fieldwatch listens only once its certificate is written.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	registerAdmissionURL(t, env, "https://localhost:"+port+"/validate", nil, label)
	listening := make(chan string, 1)
	fw := runFieldwatch(t, plane, allChanges, func(cfg *Config) {
		cfg.Audit = AuditConfig{}
		cfg.Admission = AdmissionConfig{Addr: addr, CertSecret: ns + "/fieldwatch-admission-tls", WebhookConfig: "fieldwatch-app-test-" + label,
			CertDNSNames: []string{"localhost"}, CertDir: t.TempDir(), Ready: func(a string) { listening <- a }}
	})
	select {
	case <-listening:
	case <-time.After(time.Minute):
		t.Fatal("the admission webhook did not listen within a minute of the rotation's start")
	}
	sec, err := cs.CoreV1().Secrets(ns).Get(ctx, "fieldwatch-admission-tls", metav1.GetOptions{})
	if err != nil || len(sec.Data["ca.crt"]) == 0 || len(sec.Data["tls.crt"]) == 0 || len(sec.Data["tls.key"]) == 0 {
		t.Fatalf("Secret %v: %v", keysOf(sec), err)
	}
	testenv.Eventually(t, time.Minute, "the caBundle kept in step", func() bool {
		vwc, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "fieldwatch-app-test-"+label, metav1.GetOptions{})
		return err == nil && string(vwc.Webhooks[0].ClientConfig.CABundle) == string(sec.Data["ca.crt"])
	})
	waitCalled(t, env, fw, label)
	alice := env.Impersonating(t, "alice")
	if _, err := alice.Dynamic.Resource(cmGVR).Namespace(ns).Create(ctx, testConfigMap("rotated", map[string]any{"k": "1"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := fw.out.waitFor(t, 30*time.Second, 1, inNamespace(ns, ""))[0].p
	if a := actorOf(p); a["source"] != "admission" || a["match"] != "exact" || effectiveUser(p) != "alice" {
		t.Errorf("actor %v", a)
	}
}

// keysOf lists the keys of a Secret's data, for messages.
func keysOf(s *corev1.Secret) []string {
	if s == nil {
		return nil
	}
	var out []string
	for k := range s.Data {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
