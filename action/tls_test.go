package action

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
	"github.com/fieldwatch/fieldwatch/rules"
)

// newTestCA makes a CA for one test.
func newTestCA(t *testing.T, name string) *testenv.CA {
	t.Helper()
	ca, err := testenv.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// issue signs a leaf certificate of ca: a serving one for 127.0.0.1 or a
// client one, as PEM certificate and key.
func issue(t *testing.T, ca *testenv.CA, name string, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	t.Helper()
	var err error
	if usage == x509.ExtKeyUsageServerAuth {
		certPEM, keyPEM, err = ca.ServerCert(name)
	} else {
		certPEM, keyPEM, err = ca.ClientCert(name)
	}
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, keyPEM
}

// TestWebhookTLS: a receiver with a certificate from a private CA that
// requires a client certificate from another one.
func TestWebhookTLS(t *testing.T) {
	dir := t.TempDir()
	serverCA, clientCA := newTestCA(t, "server-ca"), newTestCA(t, "client-ca")
	serverCert, serverKey := issue(t, serverCA, "receiver", x509.ExtKeyUsageServerAuth)
	clientCert, clientKey := issue(t, clientCA, "fieldwatch", x509.ExtKeyUsageClientAuth)
	files := map[string][]byte{"ca.pem": serverCA.CertPEM, "client.pem": clientCert, "client-key.pem": clientKey}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pair, err := tls.X509KeyPair(serverCert, serverKey)
	if err != nil {
		t.Fatal(err)
	}
	clients := clientCA.Pool()

	var peer atomic.Value // of string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.PeerCertificates) > 0 {
			peer.Store(r.TLS.PeerCertificates[0].Subject.CommonName)
		}
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clients}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	h := newHarness(t, nil)
	once := rules.Retry{Attempts: 1}
	ok := webhookRule("tls", &rules.WebhookAction{
		URL:      srv.URL,
		CAFile:   filepath.Join(dir, "ca.pem"),
		CertFile: filepath.Join(dir, "client.pem"),
		KeyFile:  filepath.Join(dir, "client-key.pem"),
		Retry:    once,
	})
	noClientCert := webhookRule("tls-no-client-cert", &rules.WebhookAction{URL: srv.URL, CAFile: filepath.Join(dir, "ca.pem"), Retry: once})
	noCA := webhookRule("tls-no-ca", &rules.WebhookAction{URL: srv.URL, Retry: once})

	done := newDoneCounter(t)
	for _, r := range []*rules.Rule{ok, noClientCert, noCA} {
		f := newFiring(r)
		h.deliver(t, f, done.fn(f.ID))
	}
	testenv.Eventually(t, 10*time.Second, "all done", func() bool { return done.total.Load() == 3 })
	if got := h.metric(t, "delivered_total", "tls", "webhook", 0); got != 1 {
		t.Errorf("delivered with the CA and a client certificate: %v, want 1", got)
	}
	if got, _ := peer.Load().(string); got != "fieldwatch" {
		t.Errorf("receiver saw client certificate %q", got)
	}
	failed := map[string]string{}
	for _, dl := range h.deadLetters(t) {
		failed[dl.Rule] = dl.Error
	}
	if len(failed) != 2 {
		t.Fatalf("dead letters %v, want the two without client certificate or CA", failed)
	}
	if !strings.Contains(failed["tls-no-ca"], "certificate") {
		t.Errorf("without the CA: %s", failed["tls-no-ca"])
	}
}

// TestWebhookCARotation rotates the receiver's CA on a real TLS server on
// 127.0.0.1: the client trusts the new CA once caFile holds it, without a
// restart, and keeps the last good bundle while the file is broken.
func TestWebhookCARotation(t *testing.T) {
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	oldCA, newCA := newTestCA(t, "old-ca"), newTestCA(t, "new-ca")
	serving := func(ca *testenv.CA) *tls.Certificate {
		certPEM, keyPEM := issue(t, ca, "receiver", x509.ExtKeyUsageServerAuth)
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return &pair
	}
	var current atomic.Pointer[tls.Certificate]
	current.Store(serving(oldCA))
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	// GetConfigForClient rather than GetCertificate: a client of
	// 127.0.0.1 sends no server name, and httptest's own certificate
	// would be served.
	srv.TLS = &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return &tls.Config{Certificates: []tls.Certificate{*current.Load()}}, nil
	}}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	// writeCA replaces the file, with a modification time that is sure to
	// differ from the last one.
	stamp := time.Now()
	writeCA := func(b []byte) {
		t.Helper()
		if err := os.WriteFile(caFile, b, 0o600); err != nil {
			t.Fatal(err)
		}
		stamp = stamp.Add(time.Second)
		if err := os.Chtimes(caFile, stamp, stamp); err != nil {
			t.Fatal(err)
		}
	}
	writeCA(oldCA.CertPEM)
	client, err := newHTTPClients(1).get(tlsFiles{ca: caFile})
	if err != nil {
		t.Fatal(err)
	}
	post := func() error {
		t.Helper()
		client.CloseIdleConnections() // a new handshake each time
		resp, err := client.Post(srv.URL, "application/json", strings.NewReader("{}"))
		if err != nil {
			return err
		}
		drainClose(resp.Body)
		return nil
	}

	if err := post(); err != nil {
		t.Fatalf("with the CA that signed the server's certificate: %v", err)
	}
	current.Store(serving(newCA))
	var verr *tls.CertificateVerificationError
	if err := post(); !errors.As(err, &verr) {
		t.Fatalf("a certificate from another CA: %v, want a verification error", err)
	}
	writeCA(newCA.CertPEM)
	if err := post(); err != nil {
		t.Fatalf("after the CA file was rotated: %v", err)
	}
	writeCA([]byte("not PEM"))
	if err := post(); err != nil {
		t.Fatalf("while the CA file is broken, the last good bundle stays: %v", err)
	}
	writeCA(oldCA.CertPEM)
	if err := post(); !errors.As(err, &verr) {
		t.Fatalf("after rotating back to the old CA: %v, want a verification error", err)
	}
}
