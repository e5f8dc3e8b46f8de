package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

func service(ns, name, clusterIP string, publishNotReady bool) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.ServiceSpec{ClusterIP: clusterIP, PublishNotReadyAddresses: publishNotReady},
	}
	if clusterIP != corev1.ClusterIPNone {
		svc.Spec.ClusterIPs = []string{clusterIP}
	}
	return svc
}

// endpoint is an endpoint of a slice: its address, its readiness (nil:
// unknown, which counts as ready) and its hostname.
type endpoint struct {
	addr     string
	ready    *bool
	hostname string
}

func endpointSlice(ns, name, svc string, typ discoveryv1.AddressType, eps ...endpoint) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: typ,
	}
	for _, e := range eps {
		ep := discoveryv1.Endpoint{Addresses: []string{e.addr}, Conditions: discoveryv1.EndpointConditions{Ready: e.ready}}
		if e.hostname != "" {
			ep.Hostname = &e.hostname
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	return s
}

// startRecords starts the informers of dnsRecords on a fake clientset
// holding objs and waits for their caches.
func startRecords(t *testing.T, objs ...runtime.Object) (*dnsRecords, *fake.Clientset) {
	t.Helper()
	cs := fake.NewClientset(objs...)
	f := informers.NewSharedInformerFactory(cs, 0)
	r, err := newDNSRecords(f)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.Start(ctx.Done())
	t.Cleanup(func() { cancel(); f.Shutdown() })
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("cache of %v did not sync", typ)
		}
	}
	return r, cs
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// clusterObjects are a cluster's Services and EndpointSlices: a
// ClusterIP Service, a headless one with ready, unready and unknown
// endpoints in two slices (one address in both), a headless one that
// publishes unready addresses, a StatefulSet's headless Service with
// hostnames, and an ExternalName Service.
func clusterObjects() []runtime.Object {
	yes, no := true, false
	external := service("default", "ext", "", false)
	external.Spec.Type, external.Spec.ExternalName = corev1.ServiceTypeExternalName, "example.com"
	return []runtime.Object{
		service("default", "kubernetes", "10.96.0.1", false),
		service("fieldwatch", "fieldwatch-metrics", "10.96.0.20", false),
		endpointSlice("fieldwatch", "fieldwatch-metrics-a", "fieldwatch-metrics", discoveryv1.AddressTypeIPv4, endpoint{addr: "10.244.0.9", ready: &yes}),
		service("fieldwatch", "peers", corev1.ClusterIPNone, false),
		endpointSlice("fieldwatch", "peers-a", "peers", discoveryv1.AddressTypeIPv4,
			endpoint{addr: "10.244.0.7", ready: &yes}, endpoint{addr: "10.244.0.5", ready: &no}, endpoint{addr: "10.244.0.6"}),
		endpointSlice("fieldwatch", "peers-b", "peers", discoveryv1.AddressTypeIPv4, endpoint{addr: "10.244.0.7", ready: &yes}),
		endpointSlice("fieldwatch", "peers-v6", "peers", discoveryv1.AddressTypeIPv6, endpoint{addr: "fd00::7", ready: &yes}),
		service("fieldwatch", "all-peers", corev1.ClusterIPNone, true),
		endpointSlice("fieldwatch", "all-peers-a", "all-peers", discoveryv1.AddressTypeIPv4,
			endpoint{addr: "10.244.0.5", ready: &no}, endpoint{addr: "10.244.0.7", ready: &yes}),
		service("db", "pg", corev1.ClusterIPNone, false),
		endpointSlice("db", "pg-a", "pg", discoveryv1.AddressTypeIPv4,
			endpoint{addr: "10.244.0.11", ready: &yes, hostname: "pg-0"}, endpoint{addr: "10.244.0.12", ready: &no, hostname: "pg-1"}),
		service("db", "empty", corev1.ClusterIPNone, false),
		// A slice of another Service of the same name in another
		// namespace, and one without the Service label.
		endpointSlice("other", "peers-x", "peers", discoveryv1.AddressTypeIPv4, endpoint{addr: "10.244.0.99"}),
		&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "fieldwatch", Name: "unlabelled"}, AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.98"}}}},
		external,
	}
}

