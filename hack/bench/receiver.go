package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// receiver is a webhook receiver on 127.0.0.1, Go's net/http server: it
// counts distinct payload ids, can hold requests (gate) and hands each
// body to inspect. It runs in the bench process, so that a drain against
// it shares the machine's cores with fieldwatch as a receiver on the
// same machine would; fieldwatch's own CPU per POST is read from /proc.
type receiver struct {
	addr    string
	srv     *http.Server
	mu      sync.Mutex
	ids     map[string]bool
	bytes   int64         // body bytes received since the last reset
	gate    chan struct{} // nil: open
	inspect func(body []byte)
}

func newReceiver() (*receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &receiver{addr: ln.Addr().String(), ids: map[string]bool{}}
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve)}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

// serve is the net/http server's handler: the body is read whole only
// when a test inspects it, else counted through io.Discard's pooled
// buffer.
func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	inspect := r.inspect != nil
	r.mu.Unlock()
	if inspect {
		body, _ := io.ReadAll(req.Body)
		r.got(req.Header.Get("Idempotency-Key"), body, len(body))
		return
	}
	n, _ := io.Copy(io.Discard, req.Body)
	r.got(req.Header.Get("Idempotency-Key"), nil, int(n))
}

// got records a request of size bytes (body, when inspected): held
// while the gate is closed.
func (r *receiver) got(id string, body []byte, size int) {
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
	r.bytes += int64(size)
	r.mu.Unlock()
}

func (r *receiver) received() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ids)
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
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("receiver got %d of %d after %s", r.received(), n, timeout)
		}
		time.Sleep(time.Millisecond)
	}
	return time.Now(), nil
}
