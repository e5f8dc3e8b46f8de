package audit

import (
	"context"
	"log/slog"
	"net"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestAdmissionShutdownHandsOn: records of reviews answered before the
// endpoint stops, still queued for its sink, reach the sink and the
// peers before Serve returns: a replica stopped gracefully loses none of
// what it answered.
func TestAdmissionShutdownHandsOn(t *testing.T) {
	p := newWebhookPKI(t, t.TempDir())
	peerLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Peers of each other: an endpoint asks for the client certificates
	// of peers only when it has some.
	peerSink := &recordingSink{}
	peer, err := NewAdmission(AdmissionOptions{CertFile: p.certFile, KeyFile: p.keyFile, Logger: slog.New(slog.DiscardHandler),
		Peers: []string{ln.Addr().String()}}, peerSink)
	if err != nil {
		t.Fatal(err)
	}
	peerCtx, stopPeer := context.WithCancel(context.Background())
	peerDone := make(chan error, 1)
	go func() { peerDone <- peer.Serve(peerCtx, peerLn) }()
	defer func() {
		stopPeer()
		if err := <-peerDone; err != nil {
			t.Errorf("peer: %v", err)
		}
	}()

	// The sink holds its first batch until released: the records of the
	// next reviews stay queued.
	sink := &blockingSink{release: make(chan struct{})}
	a, err := NewAdmission(AdmissionOptions{CertFile: p.certFile, KeyFile: p.keyFile, Logger: slog.New(slog.DiscardHandler),
		Peers: []string{peerLn.Addr().String()}}, sink)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx, ln) }()
	c := httpsClient(t, p.ca.CertPEM, nil, nil)
	const n = 5
	for i := range n {
		req := request(admissionv1.Update, "alice", cmJSON("cm", "u1", "6", "b"), cmJSON("cm", "u1", "5", "a"))
		req.UID += types.UID("-" + string(rune('a'+i)))
		if code, body := post(t, c, "https://"+ln.Addr().String()+AdmissionPath, reviewOf(t, req)); code != 200 {
			t.Fatalf("review %d: %d %s", i, code, body)
		}
	}
	stop()
	close(sink.release)
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
	if got := len(sink.all()); got != n {
		t.Errorf("the sink holds %d records once Serve returned, want %d", got, n)
	}
	if got := len(peerSink.all()); got != n {
		t.Errorf("the peer holds %d records once Serve returned, want %d", got, n)
	}
}
