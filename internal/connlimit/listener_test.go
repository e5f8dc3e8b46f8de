package connlimit

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// server serves handler on a Listener of max connections on 127.0.0.1,
// over TLS (HTTP/2 allowed) when tlsOn.
func server(t *testing.T, max int, tlsOn bool, handler http.Handler) (*httptest.Server, *Listener, *Metrics) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(prometheus.NewRegistry())
	l := NewListener(ln, Options{Name: "test", Max: max, Metrics: m, Logger: slog.New(slog.DiscardHandler)})
	srv := httptest.NewUnstartedServer(handler)
	_ = srv.Listener.Close()
	srv.Listener = l
	l.Hook(srv.Config)
	if tlsOn {
		srv.EnableHTTP2 = true
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv, l, m
}

// value returns a counter's or a gauge's value.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}

// dropped returns the count of connections dropped for reason.
func dropped(t *testing.T, m *Metrics, reason string) float64 {
	t.Helper()
	return value(t, m.dropped.WithLabelValues("test", reason))
}

// keepAlive is a raw HTTP/1.1 connection that made one request and keeps
// the connection open.
type keepAlive struct {
	net.Conn
	r *bufio.Reader
}

func dialRequest(t *testing.T, addr string) *keepAlive {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	k := &keepAlive{Conn: c, r: bufio.NewReader(c)}
	k.get(t)
	return k
}

// get sends a request on k and reads its response.
func (k *keepAlive) get(t *testing.T) {
	t.Helper()
	if _, err := io.WriteString(k, "GET / HTTP/1.1\r\nHost: test\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = k.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(k.r, nil)
	if err != nil {
		t.Fatalf("response: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

// closedByServer reports whether the server closed c (within 5 s): a
// read ends in EOF or a reset, not a timeout.
func closedByServer(c net.Conn, r io.Reader) bool {
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := r.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && (!errors.As(err, &ne) || !ne.Timeout())
}

// openAfter reports whether the server leaves c open for a short while:
// a read times out instead of seeing the close.
func openAfter(c net.Conn, r io.Reader) bool {
	_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	_, err := r.Read(make([]byte, 1))
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })

// TestListenerClosesTheIdlest: a full listener closes, for each new
// connection, the one idle the longest; the others keep working.
func TestListenerClosesTheIdlest(t *testing.T) {
	srv, l, m := server(t, 3, false, okHandler)
	addr := srv.Listener.Addr().String()
	c1, c2, c3 := dialRequest(t, addr), dialRequest(t, addr), dialRequest(t, addr)
	c1.get(t) // c1 was used last: c2 is the idlest now
	c4 := dialRequest(t, addr)
	if !closedByServer(c2, c2.r) {
		t.Fatal("the idlest connection was not closed for the new one")
	}
	for i, c := range []*keepAlive{c1, c3, c4} {
		if !openAfter(c, c.r) {
			t.Errorf("connection %d closed", i)
		}
		c.get(t)
	}
	if v := dropped(t, m, "evicted"); v != 1 {
		t.Errorf("%v evicted, want 1", v)
	}
	if v := value(t, m.open.WithLabelValues("test")); v != 3 {
		t.Errorf("%v open, want 3", v)
	}
	if v := value(t, m.max.WithLabelValues("test")); v != float64(l.Max()) || l.Max() != 3 {
		t.Errorf("max %v (Max %d), want 3", v, l.Max())
	}
}

// TestListenerSilentConnections: connections that never send a request,
// or only part of one, are the first closed for a new one, before one
// that served a request later.
func TestListenerSilentConnections(t *testing.T) {
	srv, _, m := server(t, 2, false, okHandler)
	addr := srv.Listener.Addr().String()
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = silent.Close() }()
	if _, err := io.WriteString(silent, "GET / HTTP/1.1\r\nHo"); err != nil { // a slow header
		t.Fatal(err)
	}
	used := dialRequest(t, addr)
	dialRequest(t, addr)
	if !closedByServer(silent, silent) {
		t.Fatal("the connection with half a header was not closed for the new one")
	}
	if !openAfter(used, used.r) {
		t.Error("the connection that served a request was closed first")
	}
	if v := dropped(t, m, "evicted"); v != 1 {
		t.Errorf("%v evicted, want 1", v)
	}
}

// blocking is a handler whose requests wait for release (but those of
// /warm); started says each has begun.
type blocking struct {
	started chan struct{}
	release chan struct{}
	once    sync.Once
}

func newBlocking() *blocking {
	return &blocking{started: make(chan struct{}, 16), release: make(chan struct{})}
}

func (b *blocking) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/warm" {
		return
	}
	b.started <- struct{}{}
	<-b.release
	_, _ = io.WriteString(w, "done")
}

