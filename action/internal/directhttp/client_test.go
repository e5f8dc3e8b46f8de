package directhttp

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// testServer is a local HTTP server that counts the connections it
// accepted and records each request.
type testServer struct {
	url     string
	srv     *http.Server
	conns   atomic.Int64 // accepted
	closed  atomic.Int64 // closed
	mu      sync.Mutex
	reqs    []*http.Request
	bodies  []string
	respond func(w http.ResponseWriter, r *http.Request)
}

func newTestServer(t *testing.T, respond func(w http.ResponseWriter, r *http.Request), configure ...func(*http.Server)) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{url: "http://" + ln.Addr().String(), respond: respond}
	s.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			s.mu.Lock()
			s.reqs = append(s.reqs, r)
			s.bodies = append(s.bodies, string(body))
			s.mu.Unlock()
			if s.respond != nil {
				s.respond(w, r)
			}
		}),
		ConnState: func(_ net.Conn, st http.ConnState) {
			switch st {
			case http.StateNew:
				s.conns.Add(1)
			case http.StateClosed:
				s.closed.Add(1)
			}
		},
	}
	for _, c := range configure {
		c(s.srv)
	}
	go func() { _ = s.srv.Serve(ln) }()
	t.Cleanup(func() { _ = s.srv.Close() })
	return s
}

func (s *testServer) requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reqs)
}

// post posts body to url through its Target, reading the
// response to its end; it returns the status.
func post(t *testing.T, ctx context.Context, c *Client, url string, h http.Header, body string) (int, error) {
	t.Helper()
	target, err := c.Target(url)
	if err != nil || target == nil {
		t.Fatalf("target for %s: %v, %v", url, target, err)
	}
	var lines Header
	for k, vs := range h {
		for _, v := range vs {
			lines.Add(k, v)
		}
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Minute)
	}
	resp, release, err := target.Post(ctx, deadline, "", lines, []byte(body))
	if err != nil {
		return 0, err
	}
	defer release()
	return resp.StatusCode, nil
}

// TestPost: the request arrives as net/http would send it (method,
// path and query, Host, Content-Length, headers, body), and sequential
// requests share one kept-alive connection.
func TestPost(t *testing.T) {
	s := newTestServer(t, nil)
	c := New(Options{MaxIdle: 4})
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Idempotency-Key", "uid/1/rule")
	h.Set("Content-Length", "999") // the client writes its own
	for i := range 50 {
		code, err := post(t, context.Background(), c, s.url+"/hook/a%20b?token=x", h, `{"n":`+string(rune('0'+i%10))+`}`)
		if err != nil || code != http.StatusOK {
			t.Fatalf("post %d: %d, %v", i, code, err)
		}
	}
	if n := s.conns.Load(); n != 1 {
		t.Errorf("50 sequential posts opened %d connections, want 1", n)
	}
	r := s.reqs[7]
	if r.Method != http.MethodPost || r.RequestURI != "/hook/a%20b?token=x" || r.Host != strings.TrimPrefix(s.url, "http://") ||
		r.ContentLength != 7 || r.Header.Get("Idempotency-Key") != "uid/1/rule" || r.Header.Get("Content-Type") != "application/json" || s.bodies[7] != `{"n":7}` {
		t.Errorf("request: %s %s host %s length %d headers %v body %q", r.Method, r.RequestURI, r.Host, r.ContentLength, r.Header, s.bodies[7])
	}
}

// TestStaleConnection: a kept-alive connection the receiver closed
// while it was idle is replaced and the request sent again; it arrives
// once.
func TestStaleConnection(t *testing.T) {
	s := newTestServer(t, nil, func(srv *http.Server) { srv.IdleTimeout = 50 * time.Millisecond })
	c := New(Options{MaxIdle: 4})
	for i := range 3 {
		if code, err := post(t, context.Background(), c, s.url, nil, "x"); err != nil || code != http.StatusOK {
			t.Fatalf("post %d: %d, %v", i, code, err)
		}
		want := int64(i + 1)
		testenv.Eventually(t, 5*time.Second, "the receiver to close the idle connection", func() bool { return s.closed.Load() == want })
	}
	if n, c := s.requests(), s.conns.Load(); n != 3 || c != 3 {
		t.Errorf("3 posts, each after the receiver closed the connection: %d requests on %d connections, want 3 on 3", n, c)
	}
}

