package watcher

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
)

// The informers' lists and watches share the stream client's HTTP/2
// connections, each carrying as many streams as the apiserver allows
// (about 100). When every connection is full, net/http dials a new one
// for each request that finds them full, and HTTP/2 keeps one of those
// that come up: at start, with 3,000 resources, fieldwatch dialled about
// 1,500 connections to keep 32, each a TLS handshake for it and for the
// apiserver, most of the start's CPU. The stream client's transport
// dials one connection at a time instead, and skips the dial of a
// request that no longer waits for one: when a connection comes up,
// every request waiting for a connection tries it, and those it serves
// need no other.

// pendingRequest marks a request of the stream client while it waits for
// its response: a dial made for it after that is not needed.
type pendingRequest struct{ done atomic.Bool }

type pendingKey struct{}

// errDialNotNeeded is what a dial skipped for a served request returns:
// net/http drops it (the request has its connection).
var errDialNotNeeded = errors.New("connection not needed: the request it was dialled for was served on another")

// gatedTransport is the stream client's transport (see above).
type gatedTransport struct {
	*http.Transport
	sem    chan struct{}
	dialer net.Dialer
	// http1: the server did not take HTTP/2; dials go ungated.
	http1 atomic.Bool
	// skipped counts the dials skipped, dialled those gated (tests).
	skipped, dialled atomic.Int64
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
	t := &gatedTransport{sem: make(chan struct{}, 1), dialer: net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}}
	t.Transport = utilnet.SetTransportDefaults(&http.Transport{
		Proxy:               config.Proxy,
		TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig:     tlsConfig,
		MaxIdleConnsPerHost: 25, // client-go's
		DisableCompression:  config.DisableCompression,
		DialTLSContext:      t.dialTLS,
	})
	return t, nil
}

// RoundTrip marks req pending until its response (or error) comes.
func (t *gatedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	p := &pendingRequest{}
	resp, err := t.Transport.RoundTrip(req.WithContext(context.WithValue(req.Context(), pendingKey{}, p)))
	p.done.Store(true)
	return resp, err
}

// dialTLS dials and handshakes one connection at a time, none for a
// request already served.
func (t *gatedTransport) dialTLS(ctx context.Context, network, addr string) (net.Conn, error) {
	if t.http1.Load() {
		// Each request has a connection of its own: every dial is
		// needed.
		c, err := t.handshake(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	select {
	case t.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if p, _ := ctx.Value(pendingKey{}).(*pendingRequest); p != nil && p.done.Load() {
		<-t.sem
		t.skipped.Add(1)
		return nil, errDialNotNeeded
	}
	t.dialled.Add(1)
	conn, err := t.handshake(ctx, network, addr)
	if err != nil {
		<-t.sem
		return nil, err
	}
	if conn.ConnectionState().NegotiatedProtocol != "h2" {
		t.http1.Store(true)
		<-t.sem
		return conn, nil
	}
	// The requests waiting for a connection take this one's streams
	// before the next dial asks whether its request still waits.
	time.AfterFunc(dialSettle, func() { <-t.sem })
	return conn, nil
}

// dialSettle is how long a connection that came up holds back the next
// dial (at 3,000 resources, some thirty connections: a third of a
// second in all).
const dialSettle = 10 * time.Millisecond

// handshake dials addr and makes the TLS handshake.
func (t *gatedTransport) handshake(ctx context.Context, network, addr string) (*tls.Conn, error) {
	conn, err := t.dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	cfg := t.TLSClientConfig.Clone() // with HTTP/2's NextProtos
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("dial %s: %w", addr, err)
		}
		cfg.ServerName = host
	}
	tc := tls.Client(conn, cfg)
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return tc, nil
}
