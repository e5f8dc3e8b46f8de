package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/fieldwatch/fieldwatch/internal/connlimit"
)

// AdmissionPath is where the admission endpoint takes AdmissionReviews.
const AdmissionPath = "/validate"

// AdmissionServerName names the endpoint in the connection metrics
// (fieldwatch_http_connections{server="admission"}).
const AdmissionServerName = "admission"

// The sources of admission records, as Sink.Add is told them.
const (
	// SourceAdmission: reviews the apiserver sent this replica.
	SourceAdmission = "admission"
	// SourceAdmissionPeer: records another replica's endpoint forwarded.
	SourceAdmissionPeer = "admission-peer"
)

// The defaults of AdmissionOptions.
const (
	// DefaultAdmissionMaxBody bounds a review: an object and its old
	// version of up to kube-apiserver's 3 MiB request limit each, in JSON,
	// with room.
	DefaultAdmissionMaxBody = 16 << 20
	// DefaultAdmissionMaxInflight bounds the bytes of the bodies being
	// read at once.
	DefaultAdmissionMaxInflight = 64 << 20
	// DefaultAdmissionQueue is how many records may wait for the index.
	DefaultAdmissionQueue = 4096
)

// The endpoint's deadlines: a review's header and body come from the
// apiserver, which gives the webhook a few seconds (timeoutSeconds), and
// its answer is a few bytes.
const (
	admissionReadHeaderTimeout = 5 * time.Second
	admissionReadTimeout       = 10 * time.Second
	admissionWriteTimeout      = 15 * time.Second
)

// AdmissionOptions configure the admission endpoint.
type AdmissionOptions struct {
	// CertFile and KeyFile are the serving certificate and key (PEM),
	// loaded again when either file changes: the caBundle of the
	// ValidatingWebhookConfiguration names their CA.
	CertFile, KeyFile string
	// ClientCAFile with ClientNames, or TokenFile, make clients
	// authenticate, as WebhookOptions say: the apiserver presents what its
	// --admission-control-config-file (a WebhookAdmission configuration's
	// kubeConfigFile) gives for the webhook's host. Optional: a managed
	// cluster's apiserver presents nothing, and whoever reaches the port
	// can post (docs/attribution.md, the threat model).
	ClientCAFile string
	ClientNames  []string
	TokenFile    string
	// MaxBodyBytes bounds a review (default DefaultAdmissionMaxBody);
	// MaxInflightBytes the bodies read at once, by their Content-Length
	// (default DefaultAdmissionMaxInflight). Past either the endpoint
	// answers 413 or 503 without Retry-After: the apiserver does not
	// retry, and the webhook's failurePolicy Ignore lets the write go on.
	MaxBodyBytes, MaxInflightBytes int64
	// QueueSize is how many records may wait for the sink (default
	// DefaultAdmissionQueue); a review that finds it full is allowed and
	// dropped (counted).
	QueueSize int
	// Keep, when set, says which resources' reviews to keep (those the
	// rules select); the others are allowed and dropped at once.
	Keep func(group, resource string) bool
	// Guard, when set, answers the reviews it takes (the CRD guard),
	// whatever Keep says; GuardTimeout is the longest its answer takes
	// (the connections' write deadline allows for it).
	Guard        AdmissionGuard
	GuardTimeout time.Duration
	// Peers are the other replicas' endpoints, host:port (as
	// WebhookOptions.Peers): each record this endpoint keeps is forwarded
	// to them in the background, in batches, so that every replica holds
	// every record.
	Peers       []string
	PeerTimeout time.Duration
	// Clock stamps the records (default the real clock).
	Clock Clock
	// Logger receives refusals (default slog.Default()); Metrics the
	// counts (default unregistered ones).
	Logger  *slog.Logger
	Metrics *AdmissionMetrics
	// MaxConnections, IdleTimeout and ConnMetrics bound and count the
	// connections, as WebhookOptions say.
	MaxConnections int
	IdleTimeout    time.Duration
	ConnMetrics    *connlimit.Metrics
}

// Admission is fieldwatch's validating admission webhook: it serves
// AdmissionReviews of admission.k8s.io/v1 over HTTPS on AdmissionPath,
// keeps of each write it is sent who made it, on which object, from
// which resourceVersion, and a digest of the content it stores (Record),
// and answers allowed at once; the reviews its Guard takes (CRD updates
// and deletions) get the guard's answer instead, which may warn or refuse
// and take seconds, and their records wait for it.
//
// It never denies a write and never slows one down for its own trouble:
// every review it can read is answered allowed as soon as it is read,
// and a record that finds the queue to the sink full is dropped and
// counted; a review it cannot read (malformed, another version, a body
// over the limit, too many bodies being read) gets an error at once, which
// the apiserver ignores under failurePolicy Ignore. It keeps nothing of
// dry runs, of reviews of resources Keep rejects, of CONNECT and of the
// creates of subresources, and never an object: only identities, keys and
// a content hash.
type Admission struct {
	*endpoint
	opts     AdmissionOptions
	sink     Sink
	m        *AdmissionMetrics
	inflight *semaphore.Weighted
	queue    chan Record
	forwards chan []Record // nil without peers
	bufs     sync.Pool
}