func (b *blocking) releaseAll() { b.once.Do(func() { close(b.release) }) }

// TestListenerRefusesWhenEveryConnectionIsBusy: when every connection is
// serving a request, over HTTP/1.1 or HTTP/2 (several requests on one
// connection), a new one is closed at once and counted; the requests in
// progress complete, and then a new connection is taken again.
func TestListenerRefusesWhenEveryConnectionIsBusy(t *testing.T) {
	for _, tc := range []struct {
		name     string
		tls      bool
		max      int
		requests int
	}{
		{name: "http/1.1", max: 2, requests: 2},
		{name: "http/2 over tls", tls: true, max: 1, requests: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newBlocking()
			srv, _, m := server(t, tc.max, tc.tls, h)
			defer h.releaseAll()
			client := srv.Client()
			if !tc.tls {
				client = &http.Client{Transport: &http.Transport{MaxConnsPerHost: tc.max}}
			}
			// One connection first: with HTTP/2 the requests share it.
			warm, err := client.Get(srv.URL + "/warm")
			if err != nil {
				t.Fatal(err)
			}
			_ = warm.Body.Close()
			errs := make(chan error, tc.requests)
			for range tc.requests {
				go func() {
					resp, err := client.Get(srv.URL)
					if err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						_ = resp.Body.Close()
						if resp.ProtoMajor != map[bool]int{false: 1, true: 2}[tc.tls] {
							err = fmt.Errorf("protocol %s", resp.Proto)
						}
					}
					errs <- err
				}()
			}
			for range tc.requests {
				select {
				case <-h.started:
				case <-time.After(10 * time.Second):
					t.Fatal("the requests did not start")
				}
			}
			raw, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = raw.Close() }()
			if !closedByServer(raw, raw) {
				t.Fatal("a new connection was taken while every one served a request")
			}
			if v := dropped(t, m, "refused"); v != 1 {
				t.Errorf("%v refused, want 1", v)
			}
			h.releaseAll()
			for range tc.requests {
				if err := <-errs; err != nil {
					t.Errorf("a request in progress: %v", err)
				}
			}
			var trust *tls.Config // httptest's certificate
			if tc.tls {
				trust = srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
				trust.NextProtos = nil // HTTP/1.1
			}
			fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: trust}}
			resp, err := fresh.Get(srv.URL)
			if err != nil {
				t.Fatalf("a new connection once the requests are done: %v", err)
			}
			_ = resp.Body.Close()
			if v := dropped(t, m, "evicted"); v != 1 {
				t.Errorf("%v evicted for the new connection, want 1", v)
			}
		})
	}
}

func TestCaps(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit uint64
		wants []Want
		want  []int
	}{
		{"unknown limit", 0, []Want{{Name: "http"}, {Name: "pprof", Max: 32}}, []int{DefaultMaxConns, 32}},
		{"a large limit", 1 << 20, []Want{{Name: "http"}, {Name: "pprof", Max: 32}, {Name: "audit"}}, []int{1024, 32, 1024}},
		{"1024, one listener: half", 1024, []Want{{Name: "http"}}, []int{512}},
		{"1024, three listeners share half", 1024, []Want{{Name: "http"}, {Name: "pprof", Max: 32}, {Name: "audit"}}, []int{170, 32, 170}},
		{"20000, what was probed", 20000, []Want{{Name: "http"}, {Name: "audit"}}, []int{1024, 1024}},
		{"a tiny limit", 10, []Want{{Name: "http"}, {Name: "audit"}}, []int{minConns, minConns}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Caps(tc.limit, tc.wants...)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("Caps(%d) = %v, want %v", tc.limit, got, tc.want)
			}
		})
	}
}

// TestFileLimit: the soft limit is the hard one.
func TestFileLimit(t *testing.T) {
	limit, err := FileLimit()
	if err != nil {
		t.Fatal(err)
	}
	if limit == 0 {
		t.Fatal("no limit")
	}
}
