package action

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// directServer is a local HTTP server that counts the connections it
// accepted and records each request.
type directServer struct {
	url     string
	srv     *http.Server
	conns   atomic.Int64 // accepted
	closed  atomic.Int64 // closed
	mu      sync.Mutex
	reqs    []*http.Request
	bodies  []string
	respond func(w http.ResponseWriter, r *http.Request)
}

func newDirectServer(t *testing.T, respond func(w http.ResponseWriter, r *http.Request), configure ...func(*http.Server)) *directServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &directServer{url: "http://" + ln.Addr().String(), respond: respond}
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

func (s *directServer) requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reqs)
}

// directPost posts body to url through a direct target, reading the
// response to its end; it returns the status.
func directPost(t *testing.T, ctx context.Context, pools *directPools, url string, h http.Header, body string) (int, error) {
	t.Helper()
	target, err := directTargetFor(url, pools, tlsFiles{})
	if err != nil || target == nil {
		t.Fatalf("direct target for %s: %v, %v", url, target, err)
	}
	var lines headerLines
	for k, vs := range h {
		for _, v := range vs {
			lines.Add(k, v)
		}
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Minute)
	}
	resp, release, err := target.pool.post(ctx, deadline, target.requestURI, target.host, lines, []byte(body))
	if err != nil {
		return 0, err
	}
	defer release()
	return resp.StatusCode, nil
}

