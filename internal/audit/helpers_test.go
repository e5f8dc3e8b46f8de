package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/jsonscan"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

var (
	configmaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	widgets    = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
)

// receiver is the audit webhook receiver the shared control plane posts
// to: a real Webhook (client certificate authentication) whose events go
// to the index of the test that runs, behind a gate that can hold them.
var receiver *hookFixture

type hookFixture struct {
	url     string
	certs   *testenv.AuditTLS
	webhook *Webhook
	metrics *Metrics
	stop    func()

	mu   sync.Mutex
	sink Sink
	held chan struct{} // non-nil: requests wait until it is closed
}

// Add forwards to the running test's sink.
func (h *hookFixture) Add(source string, recs []Record, ignored int) {
	h.mu.Lock()
	s := h.sink
	h.mu.Unlock()
	if s != nil {
		s.Add(source, recs, ignored)
	}
}

// use sends the events to s until the test ends.
func (h *hookFixture) use(t testing.TB, s Sink) {
	h.mu.Lock()
	h.sink = s
	h.mu.Unlock()
	t.Cleanup(func() {
		h.mu.Lock()
		h.sink = nil
		h.mu.Unlock()
	})
}

// hold makes the receiver hold requests until the returned release.
func (h *hookFixture) hold() (release func()) {
	ch := make(chan struct{})
	h.mu.Lock()
	h.held = ch
	h.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			h.held = nil
			h.mu.Unlock()
			close(ch)
		})
	}
}

func (h *hookFixture) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	held := h.held
	h.mu.Unlock()
	if held != nil {
		<-held
	}
	h.webhook.ServeHTTP(rw, r)
}

