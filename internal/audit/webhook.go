package audit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"
)

// DefaultMaxBodyBytes bounds an EventList POST (32 MiB); the apiserver's
// --audit-webhook-truncate-max-batch-size (10 MB by default, when
// --audit-webhook-truncate-enabled) keeps its batches below it.
const DefaultMaxBodyBytes = 32 << 20

// WebhookOptions configure the receiver of the apiserver's audit webhook
// backend.
type WebhookOptions struct {
	// CertFile and KeyFile are the serving certificate and key (PEM),
	// loaded again when either file changes.
	CertFile, KeyFile string
	// ClientCAFile, when set, accepts requests with a client certificate
	// signed by one of its CAs (the apiserver's kubeconfig
	// client-certificate).
	ClientCAFile string
	// TokenFile, when set, accepts requests with this bearer token (the
	// kubeconfig's token); surrounding white space is ignored. At least one
	// of ClientCAFile and TokenFile is required.
	TokenFile string
	// MaxBodyBytes bounds a request body (default DefaultMaxBodyBytes);
	// larger ones get 413.
	MaxBodyBytes int64
	// Logger receives refusals and decoding errors (default slog.Default()).
	Logger *slog.Logger
	// Metrics receive the request counts (default unregistered ones).
	Metrics *Metrics
	// Accepting, when set, says whether events are wanted now. When it
	// returns false (a replica standing by for leadership), authenticated
	// requests get 503 with Retry-After: 0 and the connection is closed:
	// the apiserver's client retries at once (client-go retries a 5xx
	// with Retry-After up to ten times) on a new connection, which a
	// Service may route to the replica that accepts.
	Accepting func() bool
}

// Webhook receives audit.k8s.io/v1 EventList POSTs from the apiserver's
// webhook backend (batch or blocking mode) over HTTPS, on any path, and
// adds their events to a Sink. Only a client that presents one of the configured
// credentials may post: without credentials it gets 401, with wrong ones
// 403; both are counted and logged.
type Webhook struct {
	opts  WebhookOptions
	sink  Sink
	m     *Metrics
	log   *slog.Logger
	cert  *reloadable[*tls.Certificate]
	ca    *reloadable[*x509.CertPool]
	token *reloadable[[32]byte]
}

var _ http.Handler = &Webhook{}

// NewWebhook checks and loads the files of opts.
func NewWebhook(opts WebhookOptions, sink Sink) (*Webhook, error) {
	if opts.CertFile == "" || opts.KeyFile == "" {
		return nil, errors.New("audit webhook: a certificate and a key file are required (it serves HTTPS only)")
	}
	if opts.ClientCAFile == "" && opts.TokenFile == "" {
		return nil, errors.New("audit webhook: a client CA file or a token file is required, so that only the apiserver can post")
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	w := &Webhook{opts: opts, sink: sink, m: opts.Metrics, log: opts.Logger}
	var err error
	if w.cert, err = newReloadable(loadKeyPair, opts.CertFile, opts.KeyFile); err != nil {
		return nil, fmt.Errorf("audit webhook: certificate %s, key %s: %w", opts.CertFile, opts.KeyFile, err)
	}
	if opts.ClientCAFile != "" {
		if w.ca, err = newReloadable(loadCAs, opts.ClientCAFile); err != nil {
			return nil, fmt.Errorf("audit webhook: client CA file %s: %w", opts.ClientCAFile, err)
		}
	}
	if opts.TokenFile != "" {
		if w.token, err = newReloadable(loadToken, opts.TokenFile); err != nil {
			return nil, fmt.Errorf("audit webhook: token file %s: %w", opts.TokenFile, err)
		}
	}
	return w, nil
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

// TLSConfig returns the server's TLS configuration: the current serving
// certificate, and client certificates requested (verified by the
// handler, so that a wrong one gets a counted 403 rather than a failed
// handshake).
func (w *Webhook) TLSConfig() *tls.Config {
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			c, err := w.cert.get()
			if err != nil {
				w.log.Error("audit webhook: reload serving certificate; serving the previous one", "error", err)
			}
			return c, nil
		},
	}
	if w.ca != nil {
		cfg.ClientAuth = tls.RequestClientCert
	}
	return cfg
}

