package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority for tests: it issues server certificates
// for 127.0.0.1 and client certificates, for the TLS endpoints that tests
// stand up (an audit webhook receiver, a webhook action's receiver) and
// the users of a test cluster. It is the one certificate minter of the
// tests: they do not call x509.CreateCertificate themselves.
type CA struct {
	// CertPEM is the CA certificate, to trust.
	CertPEM []byte
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
}

// NewCA creates a CA valid for a day.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{CertPEM: pemBlock("CERTIFICATE", der), cert: cert, key: key}, nil
}

// LoadCA reads a CA from its PEM certificate and ECDSA key (SEC 1 "EC
// PRIVATE KEY" or PKCS #8): a cluster's own CA, to issue its users'
// client certificates.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("CA certificate: no PEM CERTIFICATE block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	block, _ = pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("CA key: no PEM block")
	}
	var key *ecdsa.PrivateKey
	switch block.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "PRIVATE KEY":
		var k any
		k, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		if err == nil {
			var ok bool
			if key, ok = k.(*ecdsa.PrivateKey); !ok {
				err = fmt.Errorf("a %T, want an ECDSA key", k)
			}
		}
	default:
		err = fmt.Errorf("PEM block %q, want an EC PRIVATE KEY or a PRIVATE KEY", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	return &CA{CertPEM: pemBlock("CERTIFICATE", cert.Raw), cert: cert, key: key}, nil
}

// Pool returns a certificate pool that holds the CA only: for a server
// that checks client certificates, or a client that checks a server's.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// ServerCert issues a serving certificate for 127.0.0.1 and localhost.
func (ca *CA) ServerCert(name string) (certPEM, keyPEM []byte, err error) {
	return ca.issue(name, x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, []string{"localhost"})
}

// ClientCert issues a client certificate whose common name is name.
func (ca *CA) ClientCert(name string) (certPEM, keyPEM []byte, err error) {
	return ca.issue(name, x509.ExtKeyUsageClientAuth, nil, nil)
}

// ClientCertSANs issues a client certificate whose common name is name,
// with DNS and URI subject alternative names.
func (ca *CA) ClientCertSANs(name string, dns []string, uris []*url.URL) (certPEM, keyPEM []byte, err error) {
	return ca.issue(name, x509.ExtKeyUsageClientAuth, nil, dns, uris...)
}

func (ca *CA) issue(name string, usage x509.ExtKeyUsage, ips []net.IP, dns []string, uris ...*url.URL) ([]byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		IPAddresses:  ips,
		DNSNames:     dns,
		URIs:         uris,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("certificate for %s: %w", name, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pemBlock("CERTIFICATE", der), pemBlock("EC PRIVATE KEY", keyDER), nil
}

// WriteFiles writes data into dir under name for each name/data pair and
// returns the paths in the same order.
func WriteFiles(dir string, files ...NamedData) ([]string, error) {
	paths := make([]string, len(files))
	for i, f := range files {
		paths[i] = filepath.Join(dir, f.Name)
		if err := os.WriteFile(paths[i], f.Data, 0o600); err != nil {
			return nil, err
		}
	}
	return paths, nil
}

// NamedData is a file's name and contents for WriteFiles.
type NamedData struct {
	Name string
	Data []byte
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// AuditTLS is the TLS material of an audit webhook under test: the
// receiver's serving certificate and the client certificate the apiserver
// presents, issued by one CA, with the files the receiver reads written to
// a directory.
type AuditTLS struct {
	// CAPEM is the CA: the apiserver trusts it for the receiver, the
	// receiver for the apiserver's client certificate. CA issues more
	// certificates of it (other clients of the same CA).
	CAPEM []byte
	CA    *CA
	// ClientCertPEM and ClientKeyPEM are the apiserver's client certificate,
	// whose common name is ClientName (for the receiver's client names).
	ClientCertPEM, ClientKeyPEM []byte
	ClientName                  string
	// CertFile, KeyFile and CAFile are the receiver's serving certificate,
	// its key and the CA it checks client certificates against.
	CertFile, KeyFile, CAFile string
}

// NewAuditTLS issues the certificates of an audit webhook (a CA named
// name, a serving certificate for 127.0.0.1, a client certificate for
// "kube-apiserver") and writes the receiver's files into dir.
func NewAuditTLS(dir, name string) (*AuditTLS, error) {
	ca, err := NewCA(name)
	if err != nil {
		return nil, err
	}
	serverCert, serverKey, err := ca.ServerCert("fieldwatch-audit")
	if err != nil {
		return nil, err
	}
	const clientName = "kube-apiserver"
	clientCert, clientKey, err := ca.ClientCert(clientName)
	if err != nil {
		return nil, err
	}
	paths, err := WriteFiles(dir,
		NamedData{Name: "tls.crt", Data: serverCert},
		NamedData{Name: "tls.key", Data: serverKey},
		NamedData{Name: "client-ca.crt", Data: ca.CertPEM})
	if err != nil {
		return nil, err
	}
	return &AuditTLS{CAPEM: ca.CertPEM, CA: ca, ClientCertPEM: clientCert, ClientKeyPEM: clientKey, ClientName: clientName,
		CertFile: paths[0], KeyFile: paths[1], CAFile: paths[2]}, nil
}

// Webhook is the apiserver's side: it posts to url, trusting the CA and
// presenting the client certificate, in batches sent at least every 100ms
// (AuditWebhook.BatchMaxWait's default), so that a test's payloads wait
// little for their writers' names.
func (a *AuditTLS) Webhook(url string) *AuditWebhook {
	return &AuditWebhook{URL: url, CAPEM: a.CAPEM, ClientCertPEM: a.ClientCertPEM, ClientKeyPEM: a.ClientKeyPEM}
}
