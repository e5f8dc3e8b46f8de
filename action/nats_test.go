package action

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
	"github.com/fieldwatch/fieldwatch/rules"
)

// natsTestToken authenticates the test servers' clients.
const natsTestToken = "s3cret-nats-token"

// jetStreamServer is an embedded nats-server with JetStream on file
// storage, on a fixed port of 127.0.0.1, that a test can stop and start
// again on the same store.
type jetStreamServer struct {
	t     testing.TB
	store string
	port  int

	mu  sync.Mutex
	srv *natsserver.Server
}

// startJetStream starts a server and stops it when the test ends.
func startJetStream(t testing.TB) *jetStreamServer {
	t.Helper()
	// The first start picks a free port (-1); restarts reuse it.
	s := &jetStreamServer{t: t, store: t.TempDir(), port: -1}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *jetStreamServer) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.port) }

func (s *jetStreamServer) start() {
	s.t.Helper()
	srv, err := natsserver.NewServer(&natsserver.Options{
		Host: "127.0.0.1", Port: s.port, JetStream: true, StoreDir: s.store,
		Authorization: natsTestToken, NoSigs: true, NoLog: true,
	})
	if err != nil {
		s.t.Fatal(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		s.t.Fatal("nats-server not ready in 10s")
	}
	s.mu.Lock()
	s.srv = srv
	if s.port < 0 {
		s.port = srv.Addr().(*net.TCPAddr).Port
	}
	s.mu.Unlock()
}

// stop shuts the server down (JetStream flushes its store); a stopped
// server stays stopped.
func (s *jetStreamServer) stop() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
}

// client connects a test client, closed when the test ends.
func (s *jetStreamServer) client(t testing.TB) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(s.url(), nats.Token(natsTestToken))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// stream connects a test client and creates the stream FW on fw.> with a
// duplicate window of ten minutes.
func (s *jetStreamServer) stream(t testing.TB) jetstream.Stream {
	t.Helper()
	js := s.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: "FW", Subjects: []string{"fw.>"}, Storage: jetstream.FileStorage, Duplicates: 10 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// messages reads every message of st: the Nats-Msg-Id of each, in stream
// order, and the messages.
func messages(t testing.TB, st jetstream.Stream) ([]string, []jetstream.Msg) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	var msgs []jetstream.Msg
	for uint64(len(msgs)) < info.State.Msgs {
		batch, err := c.Fetch(int(min(500, info.State.Msgs-uint64(len(msgs)))), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			ids = append(ids, m.Headers().Get(jetstream.MsgIDHeader))
			msgs = append(msgs, m)
			n++
		}
		if err := batch.Error(); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatalf("read %d of %d messages", len(msgs), info.State.Msgs)
		}
	}
	return ids, msgs
}

func mustTemplate(t testing.TB, src string) *rules.Template {
	t.Helper()
	tpl, err := rules.ParseTemplate("t", src, false)
	if err != nil {
		t.Fatal(err)
	}
	return tpl
}

func natsRule(name string, spec *rules.NATSAction) *rules.Rule {
	return &rules.Rule{Name: name, Actions: []rules.Action{{NATS: spec}}}
}

// TestNATSPublish: payloads land on the rendered subject with the payload
// id as Nats-Msg-Id; the same firing delivered twice is one message; the
// metrics count the deliveries.
func TestNATSPublish(t *testing.T) {
	srv := startJetStream(t)
	st := srv.stream(t)
	t.Setenv("FW_NATS_TOKEN", natsTestToken)
	h := newHarness(t, nil)
	r := natsRule("nats-publish", &rules.NATSAction{
		URL: srv.url(), Subject: mustTemplate(t, "fw.{{.resource.resource}}.{{.type}}"), Stream: "FW",
		TokenEnv: "FW_NATS_TOKEN", Retry: fastRetry,
	})
	dc := newDoneCounter(t)
	f := newFiring(r)
	h.deliver(t, f, dc.fn(f.ID))
	h.deliver(t, f, dc.fn(f.ID+"/again"))
	g := newFiring(r)
	h.deliver(t, g, dc.fn(g.ID))
	testenv.Eventually(t, 10*time.Second, "3 deliveries done", func() bool { return dc.total.Load() == 3 })

	// f and g are of different objects: the dispatcher may deliver them
	// in either order.
	ids, msgs := messages(t, st)
	if want := []string{f.ID, g.ID}; strings.Join(slices.Sorted(slices.Values(ids)), ",") != strings.Join(slices.Sorted(slices.Values(want)), ",") {
		t.Errorf("stream holds ids %q, want %q in any order (the second copy of %s dropped by the duplicate window)", ids, want, f.ID)
	}
	if i := slices.Index(ids, f.ID); i >= 0 {
		if s := msgs[i].Subject(); s != "fw.widgets.updated" {
			t.Errorf("subject = %q", s)
		}
		if string(msgs[i].Data()) != string(f.Payload) {
			t.Errorf("data = %s, want the payload", msgs[i].Data())
		}
	}
	if got := h.metric(t, "delivered_total", "nats-publish", "nats", 0); got != 3 {
		t.Errorf("delivered_total = %v, want 3", got)
	}
	if dl := h.deadLetters(t); len(dl) != 0 {
		t.Errorf("dead letters: %+v", dl)
	}
}

