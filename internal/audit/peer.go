package audit

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"
)

// PeerPath is the path on which a receiver takes, from another replica's,
// the audit events the apiserver posted to that one.
const PeerPath = "/fieldwatch.io/v1/peer-events"

// peerInstanceHeader names the process that forwards events: a receiver
// that finds its own name there is the forwarder itself (a peer address
// that leads back to it), and answers without reading.
const peerInstanceHeader = "X-Fieldwatch-Instance"

// DefaultPeerTimeout bounds the forwarding of one batch to the peers.
const DefaultPeerTimeout = 2 * time.Second

// peerResolveEvery is how long the addresses a peer name resolves to are
// used before it is resolved again, and how long an address that failed
// slowly is left out.
const peerResolveEvery = 5 * time.Second

// peerSlowFailure is how long a failed forward must have taken for its
// address to be left out. A refusal costs nothing to try again with
// every batch, and a replica that restarts at its address (a container
// restarted in its pod) gets the records as soon as it listens.
const peerSlowFailure = 250 * time.Millisecond

// peerResolveAfterFailure is how soon the names are resolved again once a
// peer failed: in a rollout the replica that replaces a pod comes under
// a new address, and the records forwarded meanwhile would miss it.
const peerResolveAfterFailure = 500 * time.Millisecond

// errNotPeer is the error of a peer that serves another certificate.
var errNotPeer = errors.New("the peer does not serve this receiver's certificate")

// peers forwards the events the apiserver posted to this receiver to the
// other replicas' receivers, so that every replica holds every event: the
// one that takes over after a failover attributes what it delivers, as its
// predecessor would have. A receiver proves it is a peer with the
// receiver's own serving certificate and key (every replica has the same
// ones): as the client certificate of a forward, and as the server's.
type peers struct {
	names    []string // host:port, as configured
	instance string   // this process, in peerInstanceHeader
	timeout  time.Duration
	client   *http.Client
	e        *endpoint

	mu       sync.Mutex
	addrs    []string // resolved, less self and the failed
	resolved time.Time
	// failed are the addresses that failed slowly and when: left out
	// for peerResolveEvery. After any failure (lastFailure) the names
	// are resolved again every peerResolveAfterFailure for as long, to
	// find the pods that replace them.
	failed      map[string]time.Time
	lastFailure time.Time
	self        map[string]bool
}

func newPeers(e *endpoint, names []string, timeout time.Duration) (*peers, error) {
	for _, n := range names {
		if _, _, err := net.SplitHostPort(n); err != nil {
			return nil, fmt.Errorf("%s: peer %q: want host:port: %w", e.what, n, err)
		}
	}
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return nil, fmt.Errorf("%s: instance id: %w", e.what, err)
	}
	if timeout <= 0 {
		timeout = DefaultPeerTimeout
	}
	p := &peers{names: names, instance: hex.EncodeToString(id), timeout: timeout, e: e, self: map[string]bool{}, failed: map[string]time.Time{}}
	p.client = &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			TLSClientConfig: &tls.Config{
				MinVersion: tls.VersionTLS12,
				// The peer is verified by VerifyConnection instead:
				// it must serve this receiver's own certificate,
				// whatever address it was reached at.
				InsecureSkipVerify:   true,
				VerifyConnection:     p.verify,
				GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return e.cert.get() },
			},
			MaxIdleConnsPerHost: 2,
			IdleConnTimeout:     90 * time.Second,
		},
		// A redirect would send the events elsewhere.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return p, nil
}

// verify accepts a peer that serves this receiver's certificate.
func (p *peers) verify(cs tls.ConnectionState) error {
	if !p.e.isOwnCertificate(cs.PeerCertificates) {
		return errNotPeer
	}
	return nil
}

// targets returns the peers' addresses, resolving the names again every
// peerResolveEvery (a headless Service's addresses change with its pods),
// or every peerResolveAfterFailure while an address that failed is left
// out.
func (p *peers) targets(ctx context.Context) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	every := peerResolveEvery
	if now.Sub(p.lastFailure) < peerResolveEvery {
		every = peerResolveAfterFailure
	}
	for a, at := range p.failed {
		if now.Sub(at) >= peerResolveEvery {
			delete(p.failed, a)
		}
	}
	if now.Sub(p.resolved) < every {
		return p.addrs
	}
	var addrs []string
	for _, n := range p.names {
		host, port, _ := net.SplitHostPort(n)
		ips, err := net.DefaultResolver.LookupHost(ctx, host)
		if err != nil {
			p.e.log.Warn(p.e.what+": cannot resolve a peer; not forwarding to it now", "peer", n, "error", err)
			continue
		}
		for _, ip := range ips {
			if a := net.JoinHostPort(ip, port); !p.self[a] && p.failed[a].IsZero() {
				addrs = append(addrs, a)
			}
		}
	}
	p.addrs, p.resolved = addrs, now
	return addrs
}

