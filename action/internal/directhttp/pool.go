package directhttp

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"
)

// pool is the kept-alive connections to one address: the idle ones last
// in, first out (the warmest first), each closed once idle for its idle
// timeout by a sweep that runs while any is idle, so that a pool no
// caller uses any more (its URL changed) lets its connections go.
type pool struct {
	addr        string
	tls         *tls.Config // nil: plain HTTP
	maxIdle     int
	idleTimeout time.Duration
	writeBuffer int

	mu       sync.Mutex
	idle     []*conn
	sweeping bool // a sweep is scheduled
}

type conn struct {
	conn      net.Conn
	br        *bufio.Reader
	bw        *bufio.Writer
	reused    bool // it served a request before
	idleSince time.Time
}

// Post sends a POST of body with the headers h to t, with host as its
// Host header (t's when empty), and returns the response with release,
// which the caller must call once done with it: release reads the body to
// its end (up to 64 KiB) and closes it, putting the connection back. A
// header or Host net/http would refuse is an ErrInvalidHeader, nothing
// sent. A connection kept from an earlier request that fails before any
// byte of the response (the receiver closed it while idle) is replaced
// and the request sent again, once, as net/http does for a request with
// an Idempotency-Key. The request fails with context.DeadlineExceeded at
// deadline, and with ctx's error when ctx ends.
func (t *Target) Post(ctx context.Context, deadline time.Time, host string, h Header, body []byte) (resp *http.Response, release func(), err error) {
	if host == "" {
		host = t.host
	}
	for _, l := range h {
		if !httpguts.ValidHeaderFieldValue(l.value) {
			return nil, nil, fmt.Errorf("%w: the value of %q", ErrInvalidHeader, l.key)
		}
	}
	if !httpguts.ValidHostHeader(host) {
		return nil, nil, fmt.Errorf("%w: Host %q", ErrInvalidHeader, host)
	}
	p := t.pool
	for retried := false; ; retried = true {
		c, err := p.get(ctx, deadline)
		if err != nil {
			return nil, nil, err
		}
		stop := context.AfterFunc(ctx, func() { _ = c.conn.SetDeadline(time.Unix(1, 0)) })
		resp, err := c.roundTrip(deadline, t.requestURI, host, h, body)
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

func (c *conn) roundTrip(deadline time.Time, requestURI, host string, h Header, body []byte) (*http.Response, error) {
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
		if ownHeaders[l.key] {
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
// deadline passed), which Post sends again on a new one.
func (c *conn) beforeResponse(err error) error {
	if c.reused && !isTimeout(err) {
		return &staleError{err}
	}
	return err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// release reads what is left of resp's body, then puts the connection back
// in the pool, or closes it when the body was too long to read, the
// receiver asked to close it, or the request's context ended.
func (p *pool) release(c *conn, resp *http.Response, stop func() bool) {
	n, err := io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain+1))
	kept := stop() // false: the context ended and set a past deadline
	if err != nil || n > maxDrain || resp.Close || !kept {
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
func (p *pool) sweep() {
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
func (p *pool) get(ctx context.Context, deadline time.Time) (*conn, error) {
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

func (p *pool) dial(ctx context.Context) (*conn, error) {
	d := net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	nc, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, err
	}
	if p.tls != nil {
		hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
		defer cancel()
		tc := tls.Client(nc, p.tls)
		if err := tc.HandshakeContext(hctx); err != nil {
			_ = nc.Close()
			return nil, err
		}
		nc = tc
	}
	return &conn{conn: nc, br: bufio.NewReaderSize(nc, 4<<10), bw: bufio.NewWriterSize(nc, p.writeBuffer)}, nil
}

func (p *pool) closeIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, c := range idle {
		_ = c.conn.Close()
	}
}