// TestDNSLookup: the names of Services, of headless Services' ready
// endpoints (publishNotReadyAddresses honoured) and of their endpoints'
// hostnames, each address once and of the family asked for; every other
// name does not exist.
func TestDNSLookup(t *testing.T) {
	r, _ := startRecords(t, clusterObjects()...)
	tests := []struct {
		name  string
		v6    bool
		want  []netip.Addr
		found bool
	}{
		{"kubernetes.default.svc.cluster.local.", false, addrs("10.96.0.1"), true},
		{"kubernetes.default.svc.cluster.local", false, addrs("10.96.0.1"), true},
		{"kubernetes.default.svc.cluster.local.", true, nil, true},
		{"fieldwatch-metrics.fieldwatch.svc.cluster.local.", false, addrs("10.96.0.20"), true},
		{"peers.fieldwatch.svc.cluster.local.", false, addrs("10.244.0.6", "10.244.0.7"), true},
		{"peers.fieldwatch.svc.cluster.local.", true, addrs("fd00::7"), true},
		{"all-peers.fieldwatch.svc.cluster.local.", false, addrs("10.244.0.5", "10.244.0.7"), true},
		{"pg.db.svc.cluster.local.", false, addrs("10.244.0.11"), true},
		{"pg-0.pg.db.svc.cluster.local.", false, addrs("10.244.0.11"), true},
		{"pg-0.pg.db.svc.cluster.local.", true, nil, true},
		{"pg-1.pg.db.svc.cluster.local.", false, nil, false}, // not ready
		{"pg-2.pg.db.svc.cluster.local.", false, nil, false},
		{"empty.db.svc.cluster.local.", false, nil, true},
		{"ext.default.svc.cluster.local.", false, nil, true},
		{"x.ext.default.svc.cluster.local.", false, nil, false},
		{"x.kubernetes.default.svc.cluster.local.", false, nil, false}, // a ClusterIP Service has no hostnames
		{"peers.other.svc.cluster.local.", false, nil, false},
		{"missing.default.svc.cluster.local.", false, nil, false},
		{"default.svc.cluster.local.", false, nil, false},
		{"a.b.c.d.svc.cluster.local.", false, nil, false},
		{"kubernetes..svc.cluster.local.", false, nil, false},
		{"kubernetes.default.cluster.local.", false, nil, false},
		{"kubernetes.default.svc.cluster.local.example.com.", false, nil, false},
		{"example.com.", false, nil, false},
		{".", false, nil, false},
	}
	for _, tt := range tests {
		got, found := r.lookup(tt.name, tt.v6)
		if found != tt.found || !slices.Equal(got, tt.want) {
			t.Errorf("lookup(%q, v6 %v) = %v, %v; want %v, %v", tt.name, tt.v6, got, found, tt.want, tt.found)
		}
	}
}

// TestDNSLookupFollowsChanges: a Service's endpoints are answered as the
// informers see them change.
func TestDNSLookupFollowsChanges(t *testing.T) {
	r, cs := startRecords(t, service("fieldwatch", "peers", corev1.ClusterIPNone, false))
	const name = "peers.fieldwatch.svc.cluster.local."
	ctx := context.Background()
	s := endpointSlice("fieldwatch", "peers-a", "peers", discoveryv1.AddressTypeIPv4, endpoint{addr: "10.244.0.7"})
	if _, err := cs.DiscoveryV1().EndpointSlices("fieldwatch").Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the new endpoint", func() bool {
		got, _ := r.lookup(name, false)
		return slices.Equal(got, addrs("10.244.0.7"))
	})
	no := false
	s.Endpoints[0].Conditions.Ready = &no
	if _, err := cs.DiscoveryV1().EndpointSlices("fieldwatch").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the endpoint gone unready", func() bool {
		got, found := r.lookup(name, false)
		return found && len(got) == 0
	})
	if err := cs.CoreV1().Services("fieldwatch").Delete(ctx, "peers", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the Service's name gone", func() bool {
		_, found := r.lookup(name, false)
		return !found
	})
}

// query packs a query for name and type, with an EDNS(0) record of size
// when size > 0.
func query(t *testing.T, name string, typ dnsmessage.Type, size int) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 42, RecursionDesired: true})
	_ = b.StartQuestions()
	if err := b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET}); err != nil {
		t.Fatal(err)
	}
	if size > 0 {
		_ = b.StartAdditionals()
		var opt dnsmessage.ResourceHeader
		if err := opt.SetEDNS0(size, dnsmessage.RCodeSuccess, false); err != nil {
			t.Fatal(err)
		}
		if err := b.OPTResource(opt, dnsmessage.OPTResource{}); err != nil {
			t.Fatal(err)
		}
	}
	msg, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// TestDNSAnswer: the messages the server sends: authoritative answers
