package testenv

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestCA checks the CA's certificates where they are used: a TLS server
// on 127.0.0.1 that requires a client certificate, and a client that
// trusts the CA, the CA loaded back from its PEM as a test cluster's.
func TestCA(t *testing.T) {
	ca, err := NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	serverCert, serverKey, err := ca.ServerCert("server")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(serverCert, serverKey)
	if err != nil {
		t.Fatal(err)
	}
	var peer atomic.Value // of string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		peer.Store(r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool()}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	tests := []struct {
		name     string
		issuer   func(t *testing.T) *CA
		wantPeer string
		wantErr  bool
	}{
		{name: "the CA", issuer: func(*testing.T) *CA { return ca }, wantPeer: "alice"},
		{name: "the CA loaded back", issuer: func(t *testing.T) *CA { return loadBack(t, ca) }, wantPeer: "alice"},
		{name: "another CA", issuer: func(t *testing.T) *CA {
			other, err := NewCA("other-ca")
			if err != nil {
				t.Fatal(err)
			}
			return other
		}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			certPEM, keyPEM, err := tc.issuer(t).ClientCert("alice")
			if err != nil {
				t.Fatal(err)
			}
			client, err := tls.X509KeyPair(certPEM, keyPEM)
			if err != nil {
				t.Fatal(err)
			}
			c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{client}}}}
			peer.Store("")
			resp, err := c.Get(srv.URL)
			if tc.wantErr {
				if err == nil {
					_ = resp.Body.Close()
					t.Fatal("a client certificate of another CA was accepted")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if got, _ := peer.Load().(string); got != tc.wantPeer {
				t.Errorf("the server saw %q, want %q", got, tc.wantPeer)
			}
		})
	}
}

// loadBack returns ca read back from its PEM certificate and key.
func loadBack(t *testing.T, ca *CA) *CA {
	t.Helper()
	keyDER, err := x509.MarshalECPrivateKey(ca.key)
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadCA(ca.CertPEM, pemBlock("EC PRIVATE KEY", keyDER))
	if err != nil {
		t.Fatal(err)
	}
	return loaded
}

func TestLoadCAErrors(t *testing.T) {
	ca, err := NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name          string
		cert, key     []byte
		wantSubstring string
	}{
		{name: "no certificate", cert: []byte("nope"), key: nil, wantSubstring: "no PEM CERTIFICATE block"},
		{name: "no key", cert: ca.CertPEM, key: []byte("nope"), wantSubstring: "CA key: no PEM block"},
		{name: "a certificate for a key", cert: ca.CertPEM, key: ca.CertPEM, wantSubstring: `PEM block "CERTIFICATE"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadCA(tc.cert, tc.key)
			if err == nil || !strings.Contains(err.Error(), tc.wantSubstring) {
				t.Errorf("LoadCA: %v, want an error with %q", err, tc.wantSubstring)
			}
		})
	}
}