// TestNATSCloudEvents: structured events decode with the SDK; binary
// events carry the attributes as ce-* headers (NATS protocol binding) and
// the payload as the data.
func TestNATSCloudEvents(t *testing.T) {
	srv := startJetStream(t)
	st := srv.stream(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeFile(t, tokenFile, natsTestToken+"\n")
	h := newHarness(t, nil)
	structured := natsRule("nats-ce-s", &rules.NATSAction{URL: srv.url(), Subject: mustTemplate(t, "fw.structured"), TokenFile: tokenFile, CloudEvents: &rules.CloudEvents{}, Retry: fastRetry})
	binary := natsRule("nats-ce-b", &rules.NATSAction{URL: srv.url(), Subject: mustTemplate(t, "fw.binary"), TokenFile: tokenFile, CloudEvents: &rules.CloudEvents{Mode: "binary", Type: "rule"}, Retry: fastRetry})
	fs, fb := newFiring(structured), newFiring(binary)
	dc := newDoneCounter(t)
	h.deliver(t, fs, dc.fn(fs.ID))
	testenv.Eventually(t, 10*time.Second, "structured delivered", func() bool { return dc.total.Load() == 1 })
	h.deliver(t, fb, dc.fn(fb.ID))
	testenv.Eventually(t, 10*time.Second, "binary delivered", func() bool { return dc.total.Load() == 2 })

	_, msgs := messages(t, st)
	if len(msgs) != 2 {
		t.Fatalf("%d messages, want 2", len(msgs))
	}
	if ct := msgs[0].Headers().Get("content-type"); ct != CloudEventsContentType {
		t.Errorf("structured content-type = %q", ct)
	}
	var e cloudevents.Event
	if err := json.Unmarshal(msgs[0].Data(), &e); err != nil {
		t.Fatalf("the SDK does not decode %s: %v", msgs[0].Data(), err)
	}
	checkEvent(t, e, fs, "io.fieldwatch.updated", "/fieldwatch/apis/example.com/v1/widgets")

	hd := msgs[1].Headers()
	want := map[string]string{
		"ce-specversion": "1.0", "ce-id": fb.ID, "ce-type": "nats-ce-b", "ce-source": "/fieldwatch/apis/example.com/v1/widgets",
		"ce-subject": "default/" + fb.Object.Name, "ce-time": "2026-12-02T12:00:00.000000Z", "content-type": "application/json",
	}
	for k, v := range want {
		if got := hd.Get(k); got != v {
			t.Errorf("binary header %s = %q, want %q", k, got, v)
		}
	}
	if string(msgs[1].Data()) != string(fb.Payload) {
		t.Errorf("binary data = %s, want the payload", msgs[1].Data())
	}
}

// TestNATSServerRestart: 1,500 payloads published while the server is
// shut down and started again on the same file store mid-stream: every
// payload is in the stream exactly once, none dead-lettered.
func TestNATSServerRestart(t *testing.T) {
	srv := startJetStream(t)
	st := srv.stream(t)
	t.Setenv("FW_NATS_TOKEN", natsTestToken)
	h := newHarness(t, nil)
	const n = 1500
	r := natsRule("nats-restart", &rules.NATSAction{
		URL: srv.url(), Subject: mustTemplate(t, "fw.{{.resource.resource}}.{{.type}}"), Stream: "FW",
		TokenEnv: "FW_NATS_TOKEN", Timeout: time.Second,
		Retry: rules.Retry{Attempts: 1000, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond},
	})
	dc := newDoneCounter(t)
	firings := make([]rules.Firing, n)
	for i := range firings {
		firings[i] = newFiring(r)
	}
	delivered := make(chan struct{})
	go func() {
		defer close(delivered)
		for _, f := range firings {
			if err := h.Deliver(context.Background(), f, dc.fn(f.ID)); err != nil {
				t.Errorf("Deliver: %v", err)
				return
			}
		}
	}()
	testenv.Eventually(t, 30*time.Second, "a third delivered", func() bool { return dc.total.Load() >= n/3 })
	srv.stop()
	testenv.Eventually(t, 30*time.Second, "publishes failing while the server is down", func() bool {
		return h.metric(t, "failed_total", "nats-restart", "nats", 0) > 0
	})
	downAt := dc.total.Load()
	srv.start()
	<-delivered
	testenv.Eventually(t, 60*time.Second, "every payload delivered", func() bool { return dc.total.Load() == n })
	if downAt == n {
		t.Fatal("every payload was delivered before the server went down: the test restarted nothing")
	}

	ids, _ := messages(t, srv.reconnectStream(t, st))
	count := map[string]int{}
	for _, id := range ids {
		count[id]++
	}
	for _, f := range firings {
		if c := count[f.ID]; c != 1 {
			t.Errorf("%s is %d times in the stream, want once", f.ID, c)
		}
	}
	if len(ids) != n {
		t.Errorf("the stream holds %d messages, want %d", len(ids), n)
	}
	if dl := h.deadLetters(t); len(dl) != 0 {
		t.Errorf("%d dead letters, first %+v", len(dl), dl[0])
	}
	t.Logf("failed attempts %v, retried %v; %d payloads done before the server went down",
		h.metric(t, "failed_total", "nats-restart", "nats", 0), h.metric(t, "retried_total", "nats-restart", "nats", 0), downAt)
}

// reconnectStream returns the stream through a new client (the old one's
// connection died with the server).
func (s *jetStreamServer) reconnectStream(t testing.TB, old jetstream.Stream) jetstream.Stream {
	t.Helper()
	js := s.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, old.CachedInfo().Config.Name)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestNATSDeadLetter: with the server down for good, a payload is retried
// within its budget and dead-lettered; the token appears in neither the
// dead letter nor the logs. A subject that renders badly is dead-lettered
// at once.
func TestNATSDeadLetter(t *testing.T) {
	srv := startJetStream(t)
	srv.stream(t)
	t.Setenv("FW_NATS_TOKEN", natsTestToken)
	h := newHarness(t, nil)
	badSubject := natsRule("nats-bad-subject", &rules.NATSAction{URL: srv.url(), Subject: mustTemplate(t, "fw.{{.nothing}}"), TokenEnv: "FW_NATS_TOKEN", Retry: fastRetry})
	down := natsRule("nats-down", &rules.NATSAction{URL: srv.url(), Subject: mustTemplate(t, "fw.x"), TokenEnv: "FW_NATS_TOKEN", Timeout: 200 * time.Millisecond, Retry: fastRetry})

	dc := newDoneCounter(t)
	fb := newFiring(badSubject)
	h.deliver(t, fb, dc.fn(fb.ID))
	testenv.Eventually(t, 10*time.Second, "bad subject dead-lettered", func() bool { return dc.total.Load() == 1 })

	srv.stop()
	fd := newFiring(down)
	h.deliver(t, fd, dc.fn(fd.ID))
	testenv.Eventually(t, 30*time.Second, "payload dead-lettered", func() bool { return dc.total.Load() == 2 })

	dls := h.deadLetters(t)
	if len(dls) != 2 {
		t.Fatalf("%d dead letters, want 2: %+v", len(dls), dls)
	}
	byID := map[string]DeadLetter{dls[0].ID: dls[0], dls[1].ID: dls[1]}
	if dl := byID[fb.ID]; dl.Attempts != 1 || !strings.Contains(dl.Error, `subject: "fw.<no value>" has white space`) {
		t.Errorf("bad subject dead letter = %+v", dl)
	}
	if dl := byID[fd.ID]; dl.Attempts != fastRetry.Attempts || dl.Action != "nats" || !strings.Contains(dl.Error, "publish to fw.x on "+srv.url()) {
		t.Errorf("server-down dead letter = %+v", dl)
	}
	if got := h.metric(t, "dead_lettered_total", "nats-down", "nats", 0); got != 1 {
		t.Errorf("dead_lettered_total = %v", got)
	}
	if got := h.metric(t, "retried_total", "nats-down", "nats", 0); got != float64(fastRetry.Attempts-1) {
		t.Errorf("retried_total = %v", got)
	}
	for _, dl := range dls {
		if strings.Contains(dl.Error, natsTestToken) || strings.Contains(string(dl.Payload), natsTestToken) {
			t.Errorf("dead letter holds the token: %+v", dl)
		}
	}
	if strings.Contains(h.logs.String(), natsTestToken) {
		t.Error("the logs hold the token")
	}
}

// TestNATSConnectionClosed: an action's connection lives as long as the
// action: a reload that drops it (Retain) closes it, after its firings.
func TestNATSConnectionClosed(t *testing.T) {
	srv := startJetStream(t)
	srv.stream(t) // one client of the test's own
	t.Setenv("FW_NATS_TOKEN", natsTestToken)
	h := newHarness(t, nil)
	r := natsRule("nats-reload", &rules.NATSAction{URL: srv.url(), Subject: mustTemplate(t, "fw.x"), TokenEnv: "FW_NATS_TOKEN", Retry: fastRetry})
	clients := func() int {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return srv.srv.NumClients()
	}
	dc := newDoneCounter(t)
	f := newFiring(r)
	h.deliver(t, f, dc.fn(f.ID))
	testenv.Eventually(t, 10*time.Second, "delivered", func() bool { return dc.total.Load() == 1 })
	if n := clients(); n != 2 {
		t.Fatalf("%d clients, want the test's and the action's", n)
	}
	h.Retain(nil)
	testenv.Eventually(t, 10*time.Second, "the action's connection closed", func() bool { return clients() == 1 })
}
