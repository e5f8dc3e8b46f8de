package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fieldwatch/fieldwatch/internal/losscheck"
	"github.com/fieldwatch/fieldwatch/internal/payloadtest"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// The failover tests run replicas with short Lease timings, so that a
// takeover takes seconds.
var fastLease = []string{
	"--leader-elect-lease-duration", "3s",
	"--leader-elect-renew-deadline", "2s",
	"--leader-elect-retry-period", "500ms",
}

// hook is one payload a replica posted to the receiver.
type hook struct {
	replica string
	at      time.Time
	id      string
	typ     string
	uid     types.UID
	rv      string
	kind    string
	name    string
	// observed is the payload's observed: "" for a change one watch
	// event showed, else how its net effect was seen ("relist" ...).
	observed string
}

// hooks is a webhook receiver on 127.0.0.1 shared by replicas, each
// posting to /<replica>. A replica can be made to fail (503): its attempts
// are then recorded but nothing is delivered.
type hooks struct {
	t    *testing.T
	addr string
	mu   sync.Mutex
	got  []hook
	// failing replicas answer 503; their attempts are recorded here.
	failing  map[string]bool
	attempts map[string][]time.Time
}

func newHooks(t *testing.T) *hooks {
	t.Helper()
	h := &hooks{t: t, failing: map[string]bool{}, attempts: map[string][]time.Time{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr = ln.Addr().String()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return h
}

// ServeHTTP records a payload.
func (h *hooks) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	replica := strings.TrimPrefix(r.URL.Path, "/")
	now := time.Now()
	h.mu.Lock()
	if h.failing[replica] {
		h.attempts[replica] = append(h.attempts[replica], now)
		h.mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	h.mu.Unlock()
	p, err := payloadtest.Check(body)
	if err != nil {
		h.t.Errorf("%v", err)
		return
	}
	h.mu.Lock()
	h.got = append(h.got, hook{replica: replica, at: now, id: p.ID, typ: string(p.Type), uid: types.UID(p.UID),
		rv: p.ResourceVersion, kind: p.Resource.Kind, name: p.Name, observed: string(p.Observed)})
	h.mu.Unlock()
}

// fail makes replica's posts fail (or succeed again).
func (h *hooks) fail(replica string, on bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failing[replica] = on
}

// payloads returns what was delivered, by every replica.
func (h *hooks) payloads() []hook {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.got)
}

// lastAttempt returns when replica last posted, failing or not.
func (h *hooks) lastAttempt(replica string) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	var last time.Time
	if a := h.attempts[replica]; len(a) > 0 {
		last = a[len(a)-1]
	}
	for _, p := range h.got {
		if p.replica == replica && p.at.After(last) {
			last = p.at
		}
	}
	return last
}

// rules returns a rules file with which replica posts every change of
// ConfigMaps and Widgets in ns to the receiver.
func (h *hooks) rules(t *testing.T, ns, replica string) string {
	t.Helper()
	return h.rulesWith(t, ns, replica, "")
}

// relisted counts the payloads that say "observed":"relist".
func (h *hooks) relisted() int {
	n := 0
	for _, p := range h.payloads() {
		if p.observed == "relist" {
			n++
		}
	}
	return n
}

// rulesWith is rules with more keys (YAML at the rules' indentation, each
// line ending in a newline) in both rules.
func (h *hooks) rulesWith(t *testing.T, ns, replica, more string) string {
	t.Helper()
	action := fmt.Sprintf(`{webhook: {url: "http://%s/%s", timeout: 2s, retry: {attempts: 100000, initialBackoff: 20ms, maxBackoff: 200ms}}}`, h.addr, replica)
	return writeFile(t, "rules.yaml", fmt.Sprintf(`rules:
  - name: cm
    match:
      resources: [{group: "", kind: ConfigMap}]
      namespaces: [%[1]s]
%[3]s    actions: [%[2]s]
  - name: widget
    match:
      resources: [{group: example.com, kind: Widget}]
      namespaces: [%[1]s]
%[3]s    actions: [%[2]s]
`, ns, action, more))
}

// made is one write a test made.
type made struct {
	typ  string // created, updated, deleted
	kind string
	name string
	uid  types.UID
	rv   string // of the new state; "" for a deletion
	at   time.Time
	obj  map[string]any // the new state as the write returned it; nil for a deletion
}

// writers create, update and delete ConfigMaps and Widgets in a namespace
// until stopped, and record every write that succeeded. A write whose
// answer was lost may have been applied all the same: finish reads every
// object back and records the state it finds.
type writers struct {
	t        *testing.T
	ns       string
	mu       sync.Mutex
	writes   []made
	stop     context.CancelFunc
	done     sync.WaitGroup
	clients  map[string]dynamic.ResourceInterface // by kind
	finished sync.Once
}

var widgetsGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