var _ http.Handler = &Admission{}

// NewAdmission checks and loads the files of opts. Serve runs it; the
// records it keeps go to sink as SourceAdmission (and those of peers as
// SourceAdmissionPeer).
func NewAdmission(opts AdmissionOptions, sink Sink) (*Admission, error) {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultAdmissionMaxBody
	}
	if opts.MaxInflightBytes <= 0 {
		opts.MaxInflightBytes = DefaultAdmissionMaxInflight
	}
	opts.MaxInflightBytes = max(opts.MaxInflightBytes, opts.MaxBodyBytes)
	if opts.QueueSize <= 0 {
		opts.QueueSize = DefaultAdmissionQueue
	}
	if opts.Clock == nil {
		opts.Clock = RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Metrics == nil {
		opts.Metrics = NewAdmissionMetrics(nil)
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = connlimit.DefaultIdleTimeout
	}
	m := opts.Metrics
	e := &endpoint{what: "admission webhook", realm: "fieldwatch-admission", log: opts.Logger, refusals: newRefusalLog(RefusalLogInterval),
		code: m.code, refusedBy: m.refusedBy, peerOK: m.peerOK, peerFailed: m.peerFailed}
	if err := e.load(endpointFiles{certFile: opts.CertFile, keyFile: opts.KeyFile, clientCAFile: opts.ClientCAFile,
		tokenFile: opts.TokenFile, clientNames: opts.ClientNames}); err != nil {
		return nil, err
	}
	a := &Admission{endpoint: e, opts: opts, sink: sink, m: m,
		inflight: semaphore.NewWeighted(opts.MaxInflightBytes), queue: make(chan Record, opts.QueueSize)}
	if len(opts.Peers) > 0 {
		var err error
		if e.peers, err = newPeers(e, opts.Peers, opts.PeerTimeout); err != nil {
			return nil, err
		}
		a.forwards = make(chan []Record, 64)
	}
	return a, nil
}

// Serve serves HTTPS on ln until ctx ends, then shuts down gracefully;
// meanwhile it hands the records to the sink (and the peers), and before
// it returns it hands on those of the last reviews it answered. It holds
// at most MaxConnections connections of ln, and closes idle ones after
// IdleTimeout. Call it once.
func (a *Admission) Serve(ctx context.Context, ln net.Listener) error {
	limited := connlimit.NewListener(ln, connlimit.Options{
		Name: AdmissionServerName, Max: a.opts.MaxConnections, Metrics: a.opts.ConnMetrics, Logger: a.log,
	})
	srv := &http.Server{
		Handler:           a,
		TLSConfig:         a.TLSConfig(),
		ReadHeaderTimeout: admissionReadHeaderTimeout,
		ReadTimeout:       admissionReadTimeout,
		WriteTimeout:      admissionWriteTimeout + a.opts.GuardTimeout,
		IdleTimeout:       a.opts.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelDebug),
	}
	limited.Hook(srv)
	var bg sync.WaitGroup
	// The feed stops once the server has: it hands on what the last
	// reviews queued, and the forwarder sends it to the peers (within
	// their timeout) before Serve returns.
	defer bg.Wait()
	feedCtx, stopFeed := context.WithCancel(context.WithoutCancel(ctx))
	defer stopFeed()
	bg.Go(func() { a.feed(feedCtx) })
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(limited, "", "") }()
	select {
	case err := <-errc:
		return fmt.Errorf("admission webhook: %w", err)
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shut); err != nil {
		return fmt.Errorf("admission webhook: shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("admission webhook: %w", err)
	}
	return nil
}

// feedBatch is how many queued records feed hands the sink at once.
const feedBatch = 256

// feed hands the queued records to the sink, in batches of what is
// queued, and to the peers' forwarder (which it runs), until ctx ends;
// then it hands on what is still queued and waits for the forwarder to
// send what it was handed.
func (a *Admission) feed(ctx context.Context) {
	if a.forwards != nil {
		done := make(chan struct{})
		go func() {
			defer close(done)
			a.forward()
		}()
		defer func() {
			close(a.forwards)
			<-done
		}()
	}
	batch := make([]Record, 0, feedBatch)
	for {
		select {
		case <-ctx.Done():
			a.drainQueue(batch)
			return
		case rec := <-a.queue:
			batch = append(batch[:0], rec)
		}
		a.hand(a.more(batch))
		clear(batch)
	}
}

