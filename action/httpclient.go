package action

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fieldwatch/fieldwatch/action/internal/directhttp"
	"github.com/fieldwatch/fieldwatch/rules"
)

// tlsFiles is a webhook's TLS configuration: the files of a CA bundle and
// of a client certificate. Webhooks with the same files share one
// http.Transport, so one pool of kept-alive connections per receiver.
type tlsFiles struct {
	ca, cert, key string
}

// webhookWriteBuffer is the size of each connection's write buffer: a
// request's headers and a body of up to about 16 KB leave in one write,
// where Go's default of 4 KiB splits a 4 KB payload in two (and a
// connection held by each of 32 workers costs 512 KiB in all).
// BenchmarkWebhook4KB measures both sizes side by side.
var webhookWriteBuffer = 16 << 10

// directPosts sends a webhook's POSTs through directhttp where its URL
// allows; benchmarks turn it off to compare (BenchmarkWebhook4KB).
var directPosts = true

// httpClients holds one net/http client and one directhttp client per
// distinct tlsFiles.
type httpClients struct {
	idlePerHost int

	mu     sync.Mutex
	m      map[tlsFiles]*http.Client
	direct map[tlsFiles]*directhttp.Client
}

func newHTTPClients(workers int) *httpClients {
	// Several webhook actions may post to the same host through one
	// transport: keep room for more idle connections than one action's
	// workers, so that none is closed only to be dialled again.
	idle := max(4*workers, 64)
	return &httpClients{idlePerHost: idle, m: map[tlsFiles]*http.Client{}, direct: map[tlsFiles]*directhttp.Client{}}
}

// directTarget returns directhttp's target for a webhook's URL raw, or nil
// when its POSTs go through net/http (directhttp.Client.Target).
func (c *httpClients) directTarget(raw string, files tlsFiles) (*directhttp.Target, error) {
	if !directPosts {
		return nil, nil
	}
	c.mu.Lock()
	dc, ok := c.direct[files]
	if !ok {
		dc = directhttp.New(directhttp.Options{MaxIdle: c.idlePerHost, WriteBuffer: webhookWriteBuffer, TLSConfig: files.config})
		c.direct[files] = dc
	}
	c.mu.Unlock()
	return dc.Target(raw)
}

// get returns the client for files, building it on first use.
func (c *httpClients) get(files tlsFiles) (*http.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := c.m[files]; ok {
		return cl, nil
	}
	conf, err := files.config()
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   10 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		TLSClientConfig:       conf,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          0, // no global bound; per host below
		MaxIdleConnsPerHost:   c.idlePerHost,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		WriteBufferSize:       webhookWriteBuffer,
	}
	cl := &http.Client{
		Transport: tr,
		// A redirect is reported as the failure it is: following it would
		// re-send a signed body to another URL (or, after a 301/302, turn
		// the POST into a GET).
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	c.m[files] = cl
	return cl, nil
}

// closeIdle closes the idle connections of every client.
func (c *httpClients) closeIdle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cl := range c.m {
		cl.CloseIdleConnections()
	}
	for _, dc := range c.direct {
		dc.CloseIdle()
	}
}

