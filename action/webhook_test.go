package action

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
	"github.com/fieldwatch/fieldwatch/rules"
)

// request is what a receiver saw of one request.
type request struct {
	at     time.Time
	header http.Header
	body   []byte
}

// receiver is a local webhook receiver on 127.0.0.1 whose answers a test
// programs: respond returns the status for the n-th request (1-based) and
// may set headers or block.
type receiver struct {
	*httptest.Server
	respond func(n int, w http.ResponseWriter, r *http.Request) int

	mu       sync.Mutex
	requests []request
	newConns atomic.Int64
}

func newReceiver(t testing.TB, respond func(n int, w http.ResponseWriter, r *http.Request) int) *receiver {
	t.Helper()
	rc := &receiver{respond: respond}
	rc.Server = httptest.NewUnstartedServer(http.HandlerFunc(rc.serve))
	rc.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			rc.newConns.Add(1)
		}
	}
	rc.Start()
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	rc.requests = append(rc.requests, request{at: time.Now(), header: r.Header.Clone(), body: body})
	n := len(rc.requests)
	rc.mu.Unlock()
	code := http.StatusOK
	if rc.respond != nil {
		code = rc.respond(n, w, r)
	}
	w.WriteHeader(code)
	_, _ = io.WriteString(w, "answer "+http.StatusText(code))
}

func (rc *receiver) got() []request {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]request(nil), rc.requests...)
}

func (rc *receiver) count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.requests)
}

func webhookRule(name string, spec *rules.WebhookAction) *rules.Rule {
	return &rules.Rule{Name: name, Actions: []rules.Action{{Webhook: spec}}}
}

func TestWebhookRequest(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	secretFile := filepath.Join(dir, "secret")
	writeFile(t, tokenFile, "tok-1\n")
	writeFile(t, secretFile, "s3cret\n")
	t.Setenv("FIELDWATCH_TEST_SECRET", "env-secret")

	rc := newReceiver(t, nil)
	body, err := rules.ParseTemplate("body", `{"text": {{json .rule}}, "kind": {{json .resource.kind}}}`, true)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name       string
		spec       rules.WebhookAction
		secret     string
		sigHeader  string
		wantBody   func(f rules.Firing) string
		wantBearer string
	}{
		{
			name: "file secret and token",
			spec: rules.WebhookAction{
				Headers:         map[string]string{"X-Team": "shop"},
				BearerTokenFile: tokenFile,
				Signing:         &rules.Signing{SecretFile: secretFile},
			},
			secret:     "s3cret",
			sigHeader:  "X-Fieldwatch-Signature",
			wantBody:   func(f rules.Firing) string { return string(f.Payload) },
			wantBearer: "Bearer tok-1",
		},
		{
			name: "env secret, own header, template",
			spec: rules.WebhookAction{
				Headers:  map[string]string{"X-Team": "shop"},
				Signing:  &rules.Signing{SecretEnv: "FIELDWATCH_TEST_SECRET", Header: "X-Hub-Signature-256"},
				Template: body,
			},
			secret:    "env-secret",
			sigHeader: "X-Hub-Signature-256",
			wantBody:  func(f rules.Firing) string { return `{"text": "` + f.Rule.Name + `", "kind": "Widget"}` },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			tc.spec.URL = rc.URL + "/hook"
			r := webhookRule("hook", &tc.spec)
			f := newFiring(r)
			done := newDoneCounter(t)
			before := rc.count()
			h.deliver(t, f, done.fn(f.ID))
			testenv.Eventually(t, 5*time.Second, "done", func() bool { return done.count(f.ID) == 1 })
			reqs := rc.got()[before:]
			if len(reqs) != 1 {
				t.Fatalf("receiver got %d requests, want 1", len(reqs))
			}
			req := reqs[0]
			if got := string(req.body); got != tc.wantBody(f) {
				t.Errorf("body = %s, want %s", got, tc.wantBody(f))
			}
			for k, want := range map[string]string{
				"Content-Type":    "application/json",
				"Idempotency-Key": f.ID,
				"X-Team":          "shop",
				"Authorization":   tc.wantBearer,
			} {
				if got := req.header.Get(k); got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
			ts, sig := req.header.Get(TimestampHeader), req.header.Get(tc.sigHeader)
			if err := VerifySignature([]byte(tc.secret), ts, sig, req.body, time.Minute, time.Now()); err != nil {
				t.Errorf("signature %q at %q does not verify: %v", sig, ts, err)
			}
			if err := VerifySignature([]byte("other"), ts, sig, req.body, time.Minute, time.Now()); !errors.Is(err, ErrBadSignature) {
				t.Errorf("signature verifies with the wrong secret: %v", err)
			}
		})
	}
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestWebhookTokenRotation: the bearer token file is read again when it
// changes, as a projected service-account token does.
func TestWebhookTokenRotation(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeFile(t, tokenFile, "first")
	rc := newReceiver(t, nil)
	h := newHarness(t, nil)
	r := webhookRule("rotate", &rules.WebhookAction{URL: rc.URL, BearerTokenFile: tokenFile})
	send := func() string {
		t.Helper()
		f := newFiring(r)
		done := newDoneCounter(t)
		h.deliver(t, f, done.fn(f.ID))
		testenv.Eventually(t, 5*time.Second, "done", func() bool { return done.count(f.ID) == 1 })
		reqs := rc.got()
		return reqs[len(reqs)-1].header.Get("Authorization")
	}
	if got := send(); got != "Bearer first" {
		t.Fatalf("Authorization = %q, want Bearer first", got)
	}
	writeFile(t, tokenFile, "second-longer") // new size
	if got := send(); got != "Bearer second-longer" {
		t.Fatalf("after a rewrite: Authorization = %q", got)
	}
	writeFile(t, tokenFile, "third--longer") // same size: the mtime tells
	future := time.Now().Add(time.Hour)
	if err := os.Chtimes(tokenFile, future, future); err != nil {
		t.Fatal(err)
	}
	if got := send(); got != "Bearer third--longer" {
		t.Fatalf("after a same-size rewrite: Authorization = %q", got)
	}
}

