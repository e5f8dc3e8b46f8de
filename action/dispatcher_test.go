package action

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
	"github.com/fieldwatch/fieldwatch/rules"
)

// blockingReceiver answers once release is closed (or the request is
// cancelled).
func blockingReceiver(t *testing.T) (*receiver, chan struct{}) {
	t.Helper()
	release := make(chan struct{})
	rc := newReceiver(t, func(_ int, _ http.ResponseWriter, r *http.Request) int {
		select {
		case <-r.Context().Done():
		case <-release:
		}
		return http.StatusOK
	})
	return rc, release
}

// TestBackpressure: a full queue blocks Deliver until there is room or its
// context ends; nothing is dropped either way.
func TestBackpressure(t *testing.T) {
	rc, release := blockingReceiver(t)
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	h := newHarness(t, func(o *Options) {
		o.QueueSize = 1
		o.WebhookWorkers = 1
	})
	r := webhookRule("bp", &rules.WebhookAction{URL: rc.URL, Timeout: time.Minute})
	done := newDoneCounter(t)

	first := newFiring(r)
	h.deliver(t, first, done.fn(first.ID)) // taken by the worker
	testenv.Eventually(t, 5*time.Second, "the first request", func() bool { return rc.count() == 1 })
	second := newFiring(r)
	h.deliver(t, second, done.fn(second.ID)) // fills the queue

	third := newFiring(r)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := h.Deliver(ctx, third, done.fn(third.ID))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Deliver on a full queue = %v, want context.DeadlineExceeded", err)
	}
	if el := time.Since(start); el < 90*time.Millisecond {
		t.Errorf("Deliver returned after %s, before its context ended", el)
	}
	// Not queued, so dead-lettered at once rather than dropped.
	if done.count(third.ID) != 1 {
		t.Errorf("done of the firing that could not be queued: %d calls", done.count(third.ID))
	}
	dls := h.deadLetters(t)
	if len(dls) != 1 || dls[0].ID != third.ID || !strings.Contains(dls[0].Error, "not queued") {
		t.Fatalf("dead letters %+v, want the third firing's", dls)
	}

	fourth := newFiring(r)
	returned := make(chan error, 1)
	go func() { returned <- h.Deliver(context.Background(), fourth, done.fn(fourth.ID)) }()
	select {
	case err := <-returned:
		t.Fatalf("Deliver returned (%v) while the queue was full", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	released = true
	if err := <-returned; err != nil {
		t.Fatalf("Deliver once there was room: %v", err)
	}
	testenv.Eventually(t, 5*time.Second, "all done", func() bool { return done.total.Load() == 4 })
	if got := rc.count(); got != 3 {
		t.Errorf("receiver got %d requests, want 3", got)
	}
}

// TestDoneAfterEveryAction: done is called once, after the slowest action
// of the rule has finished.
func TestDoneAfterEveryAction(t *testing.T) {
	rc, release := blockingReceiver(t)
	h := newHarness(t, nil)
	r := &rules.Rule{Name: "all", Actions: []rules.Action{
		{Log: &rules.LogAction{}},
		{Webhook: &rules.WebhookAction{URL: rc.URL, Timeout: time.Minute}},
		{Exec: &rules.ExecAction{Command: []string{"/bin/true"}}},
	}}
	done := newDoneCounter(t)
	f := newFiring(r)
	h.deliver(t, f, done.fn(f.ID))
	testenv.Eventually(t, 5*time.Second, "log and exec", func() bool {
		return h.metric(t, "delivered_total", "all", "log", 0) == 1 && h.metric(t, "delivered_total", "all", "exec", 2) == 1
	})
	testenv.Eventually(t, 5*time.Second, "the webhook request", func() bool { return rc.count() == 1 })
	if done.count(f.ID) != 0 {
		t.Fatal("done called before the webhook answered")
	}
	close(release)
	testenv.Eventually(t, 5*time.Second, "done", func() bool { return done.count(f.ID) == 1 })

	// A rule without actions is done at once.
	empty := newFiring(&rules.Rule{Name: "empty"})
	h.deliver(t, empty, done.fn(empty.ID))
	if done.count(empty.ID) != 1 {
		t.Error("done not called for a rule without actions")
	}
}

// TestCloseDrains: Close delivers what is queued when the grace period
// allows it.
func TestCloseDrains(t *testing.T) {
	// The receiver answers once Close has begun: every firing but those
	// in flight is still queued then.
	rc, release := blockingReceiver(t)
	answer := sync.OnceFunc(func() { close(release) })
	defer answer()
	h := newHarness(t, func(o *Options) { o.WebhookWorkers = 2 })
	r := webhookRule("drain", &rules.WebhookAction{URL: rc.URL})
	done := newDoneCounter(t)
	const n = 200
	for range n {
		f := newFiring(r)
		h.deliver(t, f, done.fn(f.ID))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- h.Close(ctx) }()
	testenv.Eventually(t, 5*time.Second, "Close to begin", h.closing)
	if got := done.total.Load(); got != 0 {
		t.Fatalf("done %d times before the receiver answered", got)
	}
	answer()
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := done.total.Load(); got != n {
		t.Errorf("done %d times after Close, want %d", got, n)
	}
	if got := rc.count(); got != n {
		t.Errorf("receiver got %d, want %d", got, n)
	}
	if dls := h.deadLetters(t); len(dls) != 0 {
		t.Errorf("%d dead letters", len(dls))
	}
}

// TestCloseDeadLettersTheRest: what is undelivered when the grace period
// ends is dead-lettered with "shutdown", payload and all.
func TestCloseDeadLettersTheRest(t *testing.T) {
	rc, release := blockingReceiver(t)
	defer close(release)
	h := newHarness(t, func(o *Options) { o.WebhookWorkers = 1 })
	r := webhookRule("stuck", &rules.WebhookAction{URL: rc.URL, Timeout: time.Minute})
	done := newDoneCounter(t)
	const n = 5
	sent := map[string]rules.Firing{}
	for range n {
		f := newFiring(r)
		sent[f.ID] = f
		h.deliver(t, f, done.fn(f.ID))
	}
	testenv.Eventually(t, 5*time.Second, "the first request", func() bool { return rc.count() == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := h.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close = %v, want context.DeadlineExceeded", err)
	}
	if got := done.total.Load(); got != n {
		t.Errorf("done %d times, want %d", got, n)
	}
	dls := h.deadLetters(t)
	if len(dls) != n {
		t.Fatalf("%d dead letters, want %d", len(dls), n)
	}
	inFlight := 0
	for _, dl := range dls {
		f, ok := sent[dl.ID]
		if !ok {
			t.Fatalf("dead letter for unknown id %s", dl.ID)
		}
		if dl.Error != ShutdownError || dl.Rule != "stuck" || dl.Action != "webhook" || dl.Index != 0 {
			t.Errorf("dead letter %+v", dl)
		}
		if string(dl.Payload) != string(f.Payload) {
			t.Errorf("payload %s, want %s", dl.Payload, f.Payload)
		}
		if dl.Attempts == 1 {
			inFlight++
			if dl.LastError == "" {
				t.Error("the cancelled attempt has no lastError")
			}
		}
	}
	if inFlight != 1 {
		t.Errorf("%d dead letters with an attempt, want 1 (the one in flight)", inFlight)
	}

	// After Close, Deliver refuses, and dead-letters rather than drops.
	late := newFiring(r)
	if err := h.Deliver(context.Background(), late, done.fn(late.ID)); !errors.Is(err, ErrClosed) {
		t.Errorf("Deliver after Close = %v, want ErrClosed", err)
	}
	if done.count(late.ID) != 1 {
		t.Error("done not called for a firing delivered after Close")
	}
	dls = h.deadLetters(t)
	if last := dls[len(dls)-1]; last.ID != late.ID || last.Error != ShutdownError {
		t.Errorf("last dead letter %+v, want %s with %q", last, late.ID, ShutdownError)
	}
	if got := h.metric(t, "dead_lettered_total", "stuck", "webhook", 0); got != n+1 {
		t.Errorf("dead_lettered_total = %v, want %d", got, n+1)
	}
}

// TestAbort: Abort, also in the middle of a Close, cancels the attempt in
// flight and hands every undelivered firing over: no dead letter, done never
// called, each counted in handed_over_total; a firing delivered before
// stays delivered.
func TestAbort(t *testing.T) {
	for _, during := range []string{"running", "closing"} {
		t.Run(during, func(t *testing.T) {
			var cancelled atomic.Int64
			release := make(chan struct{})
			rc := newReceiver(t, func(i int, _ http.ResponseWriter, r *http.Request) int {
				if i == 1 {
					return http.StatusOK // the first is delivered
				}
				select {
				case <-r.Context().Done():
					cancelled.Add(1)
				case <-release:
				}
				return http.StatusOK
			})
			defer close(release)
			h := newHarness(t, func(o *Options) { o.WebhookWorkers = 1 })
			r := webhookRule("handover", &rules.WebhookAction{URL: rc.URL, Timeout: time.Minute})
			done := newDoneCounter(t)
			first := newFiring(r)
			h.deliver(t, first, done.fn(first.ID))
			testenv.Eventually(t, 5*time.Second, "the first delivery", func() bool { return done.count(first.ID) == 1 })
			const n = 5
			for range n {
				f := newFiring(r)
				h.deliver(t, f, done.fn(f.ID))
			}
			testenv.Eventually(t, 5*time.Second, "the second request in flight", func() bool { return rc.count() == 2 })
			closed := make(chan error, 1)
			if during == "closing" {
				go func() { closed <- h.Close(context.Background()) }()
				testenv.Eventually(t, 5*time.Second, "Close to begin", h.closing)
			}
			aborted := make(chan struct{})
			go func() { h.Abort(); close(aborted) }()
			select {
			case <-aborted:
			case <-time.After(5 * time.Second):
				t.Fatal("Abort still waits 5s later")
			}
			if during == "closing" {
				if err := <-closed; err != nil {
					t.Errorf("Close interrupted by Abort: %v", err)
				}
			}
			if got := done.total.Load(); got != 1 {
				t.Errorf("done called %d times, want once (the delivered firing only)", got)
			}
			if dls := h.deadLetters(t); len(dls) != 0 {
				t.Errorf("%d dead letters after Abort, want none: %+v", len(dls), dls)
			}
			if got := h.metric(t, "handed_over_total", "handover", "webhook", 0); got != n {
				t.Errorf("handed_over_total = %v, want %d", got, n)
			}
			testenv.Eventually(t, 5*time.Second, "the receiver to see the attempt cancelled", func() bool { return cancelled.Load() == 1 })
			late := newFiring(r)
			if err := h.Deliver(context.Background(), late, done.fn(late.ID)); !errors.Is(err, ErrClosed) {
				t.Errorf("Deliver after Abort = %v, want ErrClosed", err)
			}
			if done.count(late.ID) != 0 || len(h.deadLetters(t)) != 0 {
				t.Error("a firing refused after Abort was reported done or dead-lettered")
			}
		})
	}
}

// TestDeadLetterAfterRetries: after the last attempt the firing goes to the
// dead-letter file with what an operator needs to replay it.
func TestDeadLetterAfterRetries(t *testing.T) {
	rc := newReceiver(t, func(int, http.ResponseWriter, *http.Request) int { return http.StatusInternalServerError })
	h := newHarness(t, nil)
	r := &rules.Rule{Name: "dl", Actions: []rules.Action{
		{Log: &rules.LogAction{}},
		{Webhook: &rules.WebhookAction{URL: rc.URL, Retry: fastRetry}},
	}}
	f := newFiring(r)
	done := newDoneCounter(t)
	before := time.Now().UTC()
	h.deliver(t, f, done.fn(f.ID))
	testenv.Eventually(t, 5*time.Second, "done", func() bool { return done.count(f.ID) == 1 })

	dls := h.deadLetters(t)
	if len(dls) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dls))
	}
	dl := dls[0]
	if dl.Rule != "dl" || dl.Action != "webhook" || dl.Index != 1 || dl.Attempts != 3 || dl.ID != f.ID {
		t.Errorf("dead letter %+v", dl)
	}
	if !strings.Contains(dl.Error, "500") || dl.LastError != "" {
		t.Errorf("error %q lastError %q", dl.Error, dl.LastError)
	}
	if dl.Time.Before(before.Add(-time.Second)) || time.Since(dl.Time) > time.Minute {
		t.Errorf("time %s", dl.Time)
	}
	var payload, want map[string]any
	if err := json.Unmarshal(dl.Payload, &payload); err != nil {
		t.Fatalf("payload is not a JSON object: %v", err)
	}
	_ = json.Unmarshal(f.Payload, &want)
	if payload["id"] != want["id"] || payload["rule"] != "dl" {
		t.Errorf("payload %v", payload)
	}
	for name, want := range map[string]float64{
		"fired_total": 1, "delivered_total": 0, "failed_total": 3, "retried_total": 2, "dead_lettered_total": 1,
		"queue_depth": 0, "delivery_seconds": 0,
	} {
		if got := h.metric(t, name, "dl", "webhook", 1); got != want {
			t.Errorf("webhook %s = %v, want %v", name, got, want)
		}
	}
	if got := h.metric(t, "delivery_seconds", "dl", "log", 0); got != 1 {
		t.Errorf("log delivery_seconds count = %v, want 1", got)
	}
}