// startWriters installs the Widget CRD and starts one writer for
// ConfigMaps and one for Widgets, each writing every interval. An object
// is deleted only when it is at least minAge old.
func startWriters(t *testing.T, env *testenv.Env, ns string, interval, minAge time.Duration) *writers {
	t.Helper()
	installWidgets(t, env)
	ctx, cancel := context.WithCancel(context.Background())
	w := &writers{t: t, ns: ns, stop: cancel, clients: map[string]dynamic.ResourceInterface{}}
	dyn := env.Dynamic(t)
	for i, kind := range []string{"ConfigMap", "Widget"} {
		client := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace(ns)
		if kind == "Widget" {
			client = dyn.Resource(widgetsGVR).Namespace(ns)
		}
		w.clients[kind] = client
		w.done.Go(func() { w.run(ctx, client, kind, interval, minAge, rand.New(rand.NewPCG(uint64(i), 7))) })
	}
	t.Cleanup(w.finish)
	return w
}

// installWidgets installs the example Widget CRD.
func installWidgets(t *testing.T, env *testenv.Env) {
	t.Helper()
	if _, err := env.ApplyFiles(context.Background(), testenv.ApplyOptions{}, repo(t, "examples/crds/widgets.yaml")); err != nil {
		t.Fatal(err)
	}
}

// finish stops the writers, waits for them, and records what every
// object is now where it differs from its last recorded write (a write
// applied whose answer was lost: a request cut by the stop, say).
func (w *writers) finish() {
	w.stop()
	w.done.Wait()
	w.finished.Do(w.readBack)
}

// readBack records the state of every object the writers wrote, as a
// client reads it now, where it is not its last recorded write.
func (w *writers) readBack() {
	last := map[string]made{} // by kind and name
	for _, m := range w.made() {
		last[m.kind+"/"+m.name] = m
	}
	for _, m := range last {
		o, err := w.clients[m.kind].Get(context.Background(), m.name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) && m.typ != "deleted":
			w.record(made{"deleted", m.kind, m.name, m.uid, "", time.Now(), nil})
		case err == nil && m.typ != "deleted" && o.GetResourceVersion() != m.rv && o.GetUID() == m.uid:
			w.record(made{"updated", m.kind, m.name, o.GetUID(), o.GetResourceVersion(), time.Now(), o.Object})
		case err != nil && !apierrors.IsNotFound(err):
			w.t.Errorf("reading %s %s back: %v", m.kind, m.name, err)
		}
	}
}

func (w *writers) run(ctx context.Context, client dynamic.ResourceInterface, kind string, interval, minAge time.Duration, rnd *rand.Rand) {
	type live struct {
		name string
		born time.Time
	}
	var objs []live
	for i := 0; ctx.Err() == nil; i++ {
		now := time.Now()
		switch op := rnd.IntN(10); {
		case len(objs) < 5 || op < 3:
			name := fmt.Sprintf("%s-%04d", strings.ToLower(kind), i)
			o, err := client.Create(ctx, w.object(kind, name, i), metav1.CreateOptions{})
			if err == nil {
				objs = append(objs, live{name, now})
				w.record(made{"created", kind, name, o.GetUID(), o.GetResourceVersion(), now, o.Object})
			}
		case op < 4 && now.Sub(objs[0].born) >= minAge:
			name := objs[0].name
			uid := w.uidOf(kind, name)
			if err := client.Delete(ctx, name, metav1.DeleteOptions{}); err == nil {
				objs = objs[1:]
				w.record(made{"deleted", kind, name, uid, "", now, nil})
			}
		default:
			name := objs[rnd.IntN(len(objs))].name
			patch := fmt.Appendf(nil, `{"data":{"v":"%d"}}`, i)
			if kind == "Widget" {
				patch = fmt.Appendf(nil, `{"spec":{"size":%d}}`, i)
			}
			if o, err := client.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err == nil {
				w.record(made{"updated", kind, name, o.GetUID(), o.GetResourceVersion(), now, o.Object})
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(interval):
		}
	}
}

func (w *writers) object(kind, name string, i int) *unstructured.Unstructured {
	if kind == "Widget" {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "example.com/v1", "kind": "Widget",
			"metadata": map[string]any{"name": name, "namespace": w.ns},
			"spec":     map[string]any{"size": int64(i)},
		}}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "namespace": w.ns},
		"data":     map[string]any{"v": strconv.Itoa(i)},
	}}
}

func (w *writers) record(m made) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, m)
}

func (w *writers) uidOf(kind, name string) types.UID {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := len(w.writes) - 1; i >= 0; i-- {
		if m := w.writes[i]; m.kind == kind && m.name == name {
			return m.uid
		}
	}
	return ""
}

// waitWrites waits until the writers have made n more writes than so far:
// changes in flight, where a test used to sleep.
func (w *writers) waitWrites(t *testing.T, n int) {
	t.Helper()
	target := len(w.made()) + n
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("%d more writes", n), func() bool { return len(w.made()) >= target })
}