// TestWebhookRetries: failures are retried until the receiver accepts,
// with the same idempotency key; permanent statuses are not retried.
func TestWebhookRetries(t *testing.T) {
	cases := []struct {
		name          string
		status        int // of the first failures
		failures      int
		wantRequests  int
		wantDelivered bool
	}{
		{"500 three times", http.StatusInternalServerError, 3, 4, true},
		{"502", http.StatusBadGateway, 1, 2, true},
		{"503", http.StatusServiceUnavailable, 2, 3, true},
		{"408 is retried", http.StatusRequestTimeout, 1, 2, true},
		{"429 is retried", http.StatusTooManyRequests, 1, 2, true},
		{"400 is permanent", http.StatusBadRequest, 1, 1, false},
		{"401 is permanent", http.StatusUnauthorized, 1, 1, false},
		{"404 is permanent", http.StatusNotFound, 1, 1, false},
		{"422 is permanent", http.StatusUnprocessableEntity, 1, 1, false},
		{"a redirect is not followed", http.StatusTemporaryRedirect, 1, 1, false},
		{"500 past the budget", http.StatusInternalServerError, 10, 5, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) int {
				if n <= tc.failures {
					if tc.status == http.StatusTemporaryRedirect {
						w.Header().Set("Location", "http://127.0.0.1:1/elsewhere")
					}
					return tc.status
				}
				return http.StatusOK
			})
			h := newHarness(t, nil)
			retry := rules.Retry{Attempts: 5, InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}
			r := webhookRule("retries", &rules.WebhookAction{URL: rc.URL, Retry: retry})
			f := newFiring(r)
			done := newDoneCounter(t)
			h.deliver(t, f, done.fn(f.ID))
			testenv.Eventually(t, 5*time.Second, "done", func() bool { return done.count(f.ID) == 1 })

			reqs := rc.got()
			if len(reqs) != tc.wantRequests {
				t.Fatalf("receiver got %d requests, want %d", len(reqs), tc.wantRequests)
			}
			for i, req := range reqs {
				if got := req.header.Get("Idempotency-Key"); got != f.ID {
					t.Errorf("request %d: Idempotency-Key %q, want %q", i, got, f.ID)
				}
			}
			dls := h.deadLetters(t)
			delivered := h.metric(t, "delivered_total", "retries", "webhook", 0)
			if tc.wantDelivered {
				if len(dls) != 0 || delivered != 1 {
					t.Errorf("delivered %v, dead letters %+v; want delivered", delivered, dls)
				}
			} else {
				if len(dls) != 1 || delivered != 0 {
					t.Fatalf("delivered %v, dead letters %d; want one dead letter", delivered, len(dls))
				}
				if dls[0].Attempts != tc.wantRequests || !strings.Contains(dls[0].Error, http.StatusText(tc.status)) {
					t.Errorf("dead letter attempts %d error %q; want %d attempts and the status", dls[0].Attempts, dls[0].Error, tc.wantRequests)
				}
			}
			if got, want := h.metric(t, "failed_total", "retries", "webhook", 0), float64(min(tc.failures, tc.wantRequests)); got != want {
				t.Errorf("failed_total = %v, want %v", got, want)
			}
		})
	}
}