// TestDeadLetterWithoutStateDir: without a state directory, dead letters
// are logged at error level, payload included.
func TestDeadLetterWithoutStateDir(t *testing.T) {
	rc := newReceiver(t, func(int, http.ResponseWriter, *http.Request) int { return http.StatusBadRequest })
	h := newHarness(t, func(o *Options) { o.StateDir = "" })
	r := webhookRule("nodir", &rules.WebhookAction{URL: rc.URL})
	f := newFiring(r)
	done := newDoneCounter(t)
	h.deliver(t, f, done.fn(f.ID))
	testenv.Eventually(t, 5*time.Second, "done", func() bool { return done.count(f.ID) == 1 })
	found := false
	for line := range strings.SplitSeq(h.logs.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != "dead letter" {
			continue
		}
		found = true
		if rec["level"] != slog.LevelError.String() || rec["id"] != f.ID {
			t.Errorf("dead letter log %v", rec)
		}
		p, _ := rec["payload"].(map[string]any)
		if p["id"] != f.ID {
			t.Errorf("logged payload %v, want the firing's", rec["payload"])
		}
	}
	if !found {
		t.Errorf("no dead letter in the logs:\n%s", h.logs.String())
	}
}

// TestReloadKeepsQueues: a new version of a rule whose action spec is
// unchanged shares the action's queue; Retain retires the others after
// they drain.
func TestReloadKeepsQueues(t *testing.T) {
	rc := newReceiver(t, nil)
	h := newHarness(t, nil)
	v1 := &rules.Rule{Name: "r", Actions: []rules.Action{
		{Webhook: &rules.WebhookAction{URL: rc.URL, Headers: map[string]string{"X-V": "1"}}},
		{Log: &rules.LogAction{}},
	}}
	v2 := &rules.Rule{Name: "r", Actions: []rules.Action{
		{Webhook: &rules.WebhookAction{URL: rc.URL, Headers: map[string]string{"X-V": "1"}}},
		{Log: &rules.LogAction{}},
	}}
	v3 := &rules.Rule{Name: "r", Actions: []rules.Action{
		{Webhook: &rules.WebhookAction{URL: rc.URL, Headers: map[string]string{"X-V": "3"}}},
		{Log: &rules.LogAction{}},
	}}
	done := newDoneCounter(t)
	send := func(r *rules.Rule) {
		f := newFiring(r)
		h.deliver(t, f, done.fn(f.ID))
	}
	instances := func(r *rules.Rule) []*instance {
		h.mu.RLock()
		defer h.mu.RUnlock()
		return h.byRule[r]
	}
	send(v1)
	send(v2)
	i1, i2 := instances(v1), instances(v2)
	if i1[0] != i2[0] || i1[1] != i2[1] {
		t.Error("an unchanged spec got a new instance")
	}
	send(v3)
	i3 := instances(v3)
	if i3[0] == i1[0] {
		t.Error("a changed webhook spec kept its instance")
	}
	if i3[1] != i1[1] {
		t.Error("the unchanged log action of a changed rule got a new instance")
	}
	h.Retain([]*rules.Rule{v3})
	testenv.Eventually(t, 5*time.Second, "the old webhook retired", func() bool {
		h.mu.RLock()
		defer h.mu.RUnlock()
		_, live := h.live[i1[0]]
		return !live && len(h.live) == 2
	})
	// A late firing of a retired rule version is still delivered.
	send(v1)
	testenv.Eventually(t, 5*time.Second, "all done", func() bool { return done.total.Load() == 4 })
	if got := rc.count(); got != 4 {
		t.Errorf("receiver got %d, want 4", got)
	}
}