// for cluster.local (empty for AAAA), NXDOMAIN for every other name,
// truncation over UDP, errors for what is not a plain query, nothing for
// what is not a query at all.
func TestDNSAnswer(t *testing.T) {
	objs := clusterObjects()
	var many []endpoint
	for i := range 100 {
		many = append(many, endpoint{addr: fmt.Sprintf("10.244.1.%d", i)})
	}
	objs = append(objs, service("big", "many", corev1.ClusterIPNone, false),
		endpointSlice("big", "many-a", "many", discoveryv1.AddressTypeIPv4, many...))
	r, _ := startRecords(t, objs...)
	s := &dnsServer{records: r, log: slog.New(slog.NewTextHandler(io.Discard, nil))}

	tests := []struct {
		what      string
		query     []byte
		udp       bool
		rcode     dnsmessage.RCode
		auth, tc  bool
		answers   int
		edns      bool
		questions int
	}{
		{"a Service", query(t, "Kubernetes.Default.svc.cluster.local.", dnsmessage.TypeA, 0), true, dnsmessage.RCodeSuccess, true, false, 1, false, 1},
		{"its AAAA", query(t, "kubernetes.default.svc.cluster.local.", dnsmessage.TypeAAAA, 0), true, dnsmessage.RCodeSuccess, true, false, 0, false, 1},
		{"its TXT", query(t, "kubernetes.default.svc.cluster.local.", dnsmessage.TypeTXT, 0), true, dnsmessage.RCodeSuccess, true, false, 0, false, 1},
		{"a headless Service, EDNS", query(t, "peers.fieldwatch.svc.cluster.local.", dnsmessage.TypeA, 1232), true, dnsmessage.RCodeSuccess, true, false, 2, true, 1},
		{"a missing Service", query(t, "nope.default.svc.cluster.local.", dnsmessage.TypeA, 0), true, dnsmessage.RCodeNameError, true, false, 0, false, 1},
		{"its AAAA", query(t, "nope.default.svc.cluster.local.", dnsmessage.TypeAAAA, 0), true, dnsmessage.RCodeNameError, true, false, 0, false, 1},
		{"the zone", query(t, "cluster.local.", dnsmessage.TypeSOA, 0), true, dnsmessage.RCodeSuccess, true, false, 0, false, 1},
		{"outside the zone", query(t, "example.com.", dnsmessage.TypeA, 0), true, dnsmessage.RCodeNameError, false, false, 0, false, 1},
		{"outside, AAAA", query(t, "proxy.golang.org.", dnsmessage.TypeAAAA, 0), false, dnsmessage.RCodeNameError, false, false, 0, false, 1},
		{"a reverse name", query(t, "1.0.96.10.in-addr.arpa.", dnsmessage.TypePTR, 0), true, dnsmessage.RCodeNameError, false, false, 0, false, 1},
		{"100 addresses over UDP", query(t, "many.big.svc.cluster.local.", dnsmessage.TypeA, 0), true, dnsmessage.RCodeSuccess, true, true, 0, false, 1},
		{"100 addresses over UDP, EDNS 4096", query(t, "many.big.svc.cluster.local.", dnsmessage.TypeA, 4096), true, dnsmessage.RCodeSuccess, true, true, 0, true, 1},
		{"100 addresses over TCP", query(t, "many.big.svc.cluster.local.", dnsmessage.TypeA, 0), false, dnsmessage.RCodeSuccess, true, false, 100, false, 1},
	}
	for _, tt := range tests {
		out := s.answer(tt.query, tt.udp)
		var p dnsmessage.Parser
		h, err := p.Start(out)
		if err != nil {
			t.Errorf("%s: %v", tt.what, err)
			continue
		}
		qs, _ := p.AllQuestions()
		as, _ := p.AllAnswers()
		_ = p.SkipAllAuthorities()
		adds, _ := p.AllAdditionals()
		if h.ID != 42 || !h.Response || h.RCode != tt.rcode || h.Authoritative != tt.auth || h.Truncated != tt.tc ||
			len(as) != tt.answers || len(qs) != tt.questions || (len(adds) == 1) != tt.edns || h.RecursionAvailable {
			t.Errorf("%s: header %+v, %d questions, %d answers, %d additional", tt.what, h, len(qs), len(as), len(adds))
		}
		for _, a := range as {
			if a.Header.TTL != dnsTTL || a.Header.Name != qs[0].Name {
				t.Errorf("%s: record %v", tt.what, a.Header)
			}
		}
		if tt.udp && len(out) > maxUDPSize && !tt.edns {
			t.Errorf("%s: %d bytes over UDP without EDNS", tt.what, len(out))
		}
	}

	// Not a plain query: an error; not a query: no answer.
	two := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7})
	_ = two.StartQuestions()
	for range 2 {
		_ = two.Question(dnsmessage.Question{Name: dnsmessage.MustNewName("a.b.svc.cluster.local."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	}
	twoMsg, _ := two.Finish()
	notify := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 8, OpCode: 4})
	notifyMsg, _ := notify.Finish()
	resp := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 9, Response: true})
	respMsg, _ := resp.Finish()
	for _, tt := range []struct {
		what  string
		query []byte
		rcode dnsmessage.RCode
		none  bool
	}{
		{"two questions", twoMsg, dnsmessage.RCodeFormatError, false},
		{"a NOTIFY", notifyMsg, dnsmessage.RCodeNotImplemented, false},
		{"a question cut short", query(t, "kubernetes.default.svc.cluster.local.", dnsmessage.TypeA, 0)[:20], dnsmessage.RCodeFormatError, false},
		{"a response", respMsg, 0, true},
		{"no header", []byte{1, 2, 3}, 0, true},
		{"nothing", nil, 0, true},
	} {
		out := s.answer(tt.query, true)
		if tt.none {
			if out != nil {
				t.Errorf("%s: answered %x", tt.what, out)
			}
			continue
		}
		var p dnsmessage.Parser
		h, err := p.Start(out)
		if err != nil || h.RCode != tt.rcode || !h.Response {
			t.Errorf("%s: header %+v, %v; want %v", tt.what, h, err, tt.rcode)
		}
	}
}

