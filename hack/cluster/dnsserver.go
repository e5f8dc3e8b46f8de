package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
)

const (
	// dnsTTL is the records' time to live, in seconds: a Service's
	// endpoints change with its pods.
	dnsTTL = 5
	// maxUDPSize is the largest UDP answer to a query without EDNS(0)
	// (RFC 1035); capUDPSize caps what EDNS(0) may ask for (the size
	// that avoids fragmentation, RFC 9715).
	maxUDPSize = 512
	capUDPSize = 1232
	// maxTCPConns bounds the TCP connections served at once; a TCP
	// connection idle for tcpIdle is closed.
	maxTCPConns = 64
	tcpIdle     = 10 * time.Second
)

// dnsServer answers the queries of the pods for cluster.local from
// records, on UDP and TCP. It forwards nothing: a name outside
// cluster.local does not exist for it, so nothing leaves the machine.
type dnsServer struct {
	records *dnsRecords
	log     *slog.Logger
}

// serveDNS is the cluster DNS (fieldwatch-cluster dns, which up starts):
// Services and EndpointSlices followed with informers, served on the
// bridge's address, port 53, UDP and TCP, once the caches have synced.
// It returns when ctx ends, or when the bridge's address is gone (a
// cluster taken down without stopping it).
func serveDNS(ctx context.Context, cs kubernetes.Interface, log *slog.Logger) error {
	f := informers.NewSharedInformerFactory(cs, 0)
	records, err := newDNSRecords(f)
	if err != nil {
		return fmt.Errorf("cluster dns: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f.Start(ctx.Done())
	defer f.Shutdown()
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("cluster dns: the cache of %v did not sync", typ)
		}
	}
	addr := net.JoinHostPort(nodeIP, "53")
	var lc net.ListenConfig
	udp, err := lc.ListenPacket(ctx, "udp4", addr)
	if err != nil {
		return fmt.Errorf("cluster dns: %w", err)
	}
	tcp, err := lc.Listen(ctx, "tcp4", addr)
	if err != nil {
		_ = udp.Close()
		return fmt.Errorf("cluster dns: %w", err)
	}
	s := &dnsServer{records: records, log: log}
	log.Info("cluster dns: serving", "addr", addr, "domain", clusterDomain)
	errc := make(chan error, 3)
	go func() { errc <- s.serveUDP(udp) }()
	go func() { errc <- s.serveTCP(tcp) }()
	go func() { errc <- waitBridgeGone(ctx, log) }()
	err = <-errc
	cancel()
	_ = udp.Close()
	_ = tcp.Close()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// waitBridgeGone returns when ctx ends or the bridge no longer has the
// node's address: the cluster is gone, and so is the reason to serve.
func waitBridgeGone(ctx context.Context, log *slog.Logger) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(2 * time.Second):
		}
		if !bridgeHasNodeIP() {
			log.Info("cluster dns: the bridge's address is gone; stopping", "bridge", bridgeName)
			return nil
		}
	}
}

func bridgeHasNodeIP() bool {
	iface, err := net.InterfaceByName(bridgeName)
	if err != nil {
		return false
	}
	addrs, err := iface.Addrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.String() == nodeIP {
			return true
		}
	}
	return false
}

// serveUDP answers each datagram in turn until conn is closed.
func (s *dnsServer) serveUDP(conn net.PacketConn) error {
	buf := make([]byte, 64<<10)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			return err
		}
		if resp := s.answer(buf[:n], true); resp != nil {
			_, _ = conn.WriteTo(resp, from)
		}
	}
}

// serveTCP serves each connection (at most maxTCPConns at once) until ln
// is closed.
func (s *dnsServer) serveTCP(ln net.Listener) error {
	slots := make(chan struct{}, maxTCPConns)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		select {
		case slots <- struct{}{}:
		default:
			_ = c.Close()
			continue
		}
		wg.Go(func() {
			defer func() { <-slots }()
			s.serveConn(c)
		})
	}
}

// serveConn answers the length-prefixed queries of one TCP connection
// until it closes, sends something that is no query or is idle.
func (s *dnsServer) serveConn(c net.Conn) {
	defer func() { _ = c.Close() }()
	for {
		if err := c.SetDeadline(time.Now().Add(tcpIdle)); err != nil {
			return
		}
		var size [2]byte
		if _, err := io.ReadFull(c, size[:]); err != nil {
			return
		}
		query := make([]byte, binary.BigEndian.Uint16(size[:]))
		if _, err := io.ReadFull(c, query); err != nil {
			return
		}
		resp := s.answer(query, false)
		if resp == nil {
			return
		}
		if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(resp))), resp...)); err != nil {
			return
		}
	}
}