// TestRetireWhileBlocked: retiring an action whose queue is full lets the
// Deliver blocked on it finish once there is room; its firings are all
// delivered and later firings of the new rules go to a new queue at once.
func TestRetireWhileBlocked(t *testing.T) {
	rc, release := blockingReceiver(t)
	h := newHarness(t, func(o *Options) {
		o.QueueSize = 1
		o.WebhookWorkers = 1
	})
	old := webhookRule("r", &rules.WebhookAction{URL: rc.URL, Timeout: time.Minute})
	done := newDoneCounter(t)
	send := func(r *rules.Rule) {
		f := newFiring(r)
		h.deliver(t, f, done.fn(f.ID))
	}
	send(old)
	testenv.Eventually(t, 5*time.Second, "the first request", func() bool { return rc.count() == 1 })
	send(old) // the queue is full now
	blocked := newFiring(old)
	returned := make(chan error, 1)
	go func() { returned <- h.Deliver(context.Background(), blocked, done.fn(blocked.ID)) }()
	testenv.Eventually(t, 5*time.Second, "a blocked sender", func() bool {
		h.mu.RLock()
		in := h.byRule[old][0]
		h.mu.RUnlock()
		in.mu.Lock()
		defer in.mu.Unlock()
		return in.senders == 1
	})

	renamed := webhookRule("r", &rules.WebhookAction{URL: rc.URL + "/v2", Timeout: time.Minute})
	h.Retain([]*rules.Rule{renamed})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.Deliver(ctx, newFiring(renamed), nil); err != nil {
		t.Fatalf("Deliver to the new rule while the old queue is full: %v", err)
	}
	close(release)
	if err := <-returned; err != nil {
		t.Fatalf("the blocked Deliver: %v", err)
	}
	testenv.Eventually(t, 5*time.Second, "the old firings done", func() bool { return done.total.Load() == 3 })
	if dls := h.deadLetters(t); len(dls) != 0 {
		t.Errorf("dead letters: %+v", dls)
	}
}