// more adds to batch what is queued, up to feedBatch records.
func (a *Admission) more(batch []Record) []Record {
	for len(batch) < feedBatch {
		select {
		case rec := <-a.queue:
			batch = append(batch, rec)
		default:
			return batch
		}
	}
	return batch
}

// drainQueue hands on every record still queued, in batches.
func (a *Admission) drainQueue(batch []Record) {
	for {
		batch = a.more(batch[:0])
		if len(batch) == 0 {
			return
		}
		a.hand(batch)
		clear(batch)
	}
}

// hand gives batch to the peers' forwarder and to the sink.
func (a *Admission) hand(batch []Record) {
	if a.forwards != nil {
		select {
		case a.forwards <- append([]Record(nil), batch...):
		default:
			a.m.peerFailed.Inc() // the peers are slower than the writes: they miss these
		}
	}
	a.sink.Add(SourceAdmission, batch, 0)
}

// forward sends the batches feed hands it to the peers, one at a time,
// merging what waits, until feed closes the channel. Each send is
// bounded by the peers' timeout, also after the endpoint stopped.
func (a *Admission) forward() {
	for recs := range a.forwards {
	more:
		for len(recs) < 4*feedBatch {
			select {
			case next, ok := <-a.forwards:
				if !ok {
					break more
				}
				recs = append(recs, next...)
			default:
				break more
			}
		}
		a.peers.forward(context.Background(), recs)
	}
}

// ServeHTTP answers an AdmissionReview: allowed, at once, or what the
// Guard answers for the reviews it takes.
func (a *Admission) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		rw.Header().Set("Allow", http.MethodPost)
		a.refuse(rw, r, http.StatusMethodNotAllowed, "only POST")
		return
	}
	switch r.URL.Path {
	case AdmissionPath:
	case PeerPath:
		a.servePeer(rw, r)
		return
	default:
		a.refuse(rw, r, http.StatusNotFound, "AdmissionReviews are served on "+AdmissionPath)
		return
	}
	if a.authenticates() {
		if code, reason, client := a.authenticate(r); code != 0 {
			a.refuseUnauthenticated(rw, r, code, reason, client)
			return
		}
	}
	body, release, ok := a.readBody(rw, r)
	if !ok {
		return
	}
	defer release()
	now := a.opts.Clock.Now()
	rv, err := decodeReview(body)
	if err != nil {
		result := reviewMalformed
		if errors.Is(err, errReviewVersion) {
			result = reviewVersion
		}
		a.m.review(result)
		a.refuse(rw, r, http.StatusBadRequest, err.Error())
		return
	}
	var answer *GuardAnswer
	if a.opts.Guard != nil && a.opts.Guard.Takes(rv.group, rv.resource, rv.subResource, rv.operation) {
		answer = a.guard(r.Context(), body, &rv)
		// The record stands for changes watched after the answer, the
		// earliest the write can be stored.
		now = a.opts.Clock.Now()
	}
	rec, result, err := recordOf(&rv, a.opts.Keep, now)
	switch {
	case err != nil:
		// A review of the version it asked for, whose object it cannot
		// read: allowed, as every review it can answer.
		result = reviewMalformed
		if suppressed, ok := a.refusals.allow("record", now); ok {
			a.log.Warn("admission webhook: cannot read the object of a review; allowed, not kept", "error", truncate(err.Error(), 512),
				"resource", rv.resource, "namespace", rv.namespace, "name", rv.name, "suppressed", suppressed)
		}
	case result == reviewKept && answer != nil && !answer.Allowed:
		result = reviewRefused // no change can be its
	case result == reviewKept:
		if answer != nil {
			rec.Guard = answer.Override
		}
		select {
		case a.queue <- rec:
		default:
			result = reviewDropped
		}
	}
	a.m.review(result)
	if answer != nil {
		a.write(rw, answer.Review)
		return
	}
	a.allow(rw, rv.uid)
}

// guard asks the Guard for its answer to the review body; nil when it
// has none (an error, logged: the review is then allowed).
func (a *Admission) guard(ctx context.Context, body []byte, rv *review) *GuardAnswer {
	ans, err := a.opts.Guard.Review(ctx, body)
	if err == nil && len(ans.Review) > 0 {
		return &ans
	}
	if err == nil {
		err = errors.New("no answer")
	}
	if suppressed, ok := a.refusals.allow("guard", a.opts.Clock.Now()); ok {
		a.log.Warn("admission webhook: the CRD guard could not answer a review; allowed", "error", truncate(err.Error(), 512),
			"resource", rv.resource, "name", rv.name, "operation", rv.operation, "suppressed", suppressed)
	}
	return nil
}