// TestConnectionKept: a connection is kept after a chunked response
// and a response within maxDrain, and not after one asking to close
// it or a body past maxDrain.
func TestConnectionKept(t *testing.T) {
	for _, tc := range []struct {
		name    string
		respond func(w http.ResponseWriter, r *http.Request)
		conns   int64
	}{
		{"small", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }, 1},
		{"chunked", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte("part one "))
			w.(http.Flusher).Flush()
			_, _ = w.Write([]byte("part two"))
		}, 1},
		{"connection-close", func(w http.ResponseWriter, _ *http.Request) { w.Header().Set("Connection", "close") }, 3},
		{"large-body", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte(strings.Repeat("x", maxDrain+1)))
		}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestServer(t, tc.respond)
			c := New(Options{MaxIdle: 4})
			for i := range 3 {
				if code, err := post(t, context.Background(), c, s.url, nil, "x"); err != nil || code != http.StatusOK {
					t.Fatalf("post %d: %d, %v", i, code, err)
				}
			}
			if n := s.conns.Load(); n != tc.conns {
				t.Errorf("3 posts opened %d connections, want %d", n, tc.conns)
			}
		})
	}
}

// rawServer answers each request on a connection with the bytes reply.
func rawServer(t *testing.T, reply string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					if _, err := c.Write([]byte(reply)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// TestInformational: an informational response (103 Early Hints)
// before the final one is skipped; a malformed response is an error.
func TestInformational(t *testing.T) {
	c := New(Options{MaxIdle: 4})
	url := rawServer(t, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/1.1 202 Accepted\r\nContent-Length: 2\r\n\r\nok")
	for i := range 2 {
		if code, err := post(t, context.Background(), c, url, nil, "x"); err != nil || code != http.StatusAccepted {
			t.Fatalf("post %d: %d, %v; want 202", i, code, err)
		}
	}
	bad := rawServer(t, "SMTP ready\r\n\r\n")
	if code, err := post(t, context.Background(), c, bad, nil, "x"); err == nil {
		t.Errorf("a malformed response: status %d, no error", code)
	}
}

// TestCancel: ending the request's context ends a request the
// receiver holds, at once, with the context's error; the connection is
// not kept.
func TestCancel(t *testing.T) {
	hold := make(chan struct{})
	defer close(hold)
	held := make(chan struct{}, 1)
	s := newTestServer(t, func(_ http.ResponseWriter, r *http.Request) {
		select {
		case held <- struct{}{}:
		default:
		}
		select {
		case <-hold:
		case <-r.Context().Done():
		}
	})
	c := New(Options{MaxIdle: 4})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-held; cancel() }() // once the receiver holds the request
	// The receiver holds the request until the test ends: only the
	// cancellation can end it.
	_, err := post(t, ctx, c, s.url, nil, "x")
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled while the receiver held the request: error %v, want context.Canceled", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := post(t, ctx, c, s.url, nil, "x"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("past the deadline: error %v, want context.DeadlineExceeded", err)
	}
	if n := len(c.pools); n != 1 {
		t.Fatalf("%d c", n)
	}
	for _, p := range c.pools {
		if n := p.idleCount(); n != 0 {
			t.Errorf("%d connections kept after requests that ended early", n)
		}
	}
}

// TestRefuses: a header value net/http would refuse is an
// ErrInvalidHeader, nothing sent; URLs with user info or a non-ASCII host go through net/http.
func TestRefuses(t *testing.T) {
	s := newTestServer(t, nil)
	c := New(Options{MaxIdle: 4})
	h := http.Header{"X-Bad": {"a\r\nInjected: yes"}}
	if _, err := post(t, context.Background(), c, s.url, h, "x"); !errors.Is(err, ErrInvalidHeader) {
		t.Errorf("a header value with CR LF: error %v, want ErrInvalidHeader", err)
	}
	if s.requests() != 0 {
		t.Errorf("%d requests sent with a bad header", s.requests())
	}
	for _, url := range []string{"http://user:secret@127.0.0.1:1/hook", "http://bücher.example/hook", "ftp://127.0.0.1/x"} {
		if target, err := c.Target(url); target != nil || err != nil {
			t.Errorf("%s: target %v, %v; want none (net/http)", url, target, err)
		}
	}
}

func (p *pool) idleCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

// TestIdleTimeout: a connection idle for the pool's idle timeout is
// closed by the pool, with no request to the pool after it (a webhook
// whose URL changed leaves its pool for good).
func TestIdleTimeout(t *testing.T) {
	s := newTestServer(t, nil)
	c := New(Options{MaxIdle: 4, IdleTimeout: 200 * time.Millisecond})
	var wg sync.WaitGroup
	hold := make(chan struct{})
	for range 3 { // three connections at once, then idle
		wg.Go(func() {
			<-hold
			if code, err := post(t, context.Background(), c, s.url, nil, "x"); err != nil || code != http.StatusOK {
				t.Errorf("post: %d, %v", code, err)
			}
		})
	}
	close(hold)
	wg.Wait()
	opened := s.conns.Load()
	testenv.Eventually(t, 10*time.Second, "the pool to close its idle connections", func() bool { return s.closed.Load() == opened })
	for _, p := range c.pools {
		if n := p.idleCount(); n != 0 {
			t.Errorf("%d idle connections left in the pool", n)
		}
	}
	if code, err := post(t, context.Background(), c, s.url, nil, "x"); err != nil || code != http.StatusOK {
		t.Errorf("post after the sweep: %d, %v", code, err)
	}
}

// TestTLS: an https target dials with Options.TLSConfig (here trusting the
// test server's certificate alone), speaks HTTP/1.1 over it, and sends the
// Host the caller gives in place of the URL's.
func TestTLS(t *testing.T) {
	var hosts []string
	var mu sync.Mutex
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hosts = append(hosts, r.Host+" "+r.Proto)
		mu.Unlock()
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	calls := 0
	c := New(Options{MaxIdle: 4, TLSConfig: func() (*tls.Config, error) {
		calls++
		return &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}, nil
	}})
	target, err := c.Target(srv.URL + "/hook")
	if err != nil || target == nil {
		t.Fatalf("target for %s: %v, %v", srv.URL, target, err)
	}
	for _, host := range []string{"", "receiver.example"} {
		resp, release, err := target.Post(context.Background(), time.Now().Add(time.Minute), host, nil, []byte("x"))
		if err != nil {
			t.Fatalf("post with Host %q: %v", host, err)
		}
		release()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("post with Host %q: status %d", host, resp.StatusCode)
		}
	}
	want := []string{strings.TrimPrefix(srv.URL, "https://") + " HTTP/1.1", "receiver.example HTTP/1.1"}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(hosts, want) || calls != 1 {
		t.Errorf("requests %q with TLSConfig called %d times, want %q and once", hosts, calls, want)
	}

	bad := New(Options{MaxIdle: 4, TLSConfig: func() (*tls.Config, error) { return nil, errors.New("no CA bundle") }})
	if target, err := bad.Target(srv.URL); target != nil || err == nil {
		t.Errorf("a TLSConfig that fails: target %v, error %v; want its error", target, err)
	}
	if target, err := bad.Target("http://127.0.0.1:1/hook"); target == nil || err != nil {
		t.Errorf("a plain HTTP target with a TLSConfig that fails: %v, %v; want the target", target, err)
	}
}