// TestMetricsRegistered: every metric is registered under fieldwatch_, and
// a second Dispatcher on the same registry shares them.
func TestMetricsRegistered(t *testing.T) {
	reg := prometheus.NewRegistry()
	for range 2 {
		if _, err := New(Options{Registerer: reg}); err != nil {
			t.Fatalf("New: %v", err)
		}
	}
	h := newHarness(t, nil)
	r := &rules.Rule{Name: "m", Actions: []rules.Action{{Log: &rules.LogAction{}}}}
	f := newFiring(r)
	done := newDoneCounter(t)
	h.deliver(t, f, done.fn(f.ID))
	testenv.Eventually(t, 5*time.Second, "done", func() bool { return done.count(f.ID) == 1 })
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, want := range []string{
		"fieldwatch_action_fired_total", "fieldwatch_action_delivered_total", "fieldwatch_action_failed_total",
		"fieldwatch_action_retried_total", "fieldwatch_action_dead_lettered_total", "fieldwatch_action_queue_depth",
		"fieldwatch_action_delivery_seconds",
	} {
		if !names[want] {
			t.Errorf("metric %s not registered (have %v)", want, names)
		}
	}
}

// bigFiring returns a firing of r whose payload (an includeObject payload
// of a large object, say) is size bytes.
func bigFiring(r *rules.Rule, size int) rules.Firing {
	f := newFiring(r)
	pad := size - len(f.Payload) - len(`,"object":{"data":""}`)
	f.Payload = append(f.Payload[:len(f.Payload)-1], `,"object":{"data":"`+strings.Repeat("x", pad)+`"}}`...)
	return f
}

