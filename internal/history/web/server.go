package web

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"k8s.io/client-go/rest"

	"github.com/fieldwatch/fieldwatch/internal/history"
)

// Options configure a Server.
type Options struct {
	// Store is the history. Required.
	Store history.Store
	// Rest is the client configuration that the reviews' own client
	// copies (AuthOptions). Required.
	Rest *rest.Config
	// Auth bounds the reviews of callers.
	Auth AuthOptions
	// InsecureLoopback serves a request without credentials as
	// everything when it comes from a loopback address to a Host of
	// localhost, 127.0.0.1 or [::1]: for an authenticating proxy beside
	// fieldwatch in its pod. Off, every request needs a token.
	InsecureLoopback bool
	// MaxResponseBytes bounds the payload bytes of a response (default
	// DefaultMaxResponseBytes); MaxBytesInFlight those of the responses
	// being built at once (default DefaultMaxBytesInFlight, at least
	// MaxResponseBytes): a request past it is refused (429).
	MaxResponseBytes, MaxBytesInFlight int64
	// Timeout bounds one request's queries (default 10s).
	Timeout    time.Duration
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// Verification, when set, returns the last verification of the
	// trail in place (nil before the first): the timeline's verified
	// mark and the summary at /history/trail. Unset: neither.
	Verification func() *history.Verification
}

// Defaults of Options.
const (
	DefaultMaxResponseBytes = 8 << 20
	DefaultMaxBytesInFlight = 64 << 20
)

// Server serves the history's API and pages.
type Server struct {
	store            history.Store
	auth             *auth
	cursors          *cursors
	budget           *budget
	maxResponseBytes int64
	timeout          time.Duration
	log              *slog.Logger
	requests         *prometheus.CounterVec
	throttled        *prometheus.CounterVec
	scanned          prometheus.Counter
	errLog           rate.Sometimes
	now              func() time.Time
	exporting        chan struct{} // holds the export under way (export.go)
	verification     func() *history.Verification
}

// New returns a Server.
func New(opts Options) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.MaxResponseBytes <= 0 {
		opts.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if opts.MaxBytesInFlight <= 0 {
		opts.MaxBytesInFlight = max(DefaultMaxBytesInFlight, opts.MaxResponseBytes)
	}
	if opts.MaxBytesInFlight < opts.MaxResponseBytes {
		return nil, fmt.Errorf("history: the bytes in flight (%d) are fewer than those of one response (%d)", opts.MaxBytesInFlight, opts.MaxResponseBytes)
	}
	a, err := newAuth(opts.Rest, opts.Auth, opts.InsecureLoopback)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	cs, err := newCursors()
	if err != nil {
		return nil, fmt.Errorf("history: cursor key: %w", err)
	}
	s := &Server{
		store: opts.Store, auth: a, cursors: cs, budget: &budget{max: opts.MaxBytesInFlight}, maxResponseBytes: opts.MaxResponseBytes,
		timeout: opts.Timeout, log: opts.Logger,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fieldwatch", Subsystem: "history", Name: "requests_total",
			Help: "Requests to the history's API and pages, by handler and status code.",
		}, []string{"handler", "code"}),
		throttled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fieldwatch", Subsystem: "history", Name: "throttled_total",
			Help: "Requests to the history refused with 429, by reason: reviews (the apiserver reviews at their bound), source (too many failed requests from one address), memory (the bytes in flight at their bound), export (another export under way).",
		}, []string{"reason"}),
		scanned: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "fieldwatch", Subsystem: "history", Name: "entries_scanned_total",
			Help: "Entries the history's queries went through, matching or not (at most 20,000 a request).",
		}),
		errLog:       rate.Sometimes{Interval: 10 * time.Second},
		now:          time.Now,
		exporting:    make(chan struct{}, 1),
		verification: opts.Verification,
	}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(s.requests, s.throttled, s.scanned)
	}
	return s, nil
}