// write writes the AdmissionReview review, the answer to a review.
func (a *Admission) write(rw http.ResponseWriter, review []byte) {
	rw.Header().Set("Content-Type", "application/json")
	a.m.code(http.StatusOK)
	rw.WriteHeader(http.StatusOK)
	_, _ = rw.Write(review)
}

// readBody reads a review's body, within the limits: a body over
// MaxBodyBytes gets 413; one that finds MaxInflightBytes of bodies being
// read gets 503, without Retry-After (the apiserver does not retry, and
// lets the write go on). release gives its bytes back.
func (a *Admission) readBody(rw http.ResponseWriter, r *http.Request) (body []byte, release func(), ok bool) {
	size := r.ContentLength
	if size > a.opts.MaxBodyBytes {
		a.m.review(reviewBody)
		a.refuse(rw, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("an AdmissionReview larger than %d bytes", a.opts.MaxBodyBytes))
		return nil, nil, false
	}
	if size < 0 {
		size = a.opts.MaxBodyBytes
	}
	if !a.inflight.TryAcquire(size) {
		a.m.review(reviewBusy)
		rw.Header().Set("Connection", "close")
		a.refuse(rw, r, http.StatusServiceUnavailable, "too many AdmissionReviews being read")
		return nil, nil, false
	}
	buf, _ := a.bufs.Get().(*bytes.Buffer)
	if buf == nil {
		buf = &bytes.Buffer{}
	}
	buf.Reset()
	release = func() {
		if buf.Cap() <= maxPooledBody {
			a.bufs.Put(buf)
		}
		a.inflight.Release(size)
	}
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength))
	}
	if _, err := buf.ReadFrom(http.MaxBytesReader(rw, r.Body, a.opts.MaxBodyBytes)); err != nil {
		release()
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			a.m.review(reviewBody)
			a.refuse(rw, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("an AdmissionReview larger than %d bytes", tooLarge.Limit))
		} else {
			a.m.review(reviewMalformed)
			a.refuse(rw, r, http.StatusBadRequest, "reading the body: "+err.Error())
		}
		return nil, nil, false
	}
	return buf.Bytes(), release, true
}

// maxPooledBody bounds the body buffers kept for the next reviews.
const maxPooledBody = 256 << 10

// allow writes the answer to the review uid: allowed.
func (a *Admission) allow(rw http.ResponseWriter, uid string) {
	b := make([]byte, 0, 128+len(uid))
	b = append(b, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":`...)
	q, _ := json.Marshal(uid) // a string always encodes
	b = append(b, q...)
	b = append(b, `,"allowed":true}}`...)
	h := rw.Header()
	h.Set("Content-Type", "application/json")
	a.m.code(http.StatusOK)
	rw.WriteHeader(http.StatusOK)
	_, _ = rw.Write(b)
}

// servePeer takes the records a peer forwards: from a client that
// presents this endpoint's own certificate only, admission records only.
func (a *Admission) servePeer(rw http.ResponseWriter, r *http.Request) {
	if a.peers != nil && r.Header.Get(peerInstanceHeader) == a.peers.instance {
		rw.Header().Set(peerInstanceHeader, a.peers.instance)
		rw.WriteHeader(http.StatusOK)
		return
	}
	if r.TLS == nil || !a.isOwnCertificate(r.TLS.PeerCertificates) {
		a.refusedBy[RefusedPeer].Inc()
		a.refuseClient(rw, r, http.StatusForbidden, "not a peer", RefusedPeer, "")
		return
	}
	body, release, ok := a.readBody(rw, r)
	if !ok {
		return
	}
	defer release()
	var recs []Record
	if err := json.Unmarshal(body, &recs); err != nil {
		a.m.review(reviewMalformed)
		a.refuse(rw, r, http.StatusBadRequest, "peer records: "+err.Error())
		return
	}
	kept := recs[:0]
	for _, rec := range recs {
		if rec.Admission && rec.RequestUID != "" && rec.ObjectUID != "" && rec.keptBytes() <= MaxEventBytes &&
			(a.opts.Keep == nil || a.opts.Keep(rec.Group, rec.Resource)) {
			kept = append(kept, rec)
		}
	}
	if len(kept) > 0 {
		a.sink.Add(SourceAdmissionPeer, kept, 0)
	}
	a.m.code(http.StatusOK)
	rw.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(rw, "ok\n")
}
