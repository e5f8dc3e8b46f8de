package action

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"
)

// A webhook's POSTs go over a direct HTTP/1.1 client when they can: the
// request is written on a kept-alive connection taken from a pool and its
// response read with http.ReadResponse on the worker's own goroutine.
// net/http's Transport runs two goroutines per connection and hands each
// request between them and the caller, most of the CPU a webhook
// backlog's drain costs besides the rules; BenchmarkWebhook4KB measures
// the two side by side. A URL
// with user info, a non-ASCII host, or a proxy (HTTP_PROXY, HTTPS_PROXY,
// NO_PROXY) goes through net/http.

// directPosts turns the direct client on; benchmarks turn it off to
// compare.
var directPosts = true

const (
	// directIdleTimeout closes a pooled connection idle this long, as
	// the Transport's IdleConnTimeout does.
	directIdleTimeout = 90 * time.Second
	// directMaxDrain bounds the response body read to keep a connection:
	// a larger one costs the connection rather than the time to read it.
	directMaxDrain = 64 << 10
	dialTimeout    = 10 * time.Second
	handshakeLimit = 10 * time.Second
)

// directTarget is where a webhook posts with the direct client.
type directTarget struct {
	pool poster
	// requestURI is the URL's path and query; host the Host header.
	requestURI, host string
}

// directTargetFor returns the direct client's target for raw, or nil when
// the URL must go through net/http.
func directTargetFor(raw string, pools *directPools, files tlsFiles) (*directTarget, error) {
	if !directPosts {
		return nil, nil
	}
	u, err := url.Parse(raw)
	if err != nil || u.User != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, nil
	}
	for i := 0; i < len(u.Host); i++ {
		if u.Host[i] >= 0x80 {
			return nil, nil // net/http converts it to punycode
		}
	}
	if proxy, err := http.ProxyFromEnvironment(&http.Request{URL: u}); err != nil || proxy != nil {
		return nil, nil
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	pool, err := pools.get(u.Scheme == "https", net.JoinHostPort(u.Hostname(), port), u.Hostname(), files)
	if err != nil {
		return nil, err
	}
	host := u.Host
	if host[len(host)-1] == ':' {
		host = host[:len(host)-1] // an empty port, as net/http drops it
	}
	return &directTarget{pool: pool, requestURI: u.RequestURI(), host: host}, nil
}

// directPools holds one pool per address and TLS configuration.
type directPools struct {
	idle        int           // idle connections kept per pool
	idleTimeout time.Duration // directIdleTimeout unless set (tests)

	mu sync.Mutex
	m  map[directKey]*directPool
}

type directKey struct {
	https bool
	addr  string
	files tlsFiles
}

func (ps *directPools) get(https bool, addr, serverName string, files tlsFiles) (*directPool, error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	k := directKey{https: https, addr: addr, files: files}
	if p, ok := ps.m[k]; ok {
		return p, nil
	}
	p := &directPool{addr: addr, maxIdle: ps.idle, idleTimeout: ps.idleTimeout}
	if p.idleTimeout <= 0 {
		p.idleTimeout = directIdleTimeout
	}
	if https {
		conf, err := files.config()
		if err != nil {
			return nil, err
		}
		if conf == nil {
			conf = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		conf = conf.Clone()
		if conf.ServerName == "" {
			conf.ServerName = serverName
		}
		conf.NextProtos = []string{"http/1.1"}
		p.tls = conf
	}
	if ps.m == nil {
		ps.m = map[directKey]*directPool{}
	}
	ps.m[k] = p
	return p, nil
}

// closeIdle closes the idle connections of every pool.
func (ps *directPools) closeIdle() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, p := range ps.m {
		p.closeIdle()
	}
}