// Register adds the API and the pages to mux: /api/v1/history,
// /api/v1/history/export (the audit trail), ObjectsPath (objects as they
// were), /history (the timeline), /history/object (one object's
// history), /history/trail (the trail's last verification) and
// /history/assets/.
func (s *Server) Register(mux *http.ServeMux) {
	mux.HandleFunc("/api/v1/history", s.api)
	mux.HandleFunc("/api/v1/history/export", s.export)
	mux.HandleFunc(ObjectsPath, s.objects)
	mux.HandleFunc("/history", s.timeline)
	mux.HandleFunc("/history/object", s.object)
	mux.HandleFunc("/history/trail", s.trailSummary)
	mux.Handle("/history/assets/", s.assets())
}

// APIEntry is an entry as /api/v1/history writes it.
type APIEntry struct {
	// Seq is the store's sequence number.
	Seq int64 `json:"seq"`
	// Recorded is when the entry was written (RFC 3339).
	Recorded string `json:"recorded"`
	// Source is delivered or confirmed (history.Source).
	Source history.Source `json:"source"`
	// Payload is the payload as the actions received it, less what the
	// caller may not see (docs/history.md); when Omitted, only its id,
	// time, rule, type, resource, namespace, name, uid and usernames.
	Payload json.RawMessage `json:"payload"`
	// Omitted, when set, is the size of the payload left out: larger on
	// its own than a response may hold (--history-max-response-bytes).
	Omitted int64 `json:"omitted,omitempty"`
}

// APIPage is the answer of /api/v1/history.
type APIPage struct {
	Entries []APIEntry `json:"entries"`
	// Next is the cursor of the next page; absent at the end.
	Next string `json:"next,omitempty"`
}

// PageOf returns the API's answer for entries and the next cursor, as
// next writes it.
func PageOf(entries []history.Entry, next string) APIPage {
	out := APIPage{Entries: make([]APIEntry, len(entries)), Next: next}
	for i, e := range entries {
		out.Entries[i] = APIEntry{Seq: e.Seq, Recorded: e.Recorded.Format(time.RFC3339Nano), Source: e.Source, Payload: e.Payload, Omitted: e.Omitted}
	}
	return out
}

// MarshalPage writes p as the API does: without HTML escaping, as
// payloads are written.
func MarshalPage(p APIPage) ([]byte, error) { return marshalNoEscape(p) }

// beginJSON starts a request to a JSON path of the API: the method
// checked, the caller authenticated, and a context that ends with the
// request's time (Options.Timeout); ok false when it answered
// with an error already. The caller defers cancel.
func (s *Server) beginJSON(w http.ResponseWriter, r *http.Request, handler string) (ctx context.Context, cancel context.CancelFunc, c *caller, ok bool) {
	if !s.methodOK(w, r, handler) {
		return nil, func() {}, nil, false
	}
	ctx, cancel = context.WithTimeout(r.Context(), s.timeout)
	c, err := s.auth.authenticate(r)
	if err != nil {
		s.jsonError(w, handler, err)
		return ctx, cancel, nil, false
	}
	return ctx, cancel, c, true
}

func (s *Server) api(w http.ResponseWriter, r *http.Request) {
	const handler = "api"
	ctx, cancel, c, ok := s.beginJSON(w, r, handler)
	defer cancel()
	if !ok {
		return
	}
	q, err := s.parseQuery(r.URL.RawQuery)
	if err != nil {
		s.jsonError(w, handler, err)
		return
	}
	held := &reservation{b: s.budget}
	defer held.release()
	res, err := s.fetch(ctx, c, q, held)
	if err != nil {
		s.jsonError(w, handler, err)
		return
	}
	next := ""
	if res.next != nil {
		next = s.cursors.seal(*res.next)
	}
	s.headers(w, "application/json")
	w.WriteHeader(http.StatusOK)
	writePage(w, res.entries, next)
	s.requests.WithLabelValues(handler, "200").Inc()
}

