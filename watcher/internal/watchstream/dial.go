package watchstream

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
)

// The informers' lists and watches share the stream client's HTTP/2
// connections, each carrying as many streams as the apiserver allows.
// When every connection is full, net/http dials a new one for each
// request that finds them full and keeps only one of those that come up,
// so a start with thousands of resources would pay a TLS handshake per
// request, for fieldwatch and for the apiserver. Holding those dials back
// inside net/http does not help: each new connection is offered to every
// waiting request, and those it cannot take wait again with a dial of
// their own.
//
// So the stream client's transport lets a request into net/http only
// when it needs no new connection: it first tries the HTTP/2 connections
// there are (what net/http tries first too, without dialling); a request
// they cannot take waits, and one waiting request at a time, the leader,
// goes through net/http, which dials for it. When the leader has its
// connection (or fails), the waiting requests try again: as many as the
// new connection has streams take them, and one of the others leads the
// next dial. TestGatedTransportDials holds it to the fewest dials; `make
// bench -sections crds` measures a start.

// gatedTransport is the stream client's transport (see above).
type gatedTransport struct {
	*http.Transport
	// h2 is the HTTP/2 side of Transport, whose RoundTrip uses only the
	// connections there are (ErrNoCachedConn otherwise); nil when HTTP/2
	// is off (DISABLE_HTTP2, or TLS settings that leave it out).
	h2     *http2.Transport //nolint:staticcheck // x/net's HTTP/2 transport, as client-go configures it: net/http's own has no round trip on the connections there are only
	dialer net.Dialer
	// http1: the server did not take HTTP/2; requests go ungated.
	http1 atomic.Bool
	// leader is held by the request going through net/http to dial.
	leader chan struct{}

	mu sync.Mutex
	// wake is closed when waiting requests are to try again: a leader
	// has its connection or failed, or retryWait passed (a stream of a
	// connection may have ended).
	wake  chan struct{}
	timer *time.Timer

	// dials counts the connections dialled (tests).
	dials atomic.Int64
}

// retryWait is how long a waiting request waits at most before it tries
// the connections again.
const retryWait = 50 * time.Millisecond

// leaderTerm is one leader's turn: it ends once, when its request has a
// connection (net/http's GotConn: a new HTTP/2 connection is in the pool
// by then) or fails, whichever is first.
type leaderTerm struct {
	t    *gatedTransport
	once sync.Once
}

func (l *leaderTerm) end() {
	l.once.Do(func() {
		<-l.t.leader
		l.t.broadcast()
	})
}

// newGatedTransport returns the transport for config (its TLS settings,
// proxy and compression; HTTP/2 as client-go sets it up). It returns nil
// when config's credentials come from a plugin (exec, auth provider) or
// it has a custom transport or dialer (those set up the connection
// themselves: client-go's own transport is used), and for plain HTTP.
func newGatedTransport(config *rest.Config) (*gatedTransport, error) {
	if config.Transport != nil || config.Dial != nil || config.ExecProvider != nil || config.AuthProvider != nil {
		return nil, nil
	}
	tlsConfig, err := rest.TLSConfigFor(config)
	if err != nil {
		return nil, err
	}
	if tlsConfig == nil {
		return nil, nil // plain HTTP: no handshakes to save
	}
	t := &gatedTransport{leader: make(chan struct{}, 1), dialer: net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}}
	t.Transport = utilnet.SetOldTransportDefaults(&http.Transport{
		Proxy:               config.Proxy,
		TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig:     tlsConfig,
		MaxIdleConnsPerHost: 25, // client-go's
		DisableCompression:  config.DisableCompression,
		DialContext:         t.dial,
	})
	// HTTP/2 as utilnet.SetTransportDefaults sets it up (the same
	// environment variables), keeping its Transport, which that does not
	// return.
	if os.Getenv("DISABLE_HTTP2") == "" && (len(tlsConfig.NextProtos) == 0 || slices.Contains(tlsConfig.NextProtos, http2.NextProtoTLS)) {
		t2, err := http2.ConfigureTransports(t.Transport) //nolint:staticcheck // as utilnet.SetTransportDefaults, keeping the http2.Transport
		if err != nil {
			return nil, fmt.Errorf("HTTP/2: %w", err)
		}
		// client-go's health check of a connection, its defaults and
		// environment variables.
		t2.ReadIdleTimeout = envSeconds("HTTP2_READ_IDLE_TIMEOUT_SECONDS", 30) //nolint:staticcheck // as utilnet's configureHTTP2Transport
		t2.PingTimeout = envSeconds("HTTP2_PING_TIMEOUT_SECONDS", 15)          //nolint:staticcheck // as utilnet's configureHTTP2Transport
		t.h2 = t2
	}
	return t, nil
}

// envSeconds reads a number of seconds from the environment variable
// name, def when it is unset or not a number (client-go's own transports
// warn of it and do the same).
func envSeconds(name string, def int) time.Duration {
	n, err := strconv.Atoi(os.Getenv(name))
	if err != nil {
		n = def
	}
	return time.Duration(n) * time.Second
}

// RoundTrip sends req on an HTTP/2 connection there is, or waits to,
// or leads the dial of the next one (see above).
func (t *gatedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	// A request with a body goes straight through (a body is read
	// once), as does plain HTTP (no handshakes to save, and no HTTP/2).
	gated := (req.Body == nil || req.Body == http.NoBody) && req.URL.Scheme == "https"
	for gated && t.h2 != nil && !t.http1.Load() {
		//nolint:staticcheck // the HTTP/2 pool without dialling, as net/http's own first try (its alternate protocol)
		resp, err := t.h2.RoundTrip(req)
		if !errors.Is(err, http2.ErrNoCachedConn) {
			return resp, err
		}
		// Taken after the try, so that a request that finds a stream
		// (all of them after the start) makes no channel and no timer: a
		// wake between the try and here is missed, and retryWait bounds
		// the wait it costs.
		wake := t.wakeChan()
		select {
		case t.leader <- struct{}{}:
			l := &leaderTerm{t: t}
			ctx := httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
				if tc, ok := info.Conn.(*tls.Conn); ok && tc.ConnectionState().NegotiatedProtocol != http2.NextProtoTLS {
					t.http1.Store(true) // the waiting requests go ungated
				}
				l.end()
			}})
			resp, err := t.Transport.RoundTrip(req.WithContext(ctx))
			l.end()
			return resp, err
		case <-wake:
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
	}
	return t.Transport.RoundTrip(req)
}

// wakeChan returns the channel closed when waiting requests are to try
// again.
func (t *gatedTransport) wakeChan() chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.wake == nil {
		t.wake = make(chan struct{})
		t.timer = time.AfterFunc(retryWait, t.broadcast)
	}
	return t.wake
}

// broadcast wakes the waiting requests.
func (t *gatedTransport) broadcast() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.wake != nil {
		close(t.wake)
		t.wake = nil
		t.timer.Stop()
	}
}

// dial dials a connection for net/http (which makes the TLS handshake),
// for a leader or for a request that goes ungated.
func (t *gatedTransport) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	t.dials.Add(1)
	return t.dialer.DialContext(ctx, network, addr)
}