// TestWebhookRetryAfter: a 429's Retry-After (seconds or an HTTP date) sets
// the wait, capped at MaxBackoff.
func TestWebhookRetryAfter(t *testing.T) {
	cases := []struct {
		name       string
		retryAfter func() string
		maxBackoff time.Duration
		minGap     time.Duration
		maxGap     time.Duration
	}{
		{"seconds", func() string { return "1" }, time.Minute, 900 * time.Millisecond, 10 * time.Second},
		{"http date", func() string { return time.Now().Add(2 * time.Second).UTC().Format(http.TimeFormat) }, time.Minute, 900 * time.Millisecond, 10 * time.Second},
		{"capped by MaxBackoff", func() string { return "3600" }, 50 * time.Millisecond, 40 * time.Millisecond, 5 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) int {
				if n == 1 {
					w.Header().Set("Retry-After", tc.retryAfter())
					return http.StatusTooManyRequests
				}
				return http.StatusOK
			})
			h := newHarness(t, nil)
			retry := rules.Retry{Attempts: 3, InitialBackoff: time.Millisecond, MaxBackoff: tc.maxBackoff}
			r := webhookRule("throttled", &rules.WebhookAction{URL: rc.URL, Retry: retry})
			f := newFiring(r)
			done := newDoneCounter(t)
			h.deliver(t, f, done.fn(f.ID))
			testenv.Eventually(t, 15*time.Second, "done", func() bool { return done.count(f.ID) == 1 })
			reqs := rc.got()
			if len(reqs) != 2 {
				t.Fatalf("got %d requests, want 2", len(reqs))
			}
			gap := reqs[1].at.Sub(reqs[0].at)
			if gap < tc.minGap || gap > tc.maxGap {
				t.Errorf("retry after %s, want between %s and %s", gap, tc.minGap, tc.maxGap)
			}
		})
	}
}

// TestWebhookTimeout: a receiver that hangs past the timeout is a failed
// attempt; after the budget the firing is dead-lettered.
func TestWebhookTimeout(t *testing.T) {
	release := make(chan struct{})
	rc := newReceiver(t, func(_ int, _ http.ResponseWriter, r *http.Request) int {
		select {
		case <-r.Context().Done():
		case <-release:
		}
		return http.StatusOK
	})
	defer close(release)
	h := newHarness(t, nil)
	retry := rules.Retry{Attempts: 2, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond}
	r := webhookRule("hang", &rules.WebhookAction{URL: rc.URL, Timeout: 100 * time.Millisecond, Retry: retry})
	f := newFiring(r)
	done := newDoneCounter(t)
	start := time.Now()
	h.deliver(t, f, done.fn(f.ID))
	testenv.Eventually(t, 5*time.Second, "done", func() bool { return done.count(f.ID) == 1 })
	if el := time.Since(start); el < 200*time.Millisecond {
		t.Errorf("two attempts of a 100ms timeout took %s", el)
	}
	dls := h.deadLetters(t)
	if len(dls) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dls))
	}
	if dls[0].Attempts != 2 || !strings.Contains(dls[0].Error, "deadline exceeded") {
		t.Errorf("dead letter: attempts %d error %q", dls[0].Attempts, dls[0].Error)
	}
}

