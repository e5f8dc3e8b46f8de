package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/fieldwatch/fieldwatch/internal/connlimit"
)

// DefaultMaxBodyBytes bounds an EventList POST (32 MiB); the apiserver's
// --audit-webhook-truncate-max-batch-size (10 MB by default, when
// --audit-webhook-truncate-enabled) keeps its batches below it.
const DefaultMaxBodyBytes = 32 << 20

// DefaultMaxConcurrentRequests is how many EventList POSTs the webhook
// reads at once by default: each may hold a body's events and an item of
// MaxEventJSONBytes.
const DefaultMaxConcurrentRequests = 4

// WebhookOptions configure the receiver of the apiserver's audit webhook
// backend.
type WebhookOptions struct {
	// CertFile and KeyFile are the serving certificate and key (PEM),
	// loaded again when either file changes.
	CertFile, KeyFile string
	// ClientCAFile, when set, accepts requests with a client certificate
	// signed by one of its CAs, for client authentication, that names one
	// of ClientNames (the apiserver's kubeconfig client-certificate).
	ClientCAFile string
	// ClientNames are the identities a client certificate may name: its
	// subject common name or one of its DNS or URI subject alternative
	// names, compared exactly. Required with ClientCAFile: a CA signs other
	// clients too (a cluster CA signs every kubelet's and every approved
	// CSR's), and any of them could otherwise post audit events naming
	// anyone.
	ClientNames []string
	// TokenFile, when set, accepts requests with this bearer token (the
	// kubeconfig's token); surrounding white space is ignored. At least one
	// of ClientCAFile and TokenFile is required.
	TokenFile string
	// MaxBodyBytes bounds a request body (default DefaultMaxBodyBytes);
	// larger ones get 413, as do those with an event of more than
	// MaxEventJSONBytes or whose events would keep more than a quarter of
	// it (Record plus keptBytes each). Nothing of a refused request is
	// kept.
	MaxBodyBytes int64
	// MaxConcurrentRequests bounds the requests read at once (default
	// DefaultMaxConcurrentRequests); more get 429 with Retry-After: 1,
	// which the apiserver's webhook client retries.
	MaxConcurrentRequests int
	// Logger receives refusals and decoding errors (default slog.Default()).
	Logger *slog.Logger
	// Metrics receive the request counts (default unregistered ones).
	Metrics *Metrics
	// Accepting, when set, says whether events are wanted now. When it
	// returns false (a replica still starting), authenticated requests
	// get 503 with Retry-After: 0 and the connection is closed: the
	// apiserver's client retries at once (client-go retries a 5xx with
	// Retry-After up to ten times) on a new connection, which a Service
	// may route to another replica.
	Accepting func() bool
	// Peers are the other replicas' receivers, host:port (a name may
	// resolve to several addresses, such as a headless Service's; one
	// that leads back to this receiver is left out). Each event list the
	// apiserver posts here is forwarded to them, on PeerPath, before it
	// is acknowledged: every replica holds every event, so that the one
	// that takes over after a failover attributes what it delivers. A
	// peer is a client or server that presents this receiver's serving
	// certificate: every replica has the same.
	Peers []string
	// PeerTimeout bounds the forwarding of one event list (default
	// DefaultPeerTimeout).
	PeerTimeout time.Duration

	// MaxConnections bounds the connections Serve holds open at once
	// (default connlimit.DefaultMaxConns): a new one past it closes the one
	// idle the longest (connlimit.Listener). IdleTimeout closes a
	// connection without a request this long (default
	// connlimit.DefaultIdleTimeout). ConnMetrics count them (default
	// unregistered ones).
	MaxConnections int
	IdleTimeout    time.Duration
	ConnMetrics    *connlimit.Metrics
}

// ServerName names the receiver in the connection metrics
// (fieldwatch_http_connections{server="audit-webhook"}).
const ServerName = "audit-webhook"

// The receiver's deadlines: a request's header, its header and body (a
// batch of up to MaxBodyBytes from an apiserver far away), and its
// response, whose deadline runs from the end of the header.
const (
	webhookReadHeaderTimeout = 10 * time.Second
	webhookReadTimeout       = 2 * time.Minute
	webhookWriteTimeout      = webhookReadTimeout + 30*time.Second
)

