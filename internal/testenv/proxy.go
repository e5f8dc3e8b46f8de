package testenv

import (
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
)

// Proxy is a TCP proxy on 127.0.0.1 that a test can cut (a network
// partition: connections drop, new ones are refused) and restore on the
// same address, or stall (packets dropped: connections stay open and
// carry nothing, as TCP's retransmissions do until the path heals) and
// resume. Its target may be set after it listens, for a server
// whose address is known only once it runs (a process told to listen on
// port 0). With several targets it is a Service in front of replicas:
// each connection goes to the next target in turn, or to the one after
// when that one refuses it (an endpoint that is down).
type Proxy struct {
	t    testing.TB
	addr string

	mu      sync.Mutex
	targets []string
	next    int
	ln      net.Listener
	conns   map[net.Conn]bool
	// stalled, while not nil, is closed by Resume: copies wait on it.
	stalled chan struct{}
}

// NewProxy listens on a free 127.0.0.1 port and forwards each connection
// to target (until SetTarget names one, connections are closed at once).
// It is cut when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{t: t, addr: ln.Addr().String(), conns: map[net.Conn]bool{}}
	if target != "" {
		p.targets = []string{target}
	}
	p.serve(ln)
	t.Cleanup(p.Cut)
	return p
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() string { return p.addr }

// SetTarget makes new connections go to target.
func (p *Proxy) SetTarget(target string) { p.SetTargets(target) }

// SetTargets makes new connections go to each of targets in turn.
func (p *Proxy) SetTargets(targets ...string) {
	p.mu.Lock()
	p.targets = slices.Clone(targets)
	p.next = 0
	p.mu.Unlock()
}

// dial connects to the next target that takes the connection.
func (p *Proxy) dial() (net.Conn, error) {
	p.mu.Lock()
	targets := slices.Clone(p.targets)
	first := p.next
	p.next++
	p.mu.Unlock()
	err := errors.New("no target")
	for i := range targets {
		var up net.Conn
		if up, err = net.Dial("tcp", targets[(first+i)%len(targets)]); err == nil {
			return up, nil
		}
	}
	return nil, err
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := p.dial()
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns[c], p.conns[up] = true, true
			p.mu.Unlock()
			go func() { p.copy(up, c); _ = up.Close() }()
			go func() { p.copy(c, up); _ = c.Close() }()
		}
	}()
}

// copy copies src to dst until either fails, holding what it read while
// the proxy is stalled.
func (p *Proxy) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			stalled := p.stalled
			p.mu.Unlock()
			if stalled != nil {
				<-stalled
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Stall stops every byte both ways, on open connections and new ones
// (which are accepted), until Resume: to each side the other has gone
// silent, as when packets are dropped, and nothing is closed. What was
// sent meanwhile arrives after Resume, as TCP retransmits it.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled == nil {
		p.stalled = make(chan struct{})
	}
}

// Resume ends a Stall.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
}

// Cut drops every connection and refuses new ones.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = map[net.Conn]bool{}
	if p.stalled != nil {
		close(p.stalled) // the copies of the closed connections return
		p.stalled = nil
	}
}

// Restore accepts connections again on the same address.
func (p *Proxy) Restore() {
	p.t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatal(err)
	}
	p.serve(ln)
}
