package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// auditPlane is the audited control plane and the credentials of
// fieldwatch's audit webhook receiver. The attribution tests run
// fieldwatch in process against it, with auditing on
// (testenv.AttributionPolicy): the apiserver sends its events in batches
// of at most a second (as the README advises) to a proxy that forwards
// them to the receiver of whichever fieldwatch the running test started,
// and that a test can make hold them; it also writes them to a log file
// rotated at 1 MB.
type auditPlane struct {
	env     *testenv.Env
	hook    *gatedProxy // apiserver -> the running fieldwatch's receiver
	dir     string
	logPath string
	// The receiver's files: serving certificate and key, the CA of the
	// apiserver's client certificate, a token it does not use.
	certFile, keyFile, clientCAFile, tokenFile string
	clientName                                 string
	caPEM                                      []byte
	token                                      string
}

var (
	auditOnce   sync.Once
	auditShared *auditPlane
	auditErr    error
)

// sharedAuditPlane starts the audited control plane on first use.
func sharedAuditPlane(t *testing.T) *auditPlane {
	t.Helper()
	testenv.SkipShort(t, testenv.NeedsControlPlane)
	auditOnce.Do(func() { auditShared, auditErr = newAuditPlane() })
	if auditErr != nil {
		t.Fatalf("start the audited control plane: %v", auditErr)
	}
	return auditShared
}

// stopAuditPlane stops it, if it was started (TestMain).
func stopAuditPlane() {
	if auditShared == nil {
		return
	}
	if err := auditShared.env.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stop the audited control plane: %v\n", err)
	}
	auditShared.hook.close()
	_ = os.RemoveAll(auditShared.dir)
}

func newAuditPlane() (*auditPlane, error) {
	dir, err := os.MkdirTemp("", "fieldwatch-app-audit-")
	if err != nil {
		return nil, err
	}
	p := &auditPlane{dir: dir, logPath: filepath.Join(dir, "audit.log"), token: "app-test-token"}
	certs, err := testenv.NewAuditTLS(dir, "fieldwatch-app-audit-ca")
	if err != nil {
		return nil, err
	}
	token, err := testenv.WriteFiles(dir, testenv.NamedData{Name: "token", Data: []byte(p.token)})
	if err != nil {
		return nil, err
	}
	p.certFile, p.keyFile, p.clientCAFile, p.tokenFile = certs.CertFile, certs.KeyFile, certs.CAFile, token[0]
	p.clientName = certs.ClientName
	p.caPEM = certs.CAPEM
	if p.hook, err = newGatedProxy(); err != nil {
		return nil, err
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		return nil, err
	}
	p.env, err = testenv.New(testenv.Options{
		CRDPaths: []string{filepath.Join(root, "examples", "crds", "widgets.yaml")},
		Audit: &testenv.Audit{Policy: testenv.AttributionPolicy, LogPath: p.logPath, LogMaxSizeMB: 1,
			Webhook: certs.Webhook("https://" + p.hook.addr + "/audit")},
	})
	if err != nil {
		p.hook.close()
		return nil, err
	}
	return p, nil
}

// gatedProxy forwards TCP connections to a target that can change, and
// can hold the bytes its clients send (hold) until released.
type gatedProxy struct {
	addr string
	ln   net.Listener

	mu      sync.Mutex
	targets []string // new connections go to each in turn
	next    int
	held    chan struct{} // non-nil: client bytes wait until it is closed
	conns   map[net.Conn]bool
}

func newGatedProxy() (*gatedProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &gatedProxy{addr: ln.Addr().String(), ln: ln, conns: map[net.Conn]bool{}}
	go p.serve()
	return p, nil
}

