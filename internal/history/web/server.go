package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"k8s.io/client-go/kubernetes"

	"github.com/fieldwatch/fieldwatch/internal/history"
)

// Options configure a Server.
type Options struct {
	// Store is the history. Required.
	Store history.Store
	// Kube reviews tokens and access. Required.
	Kube kubernetes.Interface
	// CacheTTL is how long review answers are reused (default
	// DefaultCacheTTL).
	CacheTTL time.Duration
	// Timeout bounds one request's queries (default 10s).
	Timeout    time.Duration
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Server serves the history's API and pages.
type Server struct {
	store    history.Store
	auth     *authorizer
	timeout  time.Duration
	log      *slog.Logger
	requests *prometheus.CounterVec
	errLog   rate.Sometimes
	now      func() time.Time
}

// New returns a Server.
func New(opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.CacheTTL <= 0 {
		opts.CacheTTL = DefaultCacheTTL
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	s := &Server{
		store: opts.Store, auth: newAuthorizer(opts.Kube, opts.CacheTTL), timeout: opts.Timeout, log: opts.Logger,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fieldwatch", Subsystem: "history", Name: "requests_total",
			Help: "Requests to the history's API and pages, by handler and status code.",
		}, []string{"handler", "code"}),
		errLog: rate.Sometimes{Interval: 10 * time.Second},
		now:    time.Now,
	}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(s.requests)
	}
	return s
}

// Register adds the API and the pages to mux: /api/v1/history,
// /history (the timeline), /history/object (one object's history) and
// /history/assets/.
func (s *Server) Register(mux *http.ServeMux) {
	mux.HandleFunc("/api/v1/history", s.api)
	mux.HandleFunc("/history", s.timeline)
	mux.HandleFunc("/history/object", s.object)
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
	// Payload is the payload as the actions received it.
	Payload json.RawMessage `json:"payload"`
}

// APIPage is the answer of /api/v1/history.
type APIPage struct {
	Entries []APIEntry `json:"entries"`
	// Next is the cursor of the next page; absent at the end.
	Next string `json:"next,omitempty"`
}

// PageOf returns the API's answer for entries and the next cursor.
func PageOf(entries []history.Entry, next *history.Cursor) APIPage {
	out := APIPage{Entries: make([]APIEntry, len(entries))}
	for i, e := range entries {
		out.Entries[i] = APIEntry{Seq: e.Seq, Recorded: e.Recorded.Format(time.RFC3339Nano), Source: e.Source, Payload: e.Payload}
	}
	if next != nil {
		out.Next = next.String()
	}
	return out
}

// MarshalPage writes p as the API does: without HTML escaping, as
// payloads are written.
func MarshalPage(p APIPage) ([]byte, error) { return marshalNoEscape(p) }

func (s *Server) api(w http.ResponseWriter, r *http.Request) {
	const handler = "api"
	if !s.methodOK(w, r, handler) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.timeout)
	defer cancel()
	c, err := s.auth.authenticate(ctx, r)
	if err != nil {
		s.jsonError(w, handler, err)
		return
	}
	q, err := history.ParseQuery(r.URL.Query(), s.now())
	if err != nil {
		s.jsonError(w, handler, badRequest{err})
		return
	}
	res, err := s.fetch(ctx, c, q)
	if err != nil {
		s.jsonError(w, handler, err)
		return
	}
	body, err := MarshalPage(PageOf(res.entries, res.next))
	if err != nil {
		s.jsonError(w, handler, err)
		return
	}
	s.headers(w, "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
	s.requests.WithLabelValues(handler, "200").Inc()
}

// badRequest marks an error of the caller's input.
type badRequest struct{ error }

func (e badRequest) Unwrap() error { return e.error }

// status returns the HTTP status of err and what to tell the caller.
func (s *Server) status(handler string, err error) (int, string) {
	var bad badRequest
	switch {
	case errors.As(err, &bad):
		return http.StatusBadRequest, err.Error()
	case errors.Is(err, errUnauthenticated):
		return http.StatusUnauthorized, err.Error()
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, "the query took too long: narrow it (a namespace, a uid, a time range)"
	}
	s.errLog.Do(func() { s.log.Error("history request failed", "handler", handler, "error", err) })
	return http.StatusInternalServerError, "the history could not be read (see fieldwatch's log)"
}

func (s *Server) jsonError(w http.ResponseWriter, handler string, err error) {
	code, msg := s.status(handler, err)
	body, _ := json.Marshal(map[string]string{"error": msg})
	s.headers(w, "application/json")
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="fieldwatch history"`)
	}
	w.WriteHeader(code)
	_, _ = w.Write(append(body, '\n'))
	s.requests.WithLabelValues(handler, strconv.Itoa(code)).Inc()
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