// Serve serves HTTPS on ln until ctx ends, then shuts down gracefully.
func (w *Webhook) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           w,
		TLSConfig:         w.TLSConfig(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(w.log.Handler(), slog.LevelDebug),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	select {
	case err := <-errc:
		return fmt.Errorf("audit webhook: %w", err)
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shut); err != nil {
		return fmt.Errorf("audit webhook: shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("audit webhook: %w", err)
	}
	return nil
}

// ListenAndServe listens on addr (for example ":8443") and serves until
// ctx ends.
func (w *Webhook) ListenAndServe(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("audit webhook: %w", err)
	}
	return w.Serve(ctx, ln)
}

// ServeHTTP authenticates the request and adds the events of its
// EventList body to the sink.
func (w *Webhook) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		rw.Header().Set("Allow", http.MethodPost)
		w.refuse(rw, r, http.StatusMethodNotAllowed, "only POST")
		return
	}
	if code, why := w.authenticate(r); code != 0 {
		if code == http.StatusUnauthorized {
			rw.Header().Set("WWW-Authenticate", `Bearer realm="fieldwatch-audit"`)
		}
		w.refuse(rw, r, code, why)
		return
	}
	if w.opts.Accepting != nil && !w.opts.Accepting() {
		rw.Header().Set("Retry-After", "0")
		rw.Header().Set("Connection", "close")
		w.m.webhookCode(http.StatusServiceUnavailable)
		http.Error(rw, "not accepting audit events: standing by", http.StatusServiceUnavailable)
		return
	}
	body := http.MaxBytesReader(rw, r.Body, w.opts.MaxBodyBytes)
	var recs []Record
	n, err := DecodeEventList(body, func(rec Record) { recs = append(recs, rec) })
	// What decoded before an error is kept: the events are whole, and a
	// retry of the same batch is deduplicated by auditID.
	w.sink.Add(SourceWebhook, recs, n-len(recs))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			w.refuse(rw, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("audit event list larger than %d bytes", tooLarge.Limit))
			return
		}
		w.m.decodeErrorsBy[SourceWebhook].Inc()
		w.refuse(rw, r, http.StatusBadRequest, err.Error())
		return
	}
	w.m.webhookCode(http.StatusOK)
	rw.WriteHeader(http.StatusOK)
}

// authenticate returns 0 for a request with valid credentials, 401 for
// one with none, 403 for one with wrong ones.
func (w *Webhook) authenticate(r *http.Request) (int, string) {
	presented := false
	if auth := r.Header.Get("Authorization"); auth != "" {
		presented = true
		tok, ok := bearerToken(auth)
		if ok && w.token != nil {
			want, err := w.token.get()
			if err != nil {
				w.log.Error("audit webhook: reload token file; using the previous token", "error", err)
			}
			got := sha256.Sum256([]byte(tok))
			if subtle.ConstantTimeCompare(got[:], want[:]) == 1 {
				return 0, ""
			}
		}
	}
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		presented = true
		if w.ca != nil && w.verifyClient(r.TLS.PeerCertificates) {
			return 0, ""
		}
	}
	if !presented {
		return http.StatusUnauthorized, "no credentials"
	}
	return http.StatusForbidden, "wrong credentials"
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

func (w *Webhook) verifyClient(chain []*x509.Certificate) bool {
	pool, err := w.ca.get()
	if err != nil {
		w.log.Error("audit webhook: reload client CA file; using the previous CAs", "error", err)
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

func (w *Webhook) refuse(rw http.ResponseWriter, r *http.Request, code int, why string) {
	w.m.webhookCode(code)
	w.log.Warn("audit webhook: refused a request", "code", code, "reason", why, "remote", r.RemoteAddr)
	http.Error(rw, why, code)
}