// answer returns the response to query, or nil when query is not one (no
// header, or a response): nothing is sent back then. Over UDP an answer
// larger than the client takes is sent truncated, without records, so
// that the client asks again over TCP.
func (s *dnsServer) answer(query []byte, udp bool) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil || h.Response {
		return nil
	}
	resp := response{header: dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode, RecursionDesired: h.RecursionDesired}}
	qs, err := p.AllQuestions()
	switch {
	case h.OpCode != 0:
		resp.header.RCode = dnsmessage.RCodeNotImplemented
	case err != nil || len(qs) != 1:
		resp.header.RCode = dnsmessage.RCodeFormatError
	default:
		resp.question = &qs[0]
		resp.edns, resp.ednsSize = ednsSize(&p)
		s.resolve(&resp)
	}
	limit := 65535
	if udp {
		limit = maxUDPSize
		if resp.edns {
			limit = min(max(resp.ednsSize, maxUDPSize), capUDPSize)
		}
	}
	out, err := resp.pack()
	if err == nil && len(out) > limit {
		resp.header.Truncated, resp.records = true, nil
		out, err = resp.pack()
	}
	if err != nil {
		s.log.Warn("cluster dns: cannot pack an answer", "error", err)
		return nil
	}
	return out
}

// ednsSize reads the UDP payload size of the query's EDNS(0) record, if
// it has one.
func ednsSize(p *dnsmessage.Parser) (bool, int) {
	if p.SkipAllAnswers() != nil || p.SkipAllAuthorities() != nil {
		return false, 0
	}
	for {
		h, err := p.AdditionalHeader()
		if err != nil {
			return false, 0
		}
		if h.Type == dnsmessage.TypeOPT {
			return true, int(h.Class)
		}
		if p.SkipAdditional() != nil {
			return false, 0
		}
	}
}

// resolve fills resp for its question: the addresses of a name of
// cluster.local, authoritatively (no records: the name exists without
// one of that type); NXDOMAIN for any other name, which is not forwarded.
func (s *dnsServer) resolve(resp *response) {
	q := resp.question
	name := strings.ToLower(q.Name.String())
	if q.Class != dnsmessage.ClassINET && q.Class != dnsmessage.ClassANY {
		resp.header.RCode = dnsmessage.RCodeNameError
		return
	}
	inZone := name == clusterDomain+"." || strings.HasSuffix(name, "."+clusterDomain+".")
	resp.header.Authoritative = inZone
	if name == clusterDomain+"." {
		return // the zone itself: it exists
	}
	addrs, ok := s.records.lookup(name, q.Type == dnsmessage.TypeAAAA)
	if !ok {
		resp.header.RCode = dnsmessage.RCodeNameError
		return
	}
	if q.Type != dnsmessage.TypeA && q.Type != dnsmessage.TypeAAAA && q.Type != dnsmessage.TypeALL {
		return
	}
	rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: dnsTTL}
	for _, a := range addrs {
		if a.Is4() {
			resp.records = append(resp.records, dnsmessage.Resource{Header: rh, Body: &dnsmessage.AResource{A: a.As4()}})
		} else {
			resp.records = append(resp.records, dnsmessage.Resource{Header: rh, Body: &dnsmessage.AAAAResource{AAAA: a.As16()}})
		}
	}
}

// response is an answer being built.
type response struct {
	header   dnsmessage.Header
	question *dnsmessage.Question
	records  []dnsmessage.Resource
	edns     bool // the query had an EDNS(0) record: so does the answer
	ednsSize int
}

func (r *response) pack() ([]byte, error) {
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), r.header)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if r.question != nil {
		if err := b.Question(*r.question); err != nil {
			return nil, err
		}
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	for _, rec := range r.records {
		var err error
		switch body := rec.Body.(type) {
		case *dnsmessage.AResource:
			err = b.AResource(rec.Header, *body)
		case *dnsmessage.AAAAResource:
			err = b.AAAAResource(rec.Header, *body)
		}
		if err != nil {
			return nil, err
		}
	}
	if r.edns {
		if err := b.StartAdditionals(); err != nil {
			return nil, err
		}
		var opt dnsmessage.ResourceHeader
		if err := opt.SetEDNS0(capUDPSize, dnsmessage.RCodeSuccess, false); err != nil {
			return nil, err
		}
		if err := b.OPTResource(opt, dnsmessage.OPTResource{}); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}
