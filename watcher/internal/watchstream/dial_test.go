package watchstream

import (
	"context"
	"encoding/pem"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// TestGatedTransportDials: a thousand long-lived requests (watches)
// through a server that allows a hundred streams a connection take about
// ten connections, one dial each (a dial that net/http starts for a
// request that then waits is counted too); client-go's own transport
// dials one for each request that finds the connections full
// (1,000-2,300 here).
func TestGatedTransportDials(t *testing.T) {
	testenv.SkipShort(t, testenv.LoadTest)
	const requests, streams = 1000, 100
	release := make(chan struct{})
	var conns atomic.Int64
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-release // a watch: open until the test ends
	}))
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes of dials the client drops
	ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	ts.Config.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: streams}
	ts.EnableHTTP2 = true
	ts.StartTLS()
	defer ts.Close()
	defer close(release)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
	config := &rest.Config{Host: ts.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}}

	// open makes the requests through rt: the connections the server
	// saw, and the requests that failed.
	open := func(rt http.RoundTripper) (int64, []error) {
		conns.Store(0)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var wg sync.WaitGroup
		errs := make(chan error, requests)
		for range requests {
			wg.Go(func() {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+"/watch", nil)
				resp, err := rt.RoundTrip(req)
				if err != nil {
					errs <- err
					return
				}
				if resp.ProtoMajor != 2 {
					t.Errorf("%s, want HTTP/2", resp.Proto)
				}
				go func() { <-ctx.Done(); _ = resp.Body.Close() }()
			})
		}
		wg.Wait()
		close(errs)
		var failed []error
		for err := range errs {
			failed = append(failed, err)
		}
		return conns.Load(), failed
	}

	gt, err := newGatedTransport(config)
	if err != nil || gt == nil {
		t.Fatalf("newGatedTransport: %v, %v", gt, err)
	}
	gated, errs := open(gt)
	if len(errs) > 0 {
		t.Fatalf("gated transport: %d of %d requests failed: %v", len(errs), requests, errs[0])
	}
	plain, err := rest.TransportFor(config)
	if err != nil {
		t.Fatal(err)
	}
	// client-go's transport is measured, not held to anything: under
	// load some of its requests fail (unexpected EOF) amid its dials.
	ungated, uerrs := open(plain)
	t.Logf("%d watches, %d streams a connection: %d connections, %d dials; client-go's transport: %d connections, %d requests failed", requests, streams, gated, gt.dials.Load(), ungated, len(uerrs))
	// As many as the streams need, and a few more (a leader whose
	// request was served another way leaves its dial to finish),
	// against one a request that found the connections full.
	if want := int64(requests / streams); gated < want || gated > 3*want || gt.dials.Load() > 3*want {
		t.Errorf("gated transport: %d connections, %d dials, want %d to %d", gated, gt.dials.Load(), want, 3*want)
	}
}

// TestGatedTransportHTTP1: against a server without HTTP/2 every request
// needs a connection of its own, and gets it.
func TestGatedTransportHTTP1(t *testing.T) {
	release := make(chan struct{})
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-release
	}))
	ts.StartTLS() // HTTP/1.1 only
	defer ts.Close()
	defer close(release)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
	gt, err := newGatedTransport(&rest.Config{Host: ts.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}})
	if err != nil || gt == nil {
		t.Fatalf("newGatedTransport: %v, %v", gt, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+"/watch", nil)
			resp, err := gt.RoundTrip(req)
			if err != nil {
				t.Errorf("request: %v", err)
				return
			}
			if resp.ProtoMajor != 1 {
				t.Errorf("%s, want HTTP/1.1", resp.Proto)
			}
			go func() { <-ctx.Done(); _ = resp.Body.Close() }()
		})
	}
	wg.Wait()
	if !gt.http1.Load() {
		t.Error("the transport did not notice the server speaks HTTP/1.1 only")
	}
}

// TestGatedTransportDialFails: when no connection can be made, every
// waiting request leads a dial in turn and gets its error; none waits
// for ever.
func TestGatedTransportDialFails(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now: each dial is refused
	gt, err := newGatedTransport(&rest.Config{Host: "https://" + addr, TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	if err != nil || gt == nil {
		t.Fatalf("newGatedTransport: %v, %v", gt, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const requests = 20
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range requests {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/watch", nil)
			resp, err := gt.RoundTrip(req)
			if err == nil {
				_ = resp.Body.Close()
				t.Error("a request succeeded against a closed port")
				return
			}
			if ctx.Err() != nil {
				t.Errorf("a request waited until the test's deadline: %v", err)
				return
			}
			failed.Add(1)
		})
	}
	wg.Wait()
	if failed.Load() != requests || gt.dials.Load() < requests {
		t.Errorf("%d of %d requests failed after %d dials, want each to fail after its own dial", failed.Load(), requests, gt.dials.Load())
	}
}

// TestGatedTransportPlainHTTP: a config with TLS settings whose host is
// plain HTTP goes through net/http as it is (HTTP/2's pool would refuse
// an http:// request).
func TestGatedTransportPlainHTTP(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer ts.Close()
	gt, err := newGatedTransport(&rest.Config{Host: ts.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	if err != nil || gt == nil {
		t.Fatalf("newGatedTransport: %v, %v", gt, err)
	}
	req, _ := http.NewRequest(http.MethodGet, ts.URL+"/watch", nil)
	resp, err := gt.RoundTrip(req)
	if err != nil {
		t.Fatalf("plain HTTP request: %v", err)
	}
	_ = resp.Body.Close()
}