// TestDirectPost: the request arrives as net/http would send it (method,
// path and query, Host, Content-Length, headers, body), and sequential
// requests share one kept-alive connection.
func TestDirectPost(t *testing.T) {
	s := newDirectServer(t, nil)
	pools := &directPools{idle: 4}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Idempotency-Key", "uid/1/rule")
	h.Set("Content-Length", "999") // the client writes its own
	for i := range 50 {
		code, err := directPost(t, context.Background(), pools, s.url+"/hook/a%20b?token=x", h, `{"n":`+string(rune('0'+i%10))+`}`)
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

// TestDirectStaleConnection: a kept-alive connection the receiver closed
// while it was idle is replaced and the request sent again; it arrives
// once.
func TestDirectStaleConnection(t *testing.T) {
	s := newDirectServer(t, nil, func(srv *http.Server) { srv.IdleTimeout = 50 * time.Millisecond })
	pools := &directPools{idle: 4}
	for i := range 3 {
		if code, err := directPost(t, context.Background(), pools, s.url, nil, "x"); err != nil || code != http.StatusOK {
			t.Fatalf("post %d: %d, %v", i, code, err)
		}
		want := int64(i + 1)
		testenv.Eventually(t, 5*time.Second, "the receiver to close the idle connection", func() bool { return s.closed.Load() == want })
	}
	if n, c := s.requests(), s.conns.Load(); n != 3 || c != 3 {
		t.Errorf("3 posts, each after the receiver closed the connection: %d requests on %d connections, want 3 on 3", n, c)
	}
}

// TestDirectConnectionKept: a connection is kept after a chunked response
// and a response within directMaxDrain, and not after one asking to close
// it or a body past directMaxDrain.
func TestDirectConnectionKept(t *testing.T) {
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
			_, _ = w.Write([]byte(strings.Repeat("x", directMaxDrain+1)))
		}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newDirectServer(t, tc.respond)
			pools := &directPools{idle: 4}
			for i := range 3 {
				if code, err := directPost(t, context.Background(), pools, s.url, nil, "x"); err != nil || code != http.StatusOK {
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

// TestDirectInformational: an informational response (103 Early Hints)
// before the final one is skipped; a malformed response is an error.
func TestDirectInformational(t *testing.T) {
	pools := &directPools{idle: 4}
	url := rawServer(t, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/1.1 202 Accepted\r\nContent-Length: 2\r\n\r\nok")
	for i := range 2 {
		if code, err := directPost(t, context.Background(), pools, url, nil, "x"); err != nil || code != http.StatusAccepted {
			t.Fatalf("post %d: %d, %v; want 202", i, code, err)
		}
	}
	bad := rawServer(t, "SMTP ready\r\n\r\n")
	if code, err := directPost(t, context.Background(), pools, bad, nil, "x"); err == nil {
		t.Errorf("a malformed response: status %d, no error", code)
	}
}

// TestDirectCancel: ending the request's context ends a request the
// receiver holds, at once, with the context's error; the connection is
// not kept.
func TestDirectCancel(t *testing.T) {
	hold := make(chan struct{})
	defer close(hold)
	held := make(chan struct{}, 1)
	s := newDirectServer(t, func(_ http.ResponseWriter, r *http.Request) {
		select {
		case held <- struct{}{}:
		default:
		}
		select {
		case <-hold:
		case <-r.Context().Done():
		}
	})
	pools := &directPools{idle: 4}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-held; cancel() }() // once the receiver holds the request
	// The receiver holds the request until the test ends: only the
	// cancellation can end it.
	_, err := directPost(t, ctx, pools, s.url, nil, "x")
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled while the receiver held the request: error %v, want context.Canceled", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := directPost(t, ctx, pools, s.url, nil, "x"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("past the deadline: error %v, want context.DeadlineExceeded", err)
	}
	if n := len(pools.m); n != 1 {
		t.Fatalf("%d pools", n)
	}
	for _, p := range pools.m {
		if n := p.idleCount(); n != 0 {
			t.Errorf("%d connections kept after requests that ended early", n)
		}
	}
}

// TestDirectRefuses: a header value net/http would refuse is a permanent
// error; URLs with user info or a non-ASCII host go through net/http.
func TestDirectRefuses(t *testing.T) {
	s := newDirectServer(t, nil)
	pools := &directPools{idle: 4}
	h := http.Header{"X-Bad": {"a\r\nInjected: yes"}}
	if _, err := directPost(t, context.Background(), pools, s.url, h, "x"); err == nil || !isPermanent(err) {
		t.Errorf("a header value with CR LF: error %v, want a permanent one", err)
	}
	if s.requests() != 0 {
		t.Errorf("%d requests sent with a bad header", s.requests())
	}
	for _, url := range []string{"http://user:secret@127.0.0.1:1/hook", "http://bücher.example/hook", "ftp://127.0.0.1/x"} {
		if target, err := directTargetFor(url, pools, tlsFiles{}); target != nil || err != nil {
			t.Errorf("%s: direct target %v, %v; want net/http's", url, target, err)
		}
	}
}

func (p *directPool) idleCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

// TestDirectIdleTimeout: a connection idle for the pool's idle timeout is
// closed by the pool, with no request to the pool after it (a webhook
// whose URL changed leaves its pool for good).
func TestDirectIdleTimeout(t *testing.T) {
	s := newDirectServer(t, nil)
	pools := &directPools{idle: 4, idleTimeout: 200 * time.Millisecond}
	var wg sync.WaitGroup
	hold := make(chan struct{})
	for range 3 { // three connections at once, then idle
		wg.Go(func() {
			<-hold
			if code, err := directPost(t, context.Background(), pools, s.url, nil, "x"); err != nil || code != http.StatusOK {
				t.Errorf("post: %d, %v", code, err)
			}
		})
	}
	close(hold)
	wg.Wait()
	opened := s.conns.Load()
	testenv.Eventually(t, 10*time.Second, "the pool to close its idle connections", func() bool { return s.closed.Load() == opened })
	for _, p := range pools.m {
		if n := p.idleCount(); n != 0 {
			t.Errorf("%d idle connections left in the pool", n)
		}
	}
	if code, err := directPost(t, context.Background(), pools, s.url, nil, "x"); err != nil || code != http.StatusOK {
		t.Errorf("post after the sweep: %d, %v", code, err)
	}
}