// Webhook receives audit.k8s.io/v1 EventList POSTs from the apiserver's
// webhook backend (batch or blocking mode) over HTTPS, on any path, and
// adds their events to a Sink. Only a client that presents one of the
// configured credentials may post: without credentials it gets 401, with
// wrong ones (a token that is not the one, a certificate that the client CA
// did not sign or that names none of ClientNames) 403; each is counted by
// reason and logged, at most once per reason every RefusalLogInterval.
//
// The webhook accepts only the apiserver: a client certificate of the
// client CA that names one of WebhookOptions.ClientNames, or the token.
// Whoever can post can name anyone as the author of a change. What a post
// may cost is bounded: MaxConcurrentRequests read at once (more get 429),
// MaxBodyBytes of body of which a quarter of events kept, MaxEventJSONBytes
// of JSON and MaxEventBytes kept an event (a larger event is dropped and
// counted), all or nothing per post; the Index bounds its events by count,
// bytes (IndexOptions.MaxBytes) and age.
//
// The apiserver side: --audit-policy-file, and --audit-webhook-config-file
// (a kubeconfig whose cluster.server is the receiver, with its CA and the
// client certificate or token the receiver checks) or --audit-log-path
// (--audit-log-format=json, the default; written synchronously). The batch
// webhook backend (the default mode) sends a batch when it has
// --audit-webhook-batch-max-size events (400) or after
// --audit-webhook-batch-max-wait, 30s by default: longer than the
// Attributor's wait, so set it to about 1s.
// --audit-webhook-truncate-enabled keeps batches under 10 MB (below
// DefaultMaxBodyBytes) and events under 100 KB (below MaxEventJSONBytes) by
// dropping the bodies of large events, which then match by window instead
// of exactly.
type Webhook struct {
	*endpoint
	opts  WebhookOptions
	sink  Sink
	m     *Metrics
	slots chan struct{} // one per request being read
}

var _ http.Handler = &Webhook{}