func newHookFixture() (*hookFixture, error) {
	dir, err := os.MkdirTemp("", "fieldwatch-audit-hook-")
	if err != nil {
		return nil, err
	}
	certs, err := testenv.NewAuditTLS(dir, "fieldwatch-audit-test-ca")
	if err != nil {
		return nil, err
	}
	h := &hookFixture{certs: certs}
	h.metrics = NewMetrics(nil)
	h.webhook, err = NewWebhook(WebhookOptions{CertFile: certs.CertFile, KeyFile: certs.KeyFile, ClientCAFile: certs.CAFile,
		ClientNames: []string{certs.ClientName}, Metrics: h.metrics, Logger: slog.New(slog.DiscardHandler)}, h)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	h.url = "https://" + ln.Addr().String() + "/audit"
	srv := &http.Server{Handler: h, TLSConfig: h.webhook.TLSConfig(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	h.stop = func() {
		_ = srv.Close()
		_ = os.RemoveAll(dir)
	}
	return h, nil
}

func TestMain(m *testing.M) {
	var err error
	receiver, err = newHookFixture()
	if err != nil {
		fmt.Fprintf(os.Stderr, "audit webhook fixture: %v\n", err)
		os.Exit(1)
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testenv.Main(m, testenv.Options{
		CRDPaths: []string{filepath.Join(root, "examples", "crds", "widgets.yaml")},
		Audit:    &testenv.Audit{Policy: testenv.AttributionPolicy, Webhook: receiver.webhookConfig()},
	}, receiver.stop)
}

// webhookConfig is the apiserver's side of the receiver, sending its
// batches every 100ms so that tests see events at once.
func (h *hookFixture) webhookConfig() *testenv.AuditWebhook { return h.certs.Webhook(h.url) }

func ptr[T any](v T) *T { return &v }

// watched is a change the in-test watch saw and what it was attributed.
type watched struct {
	Change
	object    *unstructured.Unstructured // as the watch delivered it
	seq       int                        // per object, from 0
	submitted time.Time
	resolved  time.Time
	done      bool
	result    change.Attribution
}

// observer watches one resource in one namespace, as the pipeline's
// watcher would, and submits every change to an Attributor.
type observer struct {
	t    testing.TB
	a    *Attributor
	gvr  schema.GroupVersionResource
	ns   string
	gate chan struct{} // when non-nil, changes are submitted only once it is closed
	// lagging: a change counts as watched when it is submitted, as from a
	// watch that lags behind the audit stream (with gate: its events are
	// held before it is watched).
	lagging bool
	// hashed: changes carry the content hash of the watched object and a
	// deletion the resourceVersion before it, as the watcher's with
	// ContentHash; now, when set, stamps them instead of time.Now.
	hashed bool
	now    func() time.Time

	mu          sync.Mutex
	changes     []*watched
	byObject    map[string][]*watched
	outOfOrder  []string
	terminating map[string]bool
	lastRV      map[string]string
}

// observe starts watching; from, when set, is the resourceVersion to
// watch from (otherwise the objects there are seen as created first).
func observe(t *testing.T, ctx context.Context, env *testenv.Env, a *Attributor, gvr schema.GroupVersionResource, ns, from string, gate chan struct{}) *observer {
	t.Helper()
	return observeLagging(t, ctx, env, a, gvr, ns, from, gate, false)
}

// observeLagging is observe with the observer's lagging set.
func observeLagging(t *testing.T, ctx context.Context, env *testenv.Env, a *Attributor, gvr schema.GroupVersionResource, ns, from string, gate chan struct{}, lagging bool) *observer {
	t.Helper()
	o := &observer{t: t, a: a, gvr: gvr, ns: ns, gate: gate, lagging: lagging, byObject: map[string][]*watched{}, terminating: map[string]bool{}, lastRV: map[string]string{}}
	w, err := env.Dynamic(t).Resource(gvr).Namespace(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: from})
	if err != nil {
		t.Fatalf("watch %s in %s: %v", gvr.Resource, ns, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		o.run(ctx, w)
	}()
	t.Cleanup(func() {
		w.Stop()
		<-done
	})
	return o
}

func (o *observer) run(ctx context.Context, w watch.Interface) {
	var pending []*watched
	gate := o.gate
	for {
		var gateC <-chan struct{}
		if gate != nil {
			gateC = gate
		}
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return
			}
			c := o.change(ev)
			if c == nil {
				continue
			}
			if gate != nil {
				pending = append(pending, c)
				continue
			}
			o.submit(ctx, c)
		case <-gateC:
			gate = nil
			for _, c := range pending {
				o.submit(ctx, c)
			}
			pending = nil
		}
	}
}

func (o *observer) change(ev watch.Event) *watched {
	u, ok := ev.Object.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	clock := time.Now
	if o.now != nil {
		clock = o.now
	}
	c := Change{Group: o.gvr.Group, Resource: o.gvr.Resource, Namespace: u.GetNamespace(), Name: u.GetName(),
		UID: string(u.GetUID()), ResourceVersion: u.GetResourceVersion(), Time: clock()}
	if o.hashed && ev.Type != watch.Deleted {
		raw, err := json.Marshal(u.Object)
		if err == nil {
			c.ContentHash, err = jsonscan.ObjectHash(raw)
		}
		if err != nil {
			o.t.Errorf("hash %s: %v", c.Name, err)
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.hashed && ev.Type == watch.Deleted {
		c.DeletedResourceVersion = o.lastRV[c.Name]
	}
	was := o.terminating[c.Name]
	now := u.GetDeletionTimestamp() != nil
	switch ev.Type {
	case watch.Added:
		c.Type = change.Created
	case watch.Modified:
		c.Type, c.DeletionStarted, c.OldResourceVersion = change.Updated, now && !was, o.lastRV[c.Name]
	case watch.Deleted:
		c.Type, c.WasTerminating = change.Deleted, was
	default:
		return nil
	}
	o.terminating[c.Name] = now
	o.lastRV[c.Name] = c.ResourceVersion
	wc := &watched{Change: c, object: u, seq: len(o.byObject[c.Name])}
	o.byObject[c.Name] = append(o.byObject[c.Name], wc)
	o.changes = append(o.changes, wc)
	return wc
}

func (o *observer) submit(ctx context.Context, wc *watched) {
	o.mu.Lock()
	wc.submitted = time.Now()
	if o.lagging {
		wc.Time = wc.submitted
	}
	o.mu.Unlock()
	err := o.a.Submit(ctx, wc.Change, func(res change.Attribution) {
		o.mu.Lock()
		defer o.mu.Unlock()
		wc.resolved, wc.done, wc.result = time.Now(), true, res
		for _, prev := range o.byObject[wc.Name][:wc.seq] {
			if !prev.done {
				o.outOfOrder = append(o.outOfOrder, fmt.Sprintf("%s #%d before #%d", wc.Name, wc.seq, prev.seq))
			}
		}
	})
	if err != nil && ctx.Err() == nil {
		o.t.Errorf("submit: %v", err)
	}
}

// snapshot returns copies of the watched changes.
func (o *observer) snapshot() []watched {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]watched, len(o.changes))
	for i, c := range o.changes {
		out[i] = *c
	}
	return out
}

// waitResolved waits until n changes were watched and all of them
// attributed, and returns them.
func (o *observer) waitResolved(t testing.TB, n int, timeout time.Duration) []watched {
	t.Helper()
	testenv.Eventually(t, timeout, fmt.Sprintf("%d %s changes attributed", n, o.gvr.Resource), func() bool {
		cs := o.snapshot()
		if len(cs) < n {
			return false
		}
		for _, c := range cs {
			if !c.done {
				return false
			}
		}
		return true
	})
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.outOfOrder) > 0 {
		t.Errorf("callbacks out of order: %v", o.outOfOrder)
	}
	return o.snapshotLocked()
}

func (o *observer) snapshotLocked() []watched {
	out := make([]watched, len(o.changes))
	for i, c := range o.changes {
		out[i] = *c
	}
	return out
}

// newAttribution makes an index and attributor fed by the shared receiver
// for one test.
func newAttribution(t *testing.T, iopts IndexOptions, aopts AttributorOptions) (*Index, *Attributor) {
	t.Helper()
	ix := NewIndex(iopts)
	a := NewAttributor(ix, aopts)
	t.Cleanup(a.Close)
	receiver.use(t, ix)
	return ix, a
}

func configMap(name string, data map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name}, "data": data,
	}}
}

func widget(name string, size int64) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": name}, "spec": map[string]any{"size": size},
	}}
}