// TestWebhookReceiverComesBack: a receiver that is down for a while gets
// every firing, once each, when it is back.
func TestWebhookReceiverComesBack(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // down: connections are refused

	h := newHarness(t, nil)
	retry := rules.Retry{Attempts: 100, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}
	r := webhookRule("comeback", &rules.WebhookAction{URL: "http://" + addr + "/hook", Retry: retry})
	done := newDoneCounter(t)
	const n = 50
	ids := map[string]bool{}
	for range n {
		f := newFiring(r)
		ids[f.ID] = true
		h.deliver(t, f, done.fn(f.ID))
	}
	testenv.Eventually(t, 5*time.Second, "failed attempts", func() bool {
		return h.metric(t, "failed_total", "comeback", "webhook", 0) >= n
	})
	if done.total.Load() != 0 {
		t.Fatalf("done called while the receiver was down")
	}

	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen again on %s: %v", addr, err)
	}
	rc := &receiver{}
	srv := &http.Server{Handler: http.HandlerFunc(rc.serve)}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	testenv.Eventually(t, 10*time.Second, "every firing delivered", func() bool { return done.total.Load() == n })
	seen := map[string]int{}
	for _, req := range rc.got() {
		seen[req.header.Get("Idempotency-Key")]++
	}
	for id := range ids {
		if seen[id] != 1 {
			t.Errorf("%s received %d times, want once", id, seen[id])
		}
	}
	if dls := h.deadLetters(t); len(dls) != 0 {
		t.Errorf("%d dead letters", len(dls))
	}
}

// TestWebhookConnectionReuse: N requests use about as many connections as
// there are workers, errors with bodies included (every response body is
// drained and closed). The transport may dial a spare connection when a
// worker's next request races the return of its connection to the pool,
// hence the slack; a leak would show one connection per request.
func TestWebhookConnectionReuse(t *testing.T) {
	rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) int {
		if n%3 == 0 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	const workers, n = 8, 3000
	h := newHarness(t, func(o *Options) { o.WebhookWorkers = workers })
	retry := rules.Retry{Attempts: 10, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond}
	r := webhookRule("reuse", &rules.WebhookAction{URL: rc.URL, Retry: retry})
	done := newDoneCounter(t)
	for range n {
		f := newFiring(r)
		h.deliver(t, f, done.fn(f.ID))
	}
	testenv.Eventually(t, 30*time.Second, "all delivered", func() bool { return done.total.Load() == n })
	if got := rc.count(); got < n {
		t.Fatalf("receiver got %d requests, want at least %d", got, n)
	}
	if conns := rc.newConns.Load(); conns > 2*workers {
		t.Errorf("%d requests used %d connections; want about one per worker (%d)", rc.count(), conns, workers)
	}
}