// directPool is the kept-alive connections to one address: the idle
// ones last in, first out (the warmest first), each closed once idle for
// its idle timeout by a sweep that runs while any is idle, so that a pool
// no webhook uses any more (its URL changed) lets its connections go.
type directPool struct {
	addr        string
	tls         *tls.Config // nil: plain HTTP
	maxIdle     int
	idleTimeout time.Duration

	mu       sync.Mutex
	idle     []*directConn
	sweeping bool // a sweep is scheduled
}

type directConn struct {
	conn      net.Conn
	br        *bufio.Reader
	bw        *bufio.Writer
	reused    bool // it served a request before
	idleSince time.Time
}

// headerSink is where a webhook sets a request's headers: net/http's
// http.Header, or the direct client's headerLines.
type headerSink interface {
	Set(key, value string)
	Add(key, value string)
}

// headerLines are a direct request's headers in the order they were
// set: no map to make, fill and range over for each request. Keys are
// canonical (textproto.CanonicalMIMEHeaderKey), as http.Header's.
type headerLines []headerLine

type headerLine struct{ key, value string }

// Set replaces the values of key with value.
func (h *headerLines) Set(key, value string) {
	key = textproto.CanonicalMIMEHeaderKey(key)
	*h = slices.DeleteFunc(*h, func(l headerLine) bool { return l.key == key })
	*h = append(*h, headerLine{key, value})
}

// Add adds value to the values of key.
func (h *headerLines) Add(key, value string) {
	*h = append(*h, headerLine{textproto.CanonicalMIMEHeaderKey(key), value})
}

// post sends a POST of body with the headers h and returns the response,
// whose body release reads to its end (up to directMaxDrain) and closes,
// putting the connection back. A connection kept from an earlier request
// that fails before any byte of the response (the receiver closed it
// while idle) is replaced and the request sent again, once, as net/http
// does for a request with an Idempotency-Key. The request fails at
// deadline, or when ctx ends.
func (p *directPool) post(ctx context.Context, deadline time.Time, requestURI, host string, h headerLines, body []byte) (*http.Response, func(), error) {
	for _, l := range h {
		if !httpguts.ValidHeaderFieldValue(l.value) {
			return nil, nil, permanent(fmt.Errorf("invalid value for header %q", l.key))
		}
	}
	if !httpguts.ValidHostHeader(host) {
		return nil, nil, permanent(fmt.Errorf("invalid Host header %q", host))
	}
	for retried := false; ; retried = true {
		c, err := p.get(ctx, deadline)
		if err != nil {
			return nil, nil, err
		}
		stop := context.AfterFunc(ctx, func() { _ = c.conn.SetDeadline(time.Unix(1, 0)) })
		resp, err := c.roundTrip(deadline, requestURI, host, h, body)
		if err == nil {
			return resp, func() { p.release(c, resp, stop) }, nil
		}
		stop()
		_ = c.conn.Close()
		var stale *staleError
		if errors.As(err, &stale) && !retried && ctx.Err() == nil {
			continue
		}
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		if isTimeout(err) && !time.Now().Before(deadline) {
			return nil, nil, context.DeadlineExceeded
		}
		return nil, nil, err
	}
}

// staleError is a failure before any byte of the response came.
type staleError struct{ err error }

func (e *staleError) Error() string { return e.err.Error() }
func (e *staleError) Unwrap() error { return e.err }

func (c *directConn) roundTrip(deadline time.Time, requestURI, host string, h headerLines, body []byte) (*http.Response, error) {
	if err := c.conn.SetDeadline(deadline); err != nil {
		return nil, err
	}
	w := c.bw
	_, _ = w.WriteString("POST ")
	_, _ = w.WriteString(requestURI)
	_, _ = w.WriteString(" HTTP/1.1\r\nHost: ")
	_, _ = w.WriteString(host)
	_, _ = w.WriteString("\r\nContent-Length: ")
	_, _ = w.WriteString(strconv.Itoa(len(body)))
	_, _ = w.WriteString("\r\n")
	for _, l := range h {
		if directOwnHeaders[l.key] {
			continue
		}
		_, _ = w.WriteString(l.key)
		_, _ = w.WriteString(": ")
		_, _ = w.WriteString(l.value)
		_, _ = w.WriteString("\r\n")
	}
	_, _ = w.WriteString("\r\n")
	_, _ = w.Write(body)
	if err := w.Flush(); err != nil {
		return nil, c.beforeResponse(err)
	}
	if _, err := c.br.Peek(1); err != nil {
		return nil, c.beforeResponse(err)
	}
	if resp, ok := quickResponse(c.br); ok {
		return resp, nil
	}
	for {
		resp, err := http.ReadResponse(c.br, nil)
		if err != nil {
			return nil, err
		}
		// An informational response (100 Continue, 103 Early Hints)
		// precedes the final one.
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			continue
		}
		return resp, nil
	}
}