// setTarget sends new connections to addrs, in turn (a Service in front
// of replicas), and drops the connections to the previous targets.
func (p *gatedProxy) setTarget(addrs ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.targets, p.next = addrs, 0
	// Connections to the previous target are of no use any more.
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

func (p *gatedProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := ""
		if len(p.targets) > 0 {
			target = p.targets[p.next%len(p.targets)]
			p.next++
		}
		p.mu.Unlock()
		up, err := net.Dial("tcp", target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = true, true
		p.mu.Unlock()
		go p.pipe(up, c, true)
		go p.pipe(c, up, false)
	}
}

// pipe copies src to dst; gated copies wait while the proxy holds.
func (p *gatedProxy) pipe(dst, src net.Conn, gated bool) {
	defer func() { _ = dst.Close(); _ = src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if gated {
				p.mu.Lock()
				held := p.held
				p.mu.Unlock()
				if held != nil {
					<-held
				}
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// hold makes the proxy hold what its clients send until release.
func (p *gatedProxy) hold() (release func()) {
	ch := make(chan struct{})
	p.mu.Lock()
	p.held = ch
	p.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			p.held = nil
			p.mu.Unlock()
			close(ch)
		})
	}
}

func (p *gatedProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

// stampedLines records the log action's lines with the time each came.
type stampedLines struct {
	mu      sync.Mutex
	partial []byte
	lines   []stampedPayload
}

type stampedPayload struct {
	at time.Time
	p  map[string]any
}

func (s *stampedLines) Write(b []byte) (int, error) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.partial = append(s.partial, b...)
	for {
		i := bytes.IndexByte(s.partial, '\n')
		if i < 0 {
			return len(b), nil
		}
		var m map[string]any
		if err := json.Unmarshal(s.partial[:i], &m); err != nil {
			return 0, fmt.Errorf("log action line is not JSON: %w", err)
		}
		s.lines = append(s.lines, stampedPayload{at: now, p: m})
		s.partial = s.partial[i+1:]
	}
}

// where returns the payloads that keep accepts, in the order they came.
func (s *stampedLines) where(keep func(map[string]any) bool) []stampedPayload {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []stampedPayload
	for _, l := range s.lines {
		if keep(l.p) {
			out = append(out, l)
		}
	}
	return out
}

// inNamespace keeps the payloads of one namespace (and rule, when given).
func inNamespace(ns, rule string) func(map[string]any) bool {
	return func(p map[string]any) bool {
		return p["namespace"] == ns && (rule == "" || p["rule"] == rule)
	}
}

// waitFor waits until n payloads pass keep and returns them.
func (s *stampedLines) waitFor(t *testing.T, timeout time.Duration, n int, keep func(map[string]any) bool) []stampedPayload {
	t.Helper()
	testenv.Eventually(t, timeout, fmt.Sprintf("%d payloads", n), func() bool { return len(s.where(keep)) >= n })
	return s.where(keep)
}

// fieldwatchRun is a fieldwatch running in process for one test.
type fieldwatchRun struct {
	app         *app
	out         *stampedLines
	logs        *testenv.SyncBuffer
	webhookAddr string
	// stop ends the run's context (SIGTERM) and waits for it to return.
	stop func()
}

// runFieldwatch runs fieldwatch with the rules src against the audited
// control plane until the test ends, with its audit webhook receiver
// behind the plane's proxy (edit may change the configuration), and waits
// until it is ready.
func runFieldwatch(t *testing.T, plane *auditPlane, src string, edit func(*Config)) *fieldwatchRun {
	t.Helper()
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	if err := writeTestFile(rulesFile, src); err != nil {
		t.Fatal(err)
	}
	r := &fieldwatchRun{out: &stampedLines{}, logs: &testenv.SyncBuffer{}}
	webhook := make(chan string, 1)
	cfg := Config{
		RulesFiles: []string{rulesFile}, Rest: plane.env.Config(), HTTPAddr: "127.0.0.1:0",
		Stdout: r.out, Logger: slog.New(slog.NewJSONHandler(r.logs, nil)), GracePeriod: 10 * time.Second,
		Audit: AuditConfig{
			WebhookAddr: "127.0.0.1:0", WebhookCertFile: plane.certFile, WebhookKeyFile: plane.keyFile,
			WebhookClientCAFile: plane.clientCAFile, WebhookClientNames: []string{plane.clientName}, WebhookTokenFile: plane.tokenFile,
			WebhookReady: func(addr string) { plane.hook.setTarget(addr) },
		},
	}
	if edit != nil {
		edit(&cfg)
	}
	if ready := cfg.Audit.WebhookReady; ready != nil {
		cfg.Audit.WebhookReady = func(addr string) {
			ready(addr)
			webhook <- addr
		}
	}
	a, err := newApp(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.app = a
	t.Cleanup(func() { // after a.run returned
		if t.Failed() {
			t.Logf("fieldwatch logs (last 4 KiB):\n%s", lastBytes(r.logs.String(), 4096))
			t.Logf("its payloads: %d; metrics: %s", len(r.out.where(func(map[string]any) bool { return true })), r.metricsSummary())
		}
	})
	r.stop = testenv.RunUntilCleanup(t, 30*time.Second, a.run)
	if cfg.Audit.WebhookAddr != "" {
		select {
		case r.webhookAddr = <-webhook:
		case <-time.After(30 * time.Second):
			t.Fatal("the audit webhook did not listen")
		}
	}
	testenv.Eventually(t, time.Minute, "fieldwatch to be ready", func() bool {
		ok, _ := a.ready()
		return ok
	})
	return r
}

func lastBytes(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// auditEvents returns fieldwatch_audit_events_total of a source, all
// results.
func (r *fieldwatchRun) auditEvents(t *testing.T, source string) float64 {
	t.Helper()
	families, err := r.app.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() != "fieldwatch_audit_events_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool {
				return l.GetName() == "source" && l.GetValue() == source
			}) {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// metricsSummary lists the samples of the audit, change and watcher
// event metrics, for failure messages.
func (r *fieldwatchRun) metricsSummary() string {
	families, err := r.app.reg.Gather()
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, f := range families {
		name := f.GetName()
		if !strings.HasPrefix(name, "fieldwatch_audit_") && name != "fieldwatch_changes_evaluated_total" && name != "fieldwatch_watcher_events_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			out = append(out, fmt.Sprintf("%s{%s} %v", name, strings.Join(labels, ","), m.GetCounter().GetValue()+m.GetGauge().GetValue()+float64(m.GetHistogram().GetSampleCount())))
		}
	}
	return strings.Join(out, "; ")
}

// metric returns the sum of the samples of a counter or gauge family of
// the app's registry: the audit package's collectors, unexported, are
// reached only through it (the app's own are read with
// testutil.ToFloat64).
func (r *fieldwatchRun) metric(t *testing.T, name string) float64 {
	t.Helper()
	families, err := r.app.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// warmUp writes a ConfigMap in namespace warmup and waits until the
// webhook has delivered its audit event: the apiserver's batch backend
// reached this fieldwatch.
func (r *fieldwatchRun) warmUp(t *testing.T, plane *auditPlane) {
	t.Helper()
	plane.env.EnsureNamespace(t, "warmup")
	before := r.auditEvents(t, "webhook")
	cms := plane.env.Dynamic(t).Resource(cmGVR).Namespace("warmup")
	name := fmt.Sprintf("warm-%d", time.Now().UnixNano())
	if _, err := cms.Create(context.Background(), testConfigMap(name, map[string]any{"k": "v"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the audit webhook to receive events", func() bool {
		return r.auditEvents(t, "webhook") > before
	})
}

// actorOf returns a payload's actor (empty when it has none).
func actorOf(p map[string]any) map[string]any {
	a, _ := p["actor"].(map[string]any)
	if a == nil {
		a = map[string]any{}
	}
	return a
}

// effectiveUser returns the username a payload's actor names as having
// made the change: the impersonated user, else the user.
func effectiveUser(p map[string]any) string {
	a := actorOf(p)
	for _, k := range []string{"impersonatedUser", "user"} {
		if u, ok := a[k].(map[string]any); ok {
			s, _ := u["username"].(string)
			return s
		}
	}
	return ""
}

var (
	cmGVR     = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	widgetGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
)

func testConfigMap(name string, data map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name}, "data": data,
	}}
}

func testWidget(name string, size int64) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": name}, "spec": map[string]any{"size": size},
	}}
}