// TestWebhookSlowReceiverIsolated: a receiver that hangs holds up neither
// the rule's other actions nor other rules.
func TestWebhookSlowReceiverIsolated(t *testing.T) {
	release := make(chan struct{})
	slow := newReceiver(t, func(_ int, _ http.ResponseWriter, r *http.Request) int {
		select {
		case <-r.Context().Done():
		case <-release:
		}
		return http.StatusOK
	})
	defer close(release)
	fast := newReceiver(t, nil)
	h := newHarness(t, func(o *Options) { o.WebhookWorkers = 2 })
	stuck := &rules.Rule{Name: "stuck", Actions: []rules.Action{
		{Webhook: &rules.WebhookAction{URL: slow.URL, Timeout: time.Minute}},
		{Log: &rules.LogAction{}},
	}}
	other := webhookRule("other", &rules.WebhookAction{URL: fast.URL})
	const n = 20
	for range n {
		h.deliver(t, newFiring(stuck), nil)
		h.deliver(t, newFiring(other), nil)
	}
	testenv.Eventually(t, 5*time.Second, "the other rule's webhook", func() bool { return fast.count() == n })
	testenv.Eventually(t, 5*time.Second, "the stuck rule's log action", func() bool {
		return strings.Count(h.stdout.String(), "\n") == n
	})
	if got := h.metric(t, "queue_depth", "stuck", "webhook", 0); got != n-2 {
		t.Errorf("stuck webhook queue depth %v, want %d (2 in flight)", got, n-2)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"-3", 0},
		{"5", 5 * time.Second},
		{" 7 ", 7 * time.Second},
		{"Wed, 02 Dec 2026 12:00:30 GMT", 30 * time.Second},
		{"Wed, 02 Dec 2026 11:00:00 GMT", 0},
		{"soon", 0},
	}
	for _, tc := range cases {
		if got := parseRetryAfter(tc.in, now); got != tc.want {
			t.Errorf("parseRetryAfter(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestBackoff(t *testing.T) {
	r := rules.Retry{Attempts: 10, InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}
	for attempt, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 9: time.Second} {
		for range 20 {
			got := backoff(r, attempt, errors.New("x"))
			if got < want/2 || got > want {
				t.Fatalf("backoff after attempt %d = %s, want in [%s, %s]", attempt, got, want/2, want)
			}
		}
	}
	ra := &deliveryError{err: errors.New("429"), retryAfter: 5 * time.Second}
	if got := backoff(r, 1, ra); got != time.Second {
		t.Errorf("Retry-After 5s with MaxBackoff 1s: waited %s", got)
	}
	ra.retryAfter = 300 * time.Millisecond
	if got := backoff(r, 1, ra); got != 300*time.Millisecond {
		t.Errorf("Retry-After 300ms: waited %s", got)
	}
}

// TestWebhookURLNotInErrors: a URL with credentials, a token in its path
// and one in its query never reaches an error, a log line or a dead
// letter: they show its scheme and host only.
func TestWebhookURLNotInErrors(t *testing.T) {
	failing := newReceiver(t, func(int, http.ResponseWriter, *http.Request) int { return http.StatusInternalServerError })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	_ = l.Close() // nothing listens there: connection refused
	for name, host := range map[string]string{"500": strings.TrimPrefix(failing.URL, "http://"), "refused": closed} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, nil)
			r := webhookRule("secret-url", &rules.WebhookAction{
				URL:   "http://user:PASSWORD@" + host + "/hooks/PATHTOKEN?token=QUERYTOKEN",
				Retry: fastRetry,
			})
			f := newFiring(r)
			done := newDoneCounter(t)
			h.deliver(t, f, done.fn(f.ID))
			testenv.Eventually(t, 10*time.Second, "done", func() bool { return done.count(f.ID) == 1 })
			dls := h.deadLetters(t)
			if len(dls) != 1 || !strings.Contains(dls[0].Error, "http://"+host) {
				t.Fatalf("dead letters %+v, want one naming http://%s", dls, host)
			}
			raw, err := os.ReadFile(filepath.Join(h.stateDir, DeadLetterFile))
			if err != nil {
				t.Fatal(err)
			}
			for _, secret := range []string{"PASSWORD", "PATHTOKEN", "QUERYTOKEN"} {
				if strings.Contains(string(raw), secret) || strings.Contains(h.logs.String(), secret) {
					t.Errorf("%s is in the dead letter or the log:\n%s\n%s", secret, raw, h.logs.String())
				}
			}
		})
	}
}

// TestWebhookTokenFileLinkedToCredentials: a bearerTokenFile (or signing
// secretFile) that is a link into the service account's credentials is
// refused when read: nothing is sent.
func TestWebhookTokenFileLinkedToCredentials(t *testing.T) {
	creds := t.TempDir()
	if err := os.WriteFile(filepath.Join(creds, "token"), []byte("the-pods-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	saved := rules.CredentialDirs
	rules.CredentialDirs = []string{creds}
	t.Cleanup(func() { rules.CredentialDirs = saved })
	link := filepath.Join(t.TempDir(), "innocent")
	if err := os.Symlink(filepath.Join(creds, "token"), link); err != nil {
		t.Fatal(err)
	}
	rc := newReceiver(t, nil)
	h := newHarness(t, nil)
	for i, spec := range []*rules.WebhookAction{
		{URL: rc.URL, BearerTokenFile: link, Retry: fastRetry},
		{URL: rc.URL, Signing: &rules.Signing{SecretFile: link}, Retry: fastRetry},
	} {
		r := webhookRule(fmt.Sprintf("linked-%d", i), spec)
		f := newFiring(r)
		done := newDoneCounter(t)
		h.deliver(t, f, done.fn(f.ID))
		testenv.Eventually(t, 10*time.Second, "done", func() bool { return done.count(f.ID) == 1 })
	}
	dls := h.deadLetters(t)
	if len(dls) != 2 {
		t.Fatalf("dead letters %+v, want both firings", dls)
	}
	for _, dl := range dls {
		if dl.Attempts != 1 || !strings.Contains(dl.Error, "leads to the service account's credentials: refused") {
			t.Errorf("dead letter %+v, want refused at the first attempt", dl)
		}
	}
	if n := rc.count(); n != 0 {
		t.Errorf("the receiver got %d requests", n)
	}
}
