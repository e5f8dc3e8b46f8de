package action

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fieldwatch/fieldwatch/action/internal/directhttp"
	"github.com/fieldwatch/fieldwatch/rules"
)

// webhook POSTs the payload (or the rendered template) to a URL.
type webhook struct {
	spec      *rules.WebhookAction
	clients   *httpClients
	tls       tlsFiles
	direct    atomic.Pointer[directhttp.Target] // set on first use, or
	client    atomic.Pointer[http.Client]       // this one
	url       string                            // scheme and host only, for errors and logs
	timeout   time.Duration
	header    http.Header // the rule's headers, canonical
	host      string      // a Host header of the rule
	token     *fileCache  // nil without BearerTokenFile
	secret    func() ([]byte, error)
	sigHeader string
	ce        *cloudEvents // nil: the plain payload
}

var _ handler = &webhook{}

func newWebhook(spec *rules.WebhookAction, clients *httpClients) *webhook {
	w := &webhook{
		spec:    spec,
		clients: clients,
		tls:     tlsFiles{ca: spec.CAFile, cert: spec.CertFile, key: spec.KeyFile},
		url:     safeURL(spec.URL),
		timeout: spec.Timeout,
		header:  http.Header{},
		ce:      newCloudEvents(spec.CloudEvents),
	}
	if w.timeout <= 0 {
		w.timeout = rules.DefaultWebhookTimeout
	}
	for k, v := range spec.Headers {
		if strings.EqualFold(k, "Host") {
			w.host = v
			continue
		}
		w.header.Set(k, v)
	}
	if spec.BearerTokenFile != "" {
		w.token = &fileCache{path: spec.BearerTokenFile}
	}
	if s := spec.Signing; s != nil {
		w.sigHeader = s.Header
		if w.sigHeader == "" {
			w.sigHeader = rules.DefaultSignatureHeader
		}
		w.secret = secretSource(s)
	}
	return w
}

// safeURL returns the scheme and host of a webhook URL, what errors, logs
// and dead letters may show of it: its user info, path and query may hold
// a token.
func safeURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(unparsable URL)"
	}
	return u.Scheme + "://" + u.Host
}

// secretSource returns how to read the signing secret: from the file (re-
// read when it changes) or the environment variable, surrounding white
// space trimmed.
func secretSource(s *rules.Signing) func() ([]byte, error) {
	if s.SecretFile != "" {
		fc := &fileCache{path: s.SecretFile}
		return fc.get
	}
	return func() ([]byte, error) {
		v := strings.TrimSpace(os.Getenv(s.SecretEnv))
		if v == "" {
			return nil, fmt.Errorf("signing secret: environment variable %s is empty", s.SecretEnv)
		}
		return []byte(v), nil
	}
}

func (w *webhook) attempt(ctx context.Context, it *item) error {
	direct, client, err := w.transport()
	if err != nil {
		return err // the CA or certificate may be mounted later
	}
	body := it.f.Payload
	if w.spec.Template != nil {
		if body, err = w.spec.Template.Render(it.f.Payload); err != nil {
			return permanent(fmt.Errorf("render body: %w", err))
		}
	}
	if w.ce != nil && !w.ce.binary() {
		if body, err = w.ce.structured(&it.f, body); err != nil {
			return permanent(err)
		}
	}
	if direct != nil {
		// The connection's deadline is the timeout: no context with
		// a timer of its own for each POST.
		deadline := time.Now().Add(w.timeout)
		var h directhttp.Header
		if err := w.setHeaders(&h, it, body); err != nil {
			return err
		}
		resp, release, err := direct.Post(ctx, deadline, w.host, h, body)
		if errors.Is(err, directhttp.ErrInvalidHeader) {
			return permanent(fmt.Errorf("post %s: %w", w.url, err))
		}
		if err != nil {
			return fmt.Errorf("post %s: %w", w.url, err)
		}
		defer release()
		return w.outcome(resp)
	}
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.spec.URL, bytes.NewReader(body))
	if err != nil {
		return permanent(fmt.Errorf("webhook request: %w", err))
	}
	if w.host != "" {
		req.Host = w.host
	}
	if err := w.setHeaders(req.Header, it, body); err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		// A *url.Error quotes the whole URL, whose path or query may hold
		// a token: say the scheme and host only.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("post %s: %w", w.url, err)
	}
	// Read the body to its end and close it, always: that puts the
	// connection back in the pool for the next request.
	defer drainClose(resp.Body)
	return w.outcome(resp)
}

// outcome is nil for a 2xx response, the delivery error of another.
func (w *webhook) outcome(resp *http.Response) error {
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	return w.statusError(resp)
}

// transport returns how w posts: directhttp's target when its URL allows,
// else net/http's client. Either is kept once built.
func (w *webhook) transport() (*directhttp.Target, *http.Client, error) {
	if t := w.direct.Load(); t != nil {
		return t, nil, nil
	}
	if c := w.client.Load(); c != nil {
		return nil, c, nil
	}
	t, err := w.clients.directTarget(w.spec.URL, w.tls)
	if err != nil {
		return nil, nil, err
	}
	if t != nil {
		w.direct.Store(t)
		return t, nil, nil
	}
	c, err := w.clients.get(w.tls)
	if err != nil {
		return nil, nil, err
	}
	w.client.Store(c)
	return nil, c, nil
}

// headerSink is where a webhook sets a request's headers: net/http's
// http.Header, or directhttp's Header.
type headerSink interface {
	Set(key, value string)
	Add(key, value string)
}

func (w *webhook) setHeaders(h headerSink, it *item, body []byte) error {
	for k, vs := range w.header {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	h.Set("Content-Type", "application/json")
	if w.ce != nil {
		if w.ce.binary() {
			w.ce.headers(&it.f, "Ce-", h.Set)
		} else {
			h.Set("Content-Type", CloudEventsContentType)
		}
	}
	h.Set("User-Agent", "fieldwatch")
	h.Set("Idempotency-Key", it.f.ID)
	if w.token != nil {
		tok, err := w.token.get()
		if err != nil {
			return fmt.Errorf("bearer token: %w", err)
		}
		h.Set("Authorization", "Bearer "+string(tok))
	}
	if w.secret != nil {
		secret, err := w.secret()
		if err != nil {
			return fmt.Errorf("signing secret: %w", err)
		}
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		h.Set(TimestampHeader, ts)
		h.Set(w.sigHeader, Sign(secret, ts, body))
	}
	return nil
}

// statusError turns a non-2xx response into an error: permanent for a
// redirect (fieldwatch does not re-send a signed body elsewhere) and a 4xx
// other than 408 and 429; with the Retry-After delay when there is one.
func (w *webhook) statusError(resp *http.Response) error {
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	msg := fmt.Sprintf("post %s: %s", w.url, resp.Status)
	if s := strings.TrimSpace(strings.ToValidUTF8(string(snippet), "")); s != "" {
		msg += ": " + s
	}
	code := resp.StatusCode
	return &deliveryError{
		err:        errors.New(msg),
		permanent:  httpStatusPermanent(code) || (code >= 300 && code < 400),
		retryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()),
	}
}

// drainClose reads what is left of a response body (up to a bound: a
// larger one costs its connection rather than the time to read it) and
// closes it.
func drainClose(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 64<<10))
	_ = body.Close()
}