// config builds the TLS configuration: the CA bundle trusted on top of the
// system roots, and the client certificate, both re-read when their files
// change.
func (f tlsFiles) config() (*tls.Config, error) {
	if f == (tlsFiles{}) {
		return nil, nil
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.ca != "" {
		ca := &caBundle{file: f.ca}
		if _, err := ca.get(); err != nil {
			return nil, err
		}
		// RootCAs cannot change once the transport has the config: the
		// server's chain is verified by VerifyConnection instead, against
		// the bundle as it is at each handshake (the crypto/tls pattern
		// for custom verification; nothing is skipped).
		conf.InsecureSkipVerify = true
		conf.VerifyConnection = ca.verify
	}
	if f.cert != "" {
		kp := &keyPair{certFile: f.cert, keyFile: f.key}
		if _, err := kp.get(nil); err != nil {
			return nil, err
		}
		conf.GetClientCertificate = kp.get
	}
	return conf, nil
}

// caBundle is a PEM bundle of CA certificates trusted on top of the system
// roots, loaded from a file and loaded again when it changes (a mounted
// Secret or ConfigMap is updated in place when the CA rotates).
type caBundle struct {
	file string

	mu    sync.Mutex
	stamp fileStamp
	pool  *x509.CertPool
}

// get returns the trusted pool, reading the file again when its
// modification time or size changed. A file that cannot be read or holds
// no certificate keeps the last good pool (a rotation half done); there is
// an error only when there never was one.
func (c *caBundle) get() (*x509.CertPool, error) {
	st, err := stampOf(c.file)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil && c.pool != nil && st.same(c.stamp) {
		return c.pool, nil
	}
	pool, err := c.load(err)
	if err != nil {
		if c.pool != nil {
			return c.pool, nil
		}
		return nil, err
	}
	c.pool, c.stamp = pool, st
	return pool, nil
}

// load reads the bundle into a copy of the system roots; statErr is the
// error of the stat that preceded it.
func (c *caBundle) load(statErr error) (*x509.CertPool, error) {
	if statErr != nil {
		return nil, fmt.Errorf("webhook CA: %w", statErr)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	pem, err := os.ReadFile(c.file)
	if err != nil {
		return nil, fmt.Errorf("webhook CA: %w", err)
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("webhook CA: no PEM certificate in %s", c.file)
	}
	return pool, nil
}

// verify checks the server's chain and name against the bundle as it is
// now (tls.Config.VerifyConnection).
func (c *caBundle) verify(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("webhook: the server sent no certificate")
	}
	pool, err := c.get()
	if err != nil {
		return err
	}
	opts := x509.VerifyOptions{Roots: pool, DNSName: cs.ServerName, Intermediates: x509.NewCertPool()}
	for _, cert := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(cert)
	}
	if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
		// As crypto/tls reports its own verification's failures.
		return &tls.CertificateVerificationError{UnverifiedCertificates: cs.PeerCertificates, Err: err}
	}
	return nil
}

// keyPair is a client certificate loaded from files and loaded again when
// either file changes (cert-manager and the like rotate them in place).
type keyPair struct {
	certFile, keyFile string

	mu      sync.Mutex
	stamp   [2]fileStamp
	current *tls.Certificate
}

type fileStamp struct {
	mod  time.Time
	size int64
}

func (s fileStamp) same(o fileStamp) bool {
	return s.mod.Equal(o.mod) && s.size == o.size
}

func stampOf(path string) (fileStamp, error) {
	st, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{mod: st.ModTime(), size: st.Size()}, nil
}

func (kp *keyPair) get(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	cs, err := stampOf(kp.certFile)
	if err != nil {
		return nil, fmt.Errorf("webhook client certificate: %w", err)
	}
	ks, err := stampOf(kp.keyFile)
	if err != nil {
		return nil, fmt.Errorf("webhook client key: %w", err)
	}
	kp.mu.Lock()
	defer kp.mu.Unlock()
	if kp.current != nil && kp.stamp[0].same(cs) && kp.stamp[1].same(ks) {
		return kp.current, nil
	}
	c, err := tls.LoadX509KeyPair(kp.certFile, kp.keyFile)
	if err != nil {
		if kp.current != nil {
			return kp.current, nil // half-rotated: keep the last good pair
		}
		return nil, fmt.Errorf("webhook client certificate: %w", err)
	}
	kp.current, kp.stamp = &c, [2]fileStamp{cs, ks}
	return kp.current, nil
}

// fileRecheck bounds how long a cached file's content is trusted when its
// modification time and size stay the same.
const fileRecheck = time.Minute

// fileCache is a small secret file (a bearer token, a signing secret): read
// again when its modification time or size changes, and at least every
// fileRecheck. Surrounding white space is trimmed.
type fileCache struct {
	path string

	mu     sync.Mutex
	stamp  fileStamp
	readAt time.Time
	data   []byte
}

func (c *fileCache) get() ([]byte, error) {
	if readsCredentials(c.path) {
		return nil, permanent(fmt.Errorf("%s leads to the service account's credentials: refused", c.path))
	}
	st, err := stampOf(c.path)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.data != nil && st.same(c.stamp) && time.Since(c.readAt) < fileRecheck {
		return c.data, nil
	}
	b, err := os.ReadFile(c.path)
	if err != nil {
		return nil, err
	}
	b = []byte(strings.TrimSpace(string(b)))
	if len(b) == 0 {
		return nil, fmt.Errorf("%s is empty", c.path)
	}
	c.data, c.stamp, c.readAt = b, st, time.Now()
	return c.data, nil
}

// readsCredentials reports whether path, symbolic links followed, is in
// rules.CredentialDirs: the loader refuses such paths as written, and a
// link (or a relative path) must not lead there either.
func readsCredentials(path string) bool {
	abs, err := filepath.Abs(path)
	if err != nil {
		return false
	}
	if resolved, err := filepath.EvalSymlinks(abs); err == nil {
		abs = resolved
	}
	return rules.IsCredentialPath(abs)
}
