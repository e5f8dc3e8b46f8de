package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// receiver is a webhook receiver on 127.0.0.1: it counts distinct payload
// ids, can hold requests (gate) and hands each body to inspect.
//
// It answers through Go's net/http server, or, once setLean(true), by
// itself (serveLean): a minimal HTTP/1.1 server of Content-Length
// bodies and keep-alive that reads a request and writes a fixed 200.
// The drain runs against both: net/http's server spends 40-70 µs a POST
// on this machine's two cores, as much as the sender, so that a drain
// against it measures the two processes together; the lean one spends a
// fraction of that, so that a drain against it measures fieldwatch.
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
	conns   map[net.Conn]*leanConn // the lean server's open connections
	errs    []error                // malformed requests (the lean server's)
}

// leanConn is the state of one of the lean server's connections.
type leanConn struct {
	busy       bool // between a request's head and its response
	closeAfter bool // the receiver switched servers: close after the response
}

func newReceiver() (*receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &receiver{addr: ln.Addr().String(), ids: map[string]bool{}, conns: map[net.Conn]*leanConn{}, toHTTP: make(chan net.Conn)}
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
		if lean {
			r.conns[c] = &leanConn{}
		}
		r.mu.Unlock()
		if lean {
			go r.serveLean(c)
		} else {
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
	if !lean {
		for c, st := range r.conns {
			if st.busy {
				st.closeAfter = true
			} else {
				_ = c.Close()
			}
		}
	}
	r.mu.Unlock()
	r.srv.SetKeepAlivesEnabled(!lean) // false: closes idle connections, and each busy one after its response
}

// setBusy marks c busy or idle; it returns false when c is to close.
func (r *receiver) setBusy(c net.Conn, busy bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.conns[c]
	st.busy = busy
	return !st.closeAfter
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

var leanOK = []byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")

// serveLean serves one connection: requests with a Content-Length body,
// each answered 200 with no body. Anything else (chunked bodies, a
// malformed head) is answered 400, recorded as an error and the
// connection closed.
func (r *receiver) serveLean(c net.Conn) {
	defer func() {
		_ = c.Close()
		r.mu.Lock()
		delete(r.conns, c)
		r.mu.Unlock()
	}()
	br := bufio.NewReaderSize(c, 64<<10)
	var body []byte
	for {
		n, id, err := readHead(br)
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
			return
		}
		if err == nil && !r.setBusy(c, true) {
			return
		}
		if err == nil {
			body = body[:0]
			if cap(body) < n {
				body = make([]byte, n)
			}
			body = body[:n]
			_, err = io.ReadFull(br, body)
		}
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				r.mu.Lock()
				r.errs = append(r.errs, err)
				r.mu.Unlock()
				_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
			}
			return
		}
		r.got(id, body)
		if _, err := c.Write(leanOK); err != nil || !r.setBusy(c, false) {
			return
		}
	}
}

// readHead reads a request's line and header; it returns the body's
// length and the Idempotency-Key. io.EOF: the connection ended between
// requests.
func readHead(br *bufio.Reader) (n int, id string, err error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		if len(line) == 0 {
			return 0, "", io.EOF // closed (or reset) between requests
		}
		return 0, "", fmt.Errorf("request line: %w", err)
	}
	if !bytes.HasPrefix(line, []byte("POST ")) || !bytes.HasSuffix(line, []byte(" HTTP/1.1\r\n")) {
		return 0, "", fmt.Errorf("request line %q: not an HTTP/1.1 POST", line)
	}
	n = -1
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return 0, "", fmt.Errorf("header: %w", err)
		}
		if string(line) == "\r\n" {
			break
		}
		name, value, ok := bytes.Cut(bytes.TrimSuffix(line, []byte("\r\n")), []byte(":"))
		if !ok {
			return 0, "", fmt.Errorf("header line %q", line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if n, err = strconv.Atoi(string(value)); err != nil || n < 0 {
				return 0, "", fmt.Errorf("Content-Length %q", value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return 0, "", fmt.Errorf("Transfer-Encoding %q: only Content-Length bodies are served", value)
		case bytes.EqualFold(name, []byte("Idempotency-Key")):
			id = string(value)
		}
	}
	if n < 0 {
		return 0, "", errors.New("no Content-Length")
	}
	return n, id, nil
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