// made returns the writes so far.
func (w *writers) made() []made {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.writes)
}

// outcome is how the payloads compare with the writes (losscheck).
type outcome = losscheck.Outcome

// compare checks the payloads against the writes (losscheck.Compare).
func compare(writes []made, got []hook) outcome {
	ws := make([]losscheck.Write, len(writes))
	for i, m := range writes {
		ws[i] = losscheck.Write{Type: m.typ, Name: m.kind + " " + m.name, UID: string(m.uid), ResourceVersion: m.rv, At: m.at}
	}
	ds := make([]losscheck.Delivery, len(got))
	for i, p := range got {
		ds[i] = losscheck.Delivery{ID: p.id, Type: p.typ, UID: string(p.uid), ResourceVersion: p.rv}
	}
	return losscheck.Compare(ws, ds)
}

// settle waits until every write so far is covered by the payloads.
func settle(t *testing.T, h *hooks, w *writers, timeout time.Duration) outcome {
	t.Helper()
	var o outcome
	testenv.Poll(timeout, func() bool {
		o = compare(w.made(), h.payloads())
		return len(o.Lost) == 0
	})
	if len(o.Lost) > 0 {
		n := min(len(o.Lost), 20)
		t.Errorf("%d changes never delivered by any replica, first %d:\n  %s", len(o.Lost), n, strings.Join(o.Lost[:n], "\n  "))
	}
	if len(o.Conflicting) > 0 {
		t.Errorf("changes delivered under different ids: %v", o.Conflicting)
	}
	return o
}

// leaderOf returns the replica that leads, waiting for one.
func leaderOf(t *testing.T, timeout time.Duration, ps ...*proc) *proc {
	t.Helper()
	var leader *proc
	testenv.Eventually(t, timeout, "a leader", func() bool {
		for _, p := range ps {
			if p.cmd.ProcessState == nil && p.metric("fieldwatch_leader ") == 1 {
				leader = p
				return true
			}
		}
		return false
	})
	return leader
}

// kubeconfigVia writes a copy of kubeconfig whose server is reached
// through addr.
func kubeconfigVia(t *testing.T, kubeconfig, addr string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		u, err := url.Parse(c.Server)
		if err != nil {
			t.Fatal(err)
		}
		u.Host = addr
		c.Server = u.String()
	}
	path := writeFile(t, "kubeconfig", "")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// apiserverAddr returns host:port of the apiserver of kubeconfig.
func apiserverAddr(t *testing.T, kubeconfig string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		u, err := url.Parse(c.Server)
		if err != nil {
			t.Fatal(err)
		}
		return u.Host
	}
	t.Fatal("kubeconfig names no cluster")
	return ""
}

// supervisor keeps a replica running as its Deployment would: when the
// process exits (a leader that lost its Lease exits to start again as a
// standby), it is started again under the same name and state directory.
// On two busy cores a leader starved of CPU can miss its renewals; a test
// that supervises its replicas then still tells loss from a restart.
type supervisor struct {
	t    *testing.T
	name string
	args []string
	kc   string

	mu       sync.Mutex
	cur      *proc
	exits    []int // the exit codes of the processes restarted
	stopping bool
	done     chan struct{}
}

// supervise watches p, a running replica started with args, until stop.
func supervise(t *testing.T, kc, name string, p *proc, args []string) *supervisor {
	s := &supervisor{t: t, name: name, args: args, kc: kc, cur: p, done: make(chan struct{})}
	go s.run()
	return s
}

func (s *supervisor) run() {
	defer close(s.done)
	for {
		s.mu.Lock()
		p := s.cur
		s.mu.Unlock()
		<-p.done
		_ = p.cmd.Wait()
		code := p.cmd.ProcessState.ExitCode()
		s.mu.Lock()
		if s.stopping {
			// Told to stop (SIGTERM): a clean exit. Another code is an
			// exit of its own just before.
			if code != 0 {
				s.exits = append(s.exits, code)
			}
			s.mu.Unlock()
			return
		}
		s.exits = append(s.exits, code)
		s.t.Logf("replica %s exited with %d: started again", s.name, code)
		s.cur = launch(s.t, s.kc, s.args...)
		s.mu.Unlock()
	}
}

// kill SIGKILLs the replica and ends the supervision: it stays down.
func (s *supervisor) kill() {
	s.mu.Lock()
	s.stopping = true
	p := s.cur
	s.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
}

// proc returns the replica's current process.
func (s *supervisor) proc() *proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// stop stops the replica (SIGTERM) and the supervision, and returns the
// exit codes of the processes that exited on their own.
func (s *supervisor) stop() []int {
	s.mu.Lock()
	s.stopping = true
	p := s.cur
	s.mu.Unlock()
	p.httpAddr() // its SIGTERM handler is installed (or it exited)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-s.done
		s.t.Errorf("replica %s did not exit 30s after SIGTERM", s.name)
	}
	return s.exits
}
