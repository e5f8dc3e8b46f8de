package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// receiver is a webhook receiver on 127.0.0.1: it counts distinct payload
// ids, can hold requests (gate) and hands each body to inspect.
//
// It answers through Go's net/http server, or, once setLean(true), by
// itself (leanLoop, lean.go): a minimal HTTP/1.1 server of
// Content-Length bodies and keep-alive, one epoll loop on a thread of
// its own, that reads a request and writes a fixed 200.
// The drain runs against both: net/http's server spends about as much
// CPU a POST as the sender (each drain row reports both), so that a
// drain against it measures the two processes together; the lean one
// spends a fraction of that, so that a drain against it measures
// fieldwatch.
type receiver struct {
	addr    string
	srv     *http.Server
	toHTTP  chan net.Conn // connections for srv (connListener)
	mu      sync.Mutex
	ids     map[string]bool
	bytes   int64         // body bytes received since the last reset
	gate    chan struct{} // nil: open
	inspect func(body []byte)
	lean    bool
	loop    *leanLoop // the lean server, started with its first connection
	errs    []error   // the lean server's: malformed requests, failed system calls
}

func newReceiver() (*receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &receiver{addr: ln.Addr().String(), ids: map[string]bool{}, toHTTP: make(chan net.Conn)}
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve)}
	go func() { _ = r.srv.Serve(connListener{r.toHTTP, ln.Addr()}) }()
	go r.accept(ln)
	return r, nil
}

// accept hands each connection to the server of the moment.
func (r *receiver) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			close(r.toHTTP)
			return
		}
		r.mu.Lock()
		lean := r.lean
		if lean && r.loop == nil {
			if r.loop, err = newLeanLoop(r); err != nil {
				r.errs = append(r.errs, err)
			}
		}
		loop := r.loop
		r.mu.Unlock()
		switch {
		case lean && loop != nil:
			if err := loop.add(c); err != nil {
				r.mu.Lock()
				r.errs = append(r.errs, err)
				r.mu.Unlock()
			}
		case lean:
			_ = c.Close()
		default:
			r.toHTTP <- c
		}
	}
}

// setLean switches the server new connections go to and ends the other
// one's kept-alive connections, each once idle (a request in flight is
// answered first; one the sender wrote to an idle connection as it
// closed is sent again on a new one, never counted twice).
func (r *receiver) setLean(lean bool) {
	r.mu.Lock()
	r.lean = lean
	loop := r.loop
	r.mu.Unlock()
	if !lean && loop != nil {
		loop.closeIdle()
	}
	r.srv.SetKeepAlivesEnabled(!lean) // false: closes idle connections, and each busy one after its response
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.got(req.Header.Get("Idempotency-Key"), body)
}

// got records a request: held while the gate is closed.
func (r *receiver) got(id string, body []byte) {
	r.mu.Lock()
	gate, inspect := r.gate, r.inspect
	r.mu.Unlock()
	if gate != nil {
		<-gate
	}
	if inspect != nil {
		inspect(body)
	}
	r.mu.Lock()
	r.ids[id] = true
	r.bytes += int64(len(body))
	r.mu.Unlock()
}

// connListener is a net.Listener of the connections accept hands on.
type connListener struct {
	c    chan net.Conn
	addr net.Addr
}

func (l connListener) Accept() (net.Conn, error) {
	c, ok := <-l.c
	if !ok {
		return nil, net.ErrClosed
	}
	return c, nil
}

func (l connListener) Close() error   { return nil }
func (l connListener) Addr() net.Addr { return l.addr }

func (r *receiver) received() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ids)
}

// malformed returns the errors of the requests the lean server refused.
func (r *receiver) malformed() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return errors.Join(r.errs...)
}

func (r *receiver) reset(gate chan struct{}, inspect func([]byte)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = map[string]bool{}
	r.bytes = 0
	r.gate = gate
	r.inspect = inspect
}

// meanBody returns the mean body size of the requests received since the
// last reset.
func (r *receiver) meanBody() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ids) == 0 {
		return 0
	}
	return r.bytes / int64(len(r.ids))
}

func (r *receiver) waitReceived(n int, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for r.received() < n {
		if err := r.malformed(); err != nil {
			return time.Time{}, fmt.Errorf("receiver: %w", err)
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("receiver got %d of %d after %s", r.received(), n, timeout)
		}
		time.Sleep(time.Millisecond)
	}
	return time.Now(), nil
}

// fail records an error of the lean server.
func (r *receiver) fail(err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
}