// writePage writes the API's answer (APIPage) as it goes: the payloads
// are copied once, to the connection, and never held twice.
func writePage(w io.Writer, entries []history.Entry, next string) {
	bw := bufio.NewWriterSize(w, 32<<10)
	str := func(s string) {
		b, _ := json.Marshal(s) // a string always marshals
		_, _ = bw.Write(b)
	}
	_, _ = bw.WriteString(`{"entries":[`)
	for i := range entries {
		e := &entries[i]
		if i > 0 {
			_ = bw.WriteByte(',')
		}
		_, _ = bw.WriteString(`{"seq":` + strconv.FormatInt(e.Seq, 10) + `,"recorded":`)
		str(e.Recorded.Format(time.RFC3339Nano))
		_, _ = bw.WriteString(`,"source":`)
		str(string(e.Source))
		_, _ = bw.WriteString(`,"payload":`)
		_, _ = bw.Write(e.Payload)
		if e.Omitted > 0 {
			_, _ = bw.WriteString(`,"omitted":` + strconv.FormatInt(e.Omitted, 10))
		}
		_ = bw.WriteByte('}')
	}
	_ = bw.WriteByte(']')
	if next != "" {
		_, _ = bw.WriteString(`,"next":`)
		str(next)
	}
	_, _ = bw.WriteString("}\n")
	_ = bw.Flush()
}

// badRequest marks an error of the caller's input.
type badRequest struct{ error }

func (e badRequest) Unwrap() error { return e.error }

// status returns the HTTP status of err and what to tell the caller.
func (s *Server) status(handler string, err error) (int, string) {
	var bad badRequest
	var denied forbidden
	var throttled *throttledError
	switch {
	case errors.As(err, &bad):
		return http.StatusBadRequest, err.Error()
	case errors.As(err, &denied):
		return http.StatusForbidden, err.Error()
	case errors.Is(err, errUnauthenticated):
		return http.StatusUnauthorized, err.Error()
	case errors.As(err, &throttled):
		s.throttled.WithLabelValues(throttled.reason).Inc()
		return http.StatusTooManyRequests, throttled.Error()
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, "the query took too long: narrow it (a namespace, a uid, a time range)"
	case errors.Is(err, context.Canceled):
		return http.StatusServiceUnavailable, "the request was canceled" // the client went away: nothing to log
	}
	s.errLog.Do(func() { s.log.Error("history request failed", "handler", handler, "error", err) })
	return http.StatusInternalServerError, "the history could not be read (see fieldwatch's log)"
}

func (s *Server) jsonError(w http.ResponseWriter, handler string, err error) {
	code, msg := s.status(handler, err)
	body, _ := json.Marshal(map[string]string{"error": msg})
	s.headers(w, "application/json")
	s.challenge(w, code, `Bearer realm="fieldwatch history"`)
	w.WriteHeader(code)
	_, _ = w.Write(append(body, '\n'))
	s.requests.WithLabelValues(handler, strconv.Itoa(code)).Inc()
}

// challenge sets the headers of a 401 (the challenge) and a 429 (when to
// try again).
func (s *Server) challenge(w http.ResponseWriter, code int, challenge string) {
	switch code {
	case http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", challenge)
	case http.StatusTooManyRequests:
		w.Header().Set("Retry-After", "1")
	}
}

// methodOK refuses methods other than GET and HEAD.
func (s *Server) methodOK(w http.ResponseWriter, r *http.Request, handler string) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	http.Error(w, "only GET and HEAD", http.StatusMethodNotAllowed)
	s.requests.WithLabelValues(handler, "405").Inc()
	return false
}

// headers sets the headers every answer carries: no caching (what a
// caller may read changes), no sniffing, no framing, and a content
// policy that loads nothing from elsewhere.
func (s *Server) headers(w http.ResponseWriter, contentType string) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
}

// marshalNoEscape marshals v without HTML escaping, as payloads are.
func marshalNoEscape(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