// NewWebhook checks and loads the files of opts.
func NewWebhook(opts WebhookOptions, sink Sink) (*Webhook, error) {
	if opts.ClientCAFile == "" && opts.TokenFile == "" && opts.CertFile != "" && opts.KeyFile != "" {
		return nil, errors.New("audit webhook: a client CA file or a token file is required, so that only the apiserver can post")
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.MaxConcurrentRequests <= 0 {
		opts.MaxConcurrentRequests = DefaultMaxConcurrentRequests
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = connlimit.DefaultIdleTimeout
	}
	m := opts.Metrics
	e := &endpoint{what: "audit webhook", realm: "fieldwatch-audit", log: opts.Logger, refusals: newRefusalLog(RefusalLogInterval),
		code: m.webhookCode, refusedBy: m.refusedBy, peerOK: m.peerOK, peerFailed: m.peerFailed}
	if err := e.load(endpointFiles{certFile: opts.CertFile, keyFile: opts.KeyFile, clientCAFile: opts.ClientCAFile,
		tokenFile: opts.TokenFile, clientNames: opts.ClientNames}); err != nil {
		return nil, err
	}
	w := &Webhook{endpoint: e, opts: opts, sink: sink, m: m, slots: make(chan struct{}, opts.MaxConcurrentRequests)}
	if len(opts.Peers) > 0 {
		var err error
		if e.peers, err = newPeers(e, opts.Peers, opts.PeerTimeout); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// Serve serves HTTPS on ln until ctx ends, then shuts down gracefully. It
// holds at most MaxConnections connections of ln, and closes idle ones
// after IdleTimeout.
func (w *Webhook) Serve(ctx context.Context, ln net.Listener) error {
	limited := connlimit.NewListener(ln, connlimit.Options{
		Name: ServerName, Max: w.opts.MaxConnections, Metrics: w.opts.ConnMetrics, Logger: w.log,
	})
	srv := &http.Server{
		Handler:           w,
		TLSConfig:         w.TLSConfig(),
		ReadHeaderTimeout: webhookReadHeaderTimeout,
		ReadTimeout:       webhookReadTimeout,
		WriteTimeout:      webhookWriteTimeout,
		IdleTimeout:       w.opts.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(w.log.Handler(), slog.LevelDebug),
	}
	limited.Hook(srv)
	ln = limited
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
	if r.URL.Path == PeerPath {
		w.servePeer(rw, r)
		return
	}
	if code, reason, client := w.authenticate(r); code != 0 {
		w.refuseUnauthenticated(rw, r, code, reason, client)
		return
	}
	if !w.accepting(rw) {
		return
	}
	if !w.takeSlot(rw, r) {
		return
	}
	defer w.releaseSlot()
	body := http.MaxBytesReader(rw, r.Body, w.opts.MaxBodyBytes)
	batch := requestEvents{limit: w.opts.MaxBodyBytes / 4}
	counts, err := DecodeEventList(body, batch.add)
	if err != nil {
		// Nothing of a refused request is kept: the apiserver does not
		// retry a 400 or a 413, and what it retries comes whole.
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			w.refuse(rw, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("audit event list larger than %d bytes", tooLarge.Limit))
		case errors.Is(err, ErrEventJSONTooLarge), errors.Is(err, errRequestKeepsTooMuch):
			w.refuse(rw, r, http.StatusRequestEntityTooLarge, err.Error())
		default:
			w.m.decodeErrorsBy[SourceWebhook].Inc()
			w.refuse(rw, r, http.StatusBadRequest, err.Error())
		}
		return
	}
	if counts.TooLarge > 0 {
		w.m.tooLargeBy[SourceWebhook].Add(float64(counts.TooLarge))
	}
	ignored := counts.Items - counts.TooLarge - batch.n
	if len(batch.chunks) == 0 && ignored > 0 {
		w.sink.Add(SourceWebhook, nil, ignored)
	}
	var forward []Record
	if w.peers != nil && batch.n > 0 {
		forward = make([]Record, 0, batch.n)
		for _, recs := range batch.chunks {
			forward = append(forward, recs...)
		}
	}
	for _, recs := range batch.chunks {
		w.sink.Add(SourceWebhook, recs, ignored)
		ignored = 0
	}
	if forward != nil {
		// Acknowledged only once the peers hold the events too: a
		// batch the apiserver sees acknowledged outlives this process.
		w.peers.forward(r.Context(), forward)
	}
	w.m.webhookCode(http.StatusOK)
	rw.WriteHeader(http.StatusOK)
}

// accepting answers 503 and returns false while Accepting says no.
func (w *Webhook) accepting(rw http.ResponseWriter) bool {
	if w.opts.Accepting == nil || w.opts.Accepting() {
		return true
	}
	rw.Header().Set("Retry-After", "0")
	rw.Header().Set("Connection", "close")
	w.m.webhookCode(http.StatusServiceUnavailable)
	http.Error(rw, "not accepting audit events yet: starting", http.StatusServiceUnavailable)
	return false
}

// errRequestKeepsTooMuch is the error of a request whose events would
// keep more than a quarter of the body limit.
var errRequestKeepsTooMuch = errors.New("the audit events of the request keep more than a quarter of the body limit; send smaller batches (--audit-webhook-batch-max-size)")

// requestEvents collects the events of one request, to add them once it
// was read whole, up to limit bytes of them (Record plus keptBytes), in
// chunks that never need a larger copy.
type requestEvents struct {
	limit, bytes int64
	chunks       [][]Record
	n            int
}

const requestChunk = 256

func (q *requestEvents) add(rec Record) error {
	q.bytes += int64(recordBytes + rec.keptBytes())
	if q.bytes > q.limit {
		return errRequestKeepsTooMuch
	}
	if len(q.chunks) == 0 || len(q.chunks[len(q.chunks)-1]) == requestChunk {
		q.chunks = append(q.chunks, make([]Record, 0, requestChunk))
	}
	last := &q.chunks[len(q.chunks)-1]
	*last = append(*last, rec)
	q.n++
	return nil
}

// takeSlot takes one of the slots that bound how many event lists are
// read at once, or answers 429 with Retry-After (client-go's webhook
// client retries after it) and reports false. releaseSlot gives it back.
func (w *Webhook) takeSlot(rw http.ResponseWriter, r *http.Request) bool {
	select {
	case w.slots <- struct{}{}:
		return true
	default:
		rw.Header().Set("Retry-After", "1")
		w.refuse(rw, r, http.StatusTooManyRequests, fmt.Sprintf("%d audit event lists are being read: retry", cap(w.slots)))
		return false
	}
}

// releaseSlot gives back the slot takeSlot took.
func (w *Webhook) releaseSlot() { <-w.slots }