// forward posts recs, encoded, to every peer at once and waits for them
// (at most the timeout). A peer that fails misses these events: it is
// down, and a replica that starts again holds only what comes after. An
// address whose failure took peerSlowFailure or more, or that serves
// another certificate, is left out for peerResolveEvery; after any
// failure the names are resolved again soon (peerResolveAfterFailure) to
// find a replica that replaces it.
func (p *peers) forward(ctx context.Context, recs []Record) {
	body, err := json.Marshal(recs)
	if err != nil {
		return // strings, numbers and times always encode
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.timeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, addr := range p.targets(ctx) {
		wg.Go(func() { p.post(ctx, addr, body) })
	}
	wg.Wait()
}

// post sends body to the peer at addr.
func (p *peers) post(ctx context.Context, addr string, body []byte) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+addr+PeerPath, bytes.NewReader(body))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(peerInstanceHeader, p.instance)
	start := time.Now()
	resp, err := p.client.Do(req)
	if err != nil {
		// A peer that fails slowly is left out for a while: a pod gone
		// with its address makes every forward wait the whole timeout,
		// holding a reading slot, and the apiserver's posts meanwhile
		// get 429s and come late.
		now := time.Now()
		p.mu.Lock()
		p.lastFailure = now
		if now.Sub(start) >= peerSlowFailure || errors.Is(err, errNotPeer) {
			p.addrs = slices.DeleteFunc(slices.Clone(p.addrs), func(a string) bool { return a == addr })
			p.failed[addr] = now
		}
		p.mu.Unlock()
		p.e.peerFailed.Inc()
		if suppressed, ok := p.e.refusals.allow("peer-forward", time.Now()); ok {
			p.e.log.Warn(p.e.what+": cannot forward records to a peer; it misses them", "peer", addr, "error", err, "suppressed", suppressed)
		}
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	_ = resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK && resp.Header.Get(peerInstanceHeader) == p.instance:
		// This receiver itself: not a peer.
		p.mu.Lock()
		p.self[addr] = true
		p.resolved = time.Time{}
		p.mu.Unlock()
	case resp.StatusCode == http.StatusOK:
		p.e.peerOK.Inc()
	default:
		p.e.peerFailed.Inc()
		if suppressed, ok := p.e.refusals.allow("peer-forward", time.Now()); ok {
			p.e.log.Warn(p.e.what+": a peer refused forwarded records; it misses them", "peer", addr, "code", resp.StatusCode, "suppressed", suppressed)
		}
	}
}

// servePeer takes the events a peer forwards: from a client that presents
// this receiver's own certificate only.
func (w *Webhook) servePeer(rw http.ResponseWriter, r *http.Request) {
	if w.peers != nil && r.Header.Get(peerInstanceHeader) == w.peers.instance {
		rw.Header().Set(peerInstanceHeader, w.peers.instance)
		rw.WriteHeader(http.StatusOK)
		return
	}
	if r.TLS == nil || !w.isOwnCertificate(r.TLS.PeerCertificates) {
		w.m.refusedBy[RefusedPeer].Inc()
		w.refuseClient(rw, r, http.StatusForbidden, "not a peer", RefusedPeer, "")
		return
	}
	if !w.accepting(rw) {
		return
	}
	if !w.takeSlot(rw, r) {
		return
	}
	defer w.releaseSlot()
	var recs []Record
	dec := json.NewDecoder(http.MaxBytesReader(rw, r.Body, w.opts.MaxBodyBytes))
	if err := dec.Decode(&recs); err != nil {
		w.m.decodeErrorsBy[SourcePeer].Inc()
		w.refuse(rw, r, http.StatusBadRequest, "peer events: "+err.Error())
		return
	}
	var kept int64
	for i := range recs {
		kept += int64(recordBytes + recs[i].keptBytes())
	}
	if kept > w.opts.MaxBodyBytes/4 {
		w.refuse(rw, r, http.StatusRequestEntityTooLarge, errRequestKeepsTooMuch.Error())
		return
	}
	w.sink.Add(SourcePeer, recs, 0)
	w.m.webhookCode(http.StatusOK)
	rw.WriteHeader(http.StatusOK)
}