// beforeResponse is err, a failure before any byte of the response, as
// roundTrip returns it: a staleError on a kept connection (unless the
// deadline passed), which post sends again on a new one.
func (c *directConn) beforeResponse(err error) error {
	if c.reused && !isTimeout(err) {
		return &staleError{err}
	}
	return err
}

// directOwnHeaders are the headers the client writes itself, as
// net/http's request writer leaves them out of the request's Header.
var directOwnHeaders = map[string]bool{"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Trailer": true}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// release reads what is left of resp's body, then puts the connection back
// in the pool, or closes it when the body was too long to read, the
// receiver asked to close it, or the request's context ended.
func (p *directPool) release(c *directConn, resp *http.Response, stop func() bool) {
	n, err := io.Copy(io.Discard, io.LimitReader(resp.Body, directMaxDrain+1))
	kept := stop() // false: the context ended and set a past deadline
	if err != nil || n > directMaxDrain || resp.Close || !kept {
		_ = c.conn.Close()
		return
	}
	_ = resp.Body.Close()
	c.reused = true
	c.idleSince = time.Now()
	p.mu.Lock()
	if len(p.idle) >= p.maxIdle {
		p.mu.Unlock()
		_ = c.conn.Close()
		return
	}
	p.idle = append(p.idle, c)
	if !p.sweeping {
		p.sweeping = true
		time.AfterFunc(p.idleTimeout, p.sweep)
	}
	p.mu.Unlock()
}

// sweep closes the connections idle for idleTimeout and schedules
// itself again for the oldest of the others, if any.
func (p *directPool) sweep() {
	now := time.Now()
	p.mu.Lock()
	n := 0 // the oldest come first: those past the timeout are a prefix
	for n < len(p.idle) && now.Sub(p.idle[n].idleSince) >= p.idleTimeout {
		n++
	}
	expired := slices.Clone(p.idle[:n])
	p.idle = slices.Delete(p.idle, 0, n)
	if len(p.idle) > 0 {
		time.AfterFunc(max(p.idle[0].idleSince.Add(p.idleTimeout).Sub(now), time.Millisecond), p.sweep)
	} else {
		p.sweeping = false
	}
	p.mu.Unlock()
	for _, c := range expired {
		_ = c.conn.Close()
	}
}

// get returns the idle connection last put back, or a new one dialled
// by deadline.
func (p *directPool) get(ctx context.Context, deadline time.Time) (*directConn, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		c := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return c, nil
	}
	p.mu.Unlock()
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	return p.dial(ctx)
}

func (p *directPool) dial(ctx context.Context) (*directConn, error) {
	d := net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, err
	}
	if p.tls != nil {
		hctx, cancel := context.WithTimeout(ctx, handshakeLimit)
		defer cancel()
		tc := tls.Client(conn, p.tls)
		if err := tc.HandshakeContext(hctx); err != nil {
			_ = conn.Close()
			return nil, err
		}
		conn = tc
	}
	return &directConn{conn: conn, br: bufio.NewReaderSize(conn, 4<<10), bw: bufio.NewWriterSize(conn, webhookWriteBuffer)}, nil
}

func (p *directPool) closeIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, c := range idle {
		_ = c.conn.Close()
	}
}
