package connlimit

import (
	"container/list"
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Options configure a Listener.
type Options struct {
	// Name names the server in metrics and logs ("http", "pprof",
	// "audit-webhook").
	Name string
	// Max is the most connections held open at once (default
	// DefaultMaxConns).
	Max int
	// Metrics count the connections (default unregistered ones).
	Metrics *Metrics
	// Logger receives a line, at most every 10 s, when connections are
	// dropped for new ones (default slog.Default()).
	Logger *slog.Logger
}

// Listener is a net.Listener that holds at most Options.Max connections.
// Accept never blocks on a full listener: it closes the connection that
// has gone longest without a request in progress and returns the new one,
// or, when every connection is serving a request, closes the new one and
// waits for the next. Hook the http.Server that serves it (Hook), so that
// it knows which connections are serving a request; a connection of a
// server not hooked counts as never serving one.
type Listener struct {
	net.Listener
	name string
	max  int
	m    *serverMetrics
	log  *slog.Logger
	warn rate.Sometimes

	mu   sync.Mutex
	open int
	// idle holds the open connections without a request in progress, the
	// one that has been so the longest first.
	idle list.List
}

// NewListener limits ln.
func NewListener(ln net.Listener, opts Options) *Listener {
	if opts.Max <= 0 {
		opts.Max = DefaultMaxConns
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	l := &Listener{
		Listener: ln, name: opts.Name, max: opts.Max, log: opts.Logger,
		m:    opts.Metrics.server(opts.Name),
		warn: rate.Sometimes{Interval: 10 * time.Second},
	}
	l.m.max.Set(float64(opts.Max))
	return l
}

// Max returns the most connections the listener holds.
func (l *Listener) Max() int { return l.max }

// Accept waits for a connection and returns it, making room for it as
// the type's documentation says.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if tc := l.admit(c); tc != nil {
			return tc, nil
		}
	}
}

// admit takes c, closing the oldest idle connection first when the
// listener is full; it returns nil when it had to close c instead.
func (l *Listener) admit(c net.Conn) *conn {
	l.mu.Lock()
	var victim *conn
	if l.open >= l.max {
		front := l.idle.Front()
		if front == nil {
			l.mu.Unlock()
			l.m.refused.Inc()
			_ = c.Close()
			l.warnFull("every connection is serving a request: closed the new one")
			return nil
		}
		victim = front.Value.(*conn)
		l.forget(victim)
	}
	tc := &conn{Conn: c, l: l}
	l.open++
	tc.elem = l.idle.PushBack(tc)
	l.m.open.Set(float64(l.open))
	l.mu.Unlock()
	if victim != nil {
		l.m.evicted.Inc()
		_ = victim.Conn.Close()
		l.warnFull("closed the connection idle the longest for a new one")
	}
	return tc
}

func (l *Listener) warnFull(what string) {
	l.warn.Do(func() {
		l.log.Warn("http server: connection limit reached; "+what, "server", l.name, "maxConnections", l.max)
	})
}

// forget removes c from the open connections; l.mu is held.
func (l *Listener) forget(c *conn) {
	if c.closed {
		return
	}
	c.closed = true
	l.open--
	if c.elem != nil {
		l.idle.Remove(c.elem)
		c.elem = nil
	}
	l.m.open.Set(float64(l.open))
}

// begin and end bracket a request on c.
func (l *Listener) begin(c *conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c.active++
	if c.elem != nil {
		l.idle.Remove(c.elem)
		c.elem = nil
	}
}

func (l *Listener) end(c *conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c.active--
	if c.active == 0 && !c.closed {
		c.elem = l.idle.PushBack(c)
	}
}

type connKey struct{}

// Hook makes srv tell l which connections are serving a request: it wraps
// srv.Handler and sets srv.ConnContext (calling the one it had). Call it
// before srv serves l.
func (l *Listener) Hook(srv *http.Server) {
	prev := srv.ConnContext
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if prev != nil {
			ctx = prev(ctx, c)
		}
		if tc := l.unwrap(c); tc != nil {
			ctx = context.WithValue(ctx, connKey{}, tc)
		}
		return ctx
	}
	next := srv.Handler
	if next == nil {
		next = http.DefaultServeMux
	}
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tc, ok := r.Context().Value(connKey{}).(*conn); ok {
			l.begin(tc)
			defer l.end(tc)
		}
		next.ServeHTTP(w, r)
	})
}

// unwrap returns l's connection under c (a *tls.Conn over it, for
// example), or nil.
func (l *Listener) unwrap(c net.Conn) *conn {
	for {
		switch v := c.(type) {
		case *conn:
			if v.l == l {
				return v
			}
			return nil
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return nil
		}
	}
}

// conn is a connection a Listener holds; its fields are guarded by l.mu.
type conn struct {
	net.Conn
	l      *Listener
	elem   *list.Element // in l.idle while no request is in progress
	active int           // requests in progress (HTTP/2: several)
	closed bool
}

// Close closes the connection and frees its place.
func (c *conn) Close() error {
	c.l.mu.Lock()
	c.l.forget(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}