// TestDNSServe: Go's own resolver, pointed at the server's UDP and TCP
// sockets on loopback, resolves a headless Service's endpoints, over TCP
// after a truncated UDP answer when there are many, and gets "no such
// host" for a name outside the cluster.
func TestDNSServe(t *testing.T) {
	objs := clusterObjects()
	var many []endpoint
	for i := range 100 {
		many = append(many, endpoint{addr: fmt.Sprintf("10.244.1.%d", i)})
	}
	objs = append(objs, service("big", "many", corev1.ClusterIPNone, false),
		endpointSlice("big", "many-a", "many", discoveryv1.AddressTypeIPv4, many...))
	r, _ := startRecords(t, objs...)
	s := &dnsServer{records: r, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	udp, tcp := listenPair(t)
	done := make(chan error, 2)
	go func() { done <- s.serveUDP(udp) }()
	go func() { done <- s.serveTCP(tcp) }()
	t.Cleanup(func() {
		_ = udp.Close()
		_ = tcp.Close()
		for range 2 {
			if err := <-done; !errors.Is(err, net.ErrClosed) {
				t.Errorf("serve: %v", err)
			}
		}
	})
	var mu sync.Mutex
	dialed := map[string]int{}
	resolver := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		mu.Lock()
		dialed[network]++
		mu.Unlock()
		var d net.Dialer
		return d.DialContext(ctx, network, udp.LocalAddr().String())
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	got, err := resolver.LookupHost(ctx, "peers.fieldwatch.svc.cluster.local.")
	if err != nil || !slices.Equal(got, []string{"10.244.0.6", "10.244.0.7", "fd00::7"}) {
		t.Errorf("peers: %v, %v", got, err)
	}
	mu.Lock()
	tcpBefore := dialed["tcp"]
	mu.Unlock()
	ips, err := resolver.LookupNetIP(ctx, "ip4", "many.big.svc.cluster.local.")
	if err != nil || len(ips) != 100 {
		t.Errorf("many: %d addresses, %v", len(ips), err)
	}
	mu.Lock()
	if dialed["tcp"] == tcpBefore {
		t.Errorf("100 addresses came without TCP: dialed %v", dialed)
	}
	mu.Unlock()
	_, err = resolver.LookupHost(ctx, "proxy.golang.org.")
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
		t.Errorf("proxy.golang.org: %v, want not found", err)
	}
}

// listenPair listens on UDP and TCP on one port of loopback (a port free
// for UDP may be taken for TCP: a few tries).
func listenPair(t *testing.T) (net.PacketConn, net.Listener) {
	t.Helper()
	var last error
	for range 10 {
		udp, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		tcp, err := net.Listen("tcp4", udp.LocalAddr().String())
		if err == nil {
			return udp, tcp
		}
		last = err
		_ = udp.Close()
	}
	t.Fatal(last)
	return nil, nil
}