// queueUntilFull delivers firings of size bytes to r's action, whose one
// worker is stuck on the first, until one cannot be queued within 50ms,
// and returns how many were queued behind the first.
func queueUntilFull(t *testing.T, h *harness, r *rules.Rule, rc *receiver, size, limit int) int {
	t.Helper()
	done := newDoneCounter(t)
	first := bigFiring(r, size)
	h.deliver(t, first, done.fn(first.ID))
	testenv.Eventually(t, 5*time.Second, "the first request", func() bool { return rc.count() == 1 })
	for n := 0; n < limit; n++ {
		f := bigFiring(r, size)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err := h.Deliver(ctx, f, done.fn(f.ID))
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			return n
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return limit
}

// TestQueueBoundedByBytes: with includeObject on 1.5 MB objects a queue
// holds DefaultQueueBytes (16 MiB: 11 firings), not DefaultQueueSize
// firings (1,024: 1.5 GB).
func TestQueueBoundedByBytes(t *testing.T) {
	rc, release := blockingReceiver(t)
	defer close(release)
	h := newHarness(t, func(o *Options) { o.WebhookWorkers = 1 })
	r := webhookRule("bytes", &rules.WebhookAction{URL: rc.URL, Timeout: time.Minute})
	const size = 1_500_000
	n := queueUntilFull(t, h, r, rc, size, DefaultQueueSize+1)
	t.Logf("queued %d firings of %d bytes: %d bytes", n, size, n*size)
	if want := DefaultQueueBytes / size; n != want {
		t.Errorf("queued %d firings of %d bytes, want %d (%d bytes)", n, size, want, DefaultQueueBytes)
	}
}

// TestQueueTakesAFiringLargerThanItsBytes: a firing larger than
// QueueBytes waits for an empty queue, then is queued (alone).
func TestQueueTakesAFiringLargerThanItsBytes(t *testing.T) {
	rc, release := blockingReceiver(t)
	defer close(release)
	h := newHarness(t, func(o *Options) {
		o.WebhookWorkers = 1
		o.QueueBytes = 1000
	})
	r := webhookRule("huge", &rules.WebhookAction{URL: rc.URL, Timeout: time.Minute})
	if n := queueUntilFull(t, h, r, rc, 5000, 10); n != 1 {
		t.Errorf("queued %d firings larger than the queue's bytes, want 1", n)
	}
}
