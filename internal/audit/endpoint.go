package audit

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// endpoint is what the audit webhook receiver and the admission endpoint
// share: a serving certificate reloaded when its files change, the
// optional authentication of clients (a certificate of a client CA that
// names one of the allowed names, or a bearer token), the rate-limited
// log of refusals, and the peers its records are forwarded to.
type endpoint struct {
	// what names the endpoint in log lines ("audit webhook"), realm in
	// WWW-Authenticate ("fieldwatch-audit").
	what, realm string
	log         *slog.Logger
	refusals    *refusalLog
	cert        *reloadable[*tls.Certificate]
	ca          *reloadable[*x509.CertPool]
	names       map[string]bool
	token       *reloadable[[32]byte]
	peers       *peers // nil without peers

	// code counts a response by its code; refusedBy a refused client by
	// reason; peerOK and peerFailed the forwards to peers.
	code               func(code int)
	refusedBy          map[string]prometheus.Counter
	peerOK, peerFailed prometheus.Counter
}

// endpointFiles are the files of an endpoint.
type endpointFiles struct {
	certFile, keyFile, clientCAFile, tokenFile string
	clientNames                                []string
}

// load checks and loads the files of e.
func (e *endpoint) load(f endpointFiles) error {
	if f.certFile == "" || f.keyFile == "" {
		return fmt.Errorf("%s: a certificate and a key file are required (it serves HTTPS only)", e.what)
	}
	names, err := clientNames(e.what, f.clientCAFile, f.clientNames)
	if err != nil {
		return err
	}
	e.names = names
	if e.cert, err = newReloadable(loadKeyPair, f.certFile, f.keyFile); err != nil {
		return fmt.Errorf("%s: certificate %s, key %s: %w", e.what, f.certFile, f.keyFile, err)
	}
	if f.clientCAFile != "" {
		if e.ca, err = newReloadable(loadCAs, f.clientCAFile); err != nil {
			return fmt.Errorf("%s: client CA file %s: %w", e.what, f.clientCAFile, err)
		}
	}
	if f.tokenFile != "" {
		if e.token, err = newReloadable(loadToken, f.tokenFile); err != nil {
			return fmt.Errorf("%s: token file %s: %w", e.what, f.tokenFile, err)
		}
	}
	return nil
}

// clientNames checks the names a client certificate may carry: required
// with a client CA, and only with one.
func clientNames(what, caFile string, list []string) (map[string]bool, error) {
	if caFile == "" {
		if len(list) > 0 {
			return nil, fmt.Errorf("%s: client names without a client CA file: they name the certificates of that CA to accept", what)
		}
		return nil, nil
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("%s: the client CA file %s needs the names of the apiserver's client certificate to accept (its CN, or a DNS or URI SAN): "+
			"a CA signs other clients too, and any of them could post requests naming anyone", what, caFile)
	}
	names := make(map[string]bool, len(list))
	for _, n := range list {
		if n == "" || strings.TrimSpace(n) != n {
			return nil, fmt.Errorf("%s: client name %q: empty or with surrounding white space", what, n)
		}
		names[n] = true
	}
	return names, nil
}

func loadKeyPair(data [][]byte) (*tls.Certificate, error) {
	c, err := tls.X509KeyPair(data[0], data[1])
	return &c, err
}

func loadCAs(data [][]byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data[0]) {
		return nil, errors.New("no PEM certificate in it")
	}
	return pool, nil
}

func loadToken(data [][]byte) ([32]byte, error) {
	tok := bytes.TrimSpace(data[0])
	if len(tok) == 0 {
		return [32]byte{}, errors.New("empty token")
	}
	return sha256.Sum256(tok), nil
}

// authenticates reports whether clients must authenticate.
func (e *endpoint) authenticates() bool { return e.ca != nil || e.token != nil }

// TLSConfig returns the server's TLS configuration: the current serving
// certificate, and client certificates requested (verified by the
// handler, so that a wrong one gets a counted 403 rather than a failed
// handshake): the apiserver's, or a peer's.
func (e *endpoint) TLSConfig() *tls.Config {
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			c, err := e.cert.get()
			if err != nil {
				e.log.Error(e.what+": reload serving certificate; serving the previous one", "error", err)
			}
			return c, nil
		},
	}
	if e.ca != nil || e.peers != nil {
		cfg.ClientAuth = tls.RequestClientCert
	}
	return cfg
}

// authenticate returns 0 for a request with valid credentials, 401 for
// one with none, 403 for one with wrong ones; reason says which (a
// RefusedReason) and client is the name of a refused certificate.
func (e *endpoint) authenticate(r *http.Request) (code int, reason, client string) {
	reason = RefusedNoCredentials
	if auth := r.Header.Get("Authorization"); auth != "" {
		reason = RefusedToken
		tok, ok := bearerToken(auth)
		if ok && e.token != nil {
			want, err := e.token.get()
			if err != nil {
				e.log.Error(e.what+": reload token file; using the previous token", "error", err)
			}
			got := sha256.Sum256([]byte(tok))
			if subtle.ConstantTimeCompare(got[:], want[:]) == 1 {
				return 0, "", ""
			}
		}
	}
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		leaf := r.TLS.PeerCertificates[0]
		switch {
		case e.ca == nil || !e.verifyClient(r.TLS.PeerCertificates):
			reason = RefusedCertificate
		case !e.nameAllowed(leaf):
			reason = RefusedCertificateName
		default:
			return 0, "", ""
		}
		client = leaf.Subject.CommonName
	}
	if reason == RefusedNoCredentials {
		return http.StatusUnauthorized, reason, ""
	}
	return http.StatusForbidden, reason, client
}

// refuseUnauthenticated answers a request that authenticate refused.
func (e *endpoint) refuseUnauthenticated(rw http.ResponseWriter, r *http.Request, code int, reason, client string) {
	if code == http.StatusUnauthorized {
		rw.Header().Set("WWW-Authenticate", `Bearer realm="`+e.realm+`"`)
	}
	e.refusedBy[reason].Inc()
	why := "wrong credentials"
	if code == http.StatusUnauthorized {
		why = "no credentials"
	}
	e.refuseClient(rw, r, code, why, reason, client)
}

// nameAllowed reports whether c names one of the client names: as its
// common name or a DNS or URI subject alternative name.
func (e *endpoint) nameAllowed(c *x509.Certificate) bool {
	if e.names[c.Subject.CommonName] {
		return true
	}
	for _, n := range c.DNSNames {
		if e.names[n] {
			return true
		}
	}
	for _, u := range c.URIs {
		if e.names[u.String()] {
			return true
		}
	}
	return false
}

// bearerToken returns the credentials of an Authorization header of the
// Bearer scheme, whose name is case-insensitive (RFC 7235: "bearer" is
// Bearer too).
func bearerToken(auth string) (string, bool) {
	scheme, tok, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(tok), true
}

func (e *endpoint) verifyClient(chain []*x509.Certificate) bool {
	pool, err := e.ca.get()
	if err != nil {
		e.log.Error(e.what+": reload client CA file; using the previous CAs", "error", err)
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err = chain[0].Verify(x509.VerifyOptions{
		Roots:         pool,
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	return err == nil
}

// isOwnCertificate reports whether chain's leaf is the endpoint's serving
// certificate.
func (e *endpoint) isOwnCertificate(chain []*x509.Certificate) bool {
	own, err := e.cert.get()
	if err != nil || own == nil || len(own.Certificate) == 0 || len(chain) == 0 {
		return false
	}
	return bytes.Equal(chain[0].Raw, own.Certificate[0])
}

func (e *endpoint) refuse(rw http.ResponseWriter, r *http.Request, code int, why string) {
	e.refuseClient(rw, r, code, why, "", "")
}

// refuseClient answers code, counts it and logs it, unless a refusal of
// the same code and reason was logged less than RefusalLogInterval ago
// (the next line says how many were not).
func (e *endpoint) refuseClient(rw http.ResponseWriter, r *http.Request, code int, why, reason, client string) {
	e.code(code)
	if suppressed, ok := e.refusals.allow(fmt.Sprint(code, reason), time.Now()); ok {
		attrs := []any{"code", code, "reason", truncate(why, 512), "remote", r.RemoteAddr}
		if reason != "" {
			attrs = append(attrs, "refused", reason)
		}
		if client != "" {
			attrs = append(attrs, "client", truncate(client, 256))
		}
		if suppressed > 0 {
			attrs = append(attrs, "suppressed", suppressed)
		}
		e.log.Warn(e.what+": refused a request", attrs...)
	}
	http.Error(rw, why, code)
}
