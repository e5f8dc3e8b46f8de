package web

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	"k8s.io/apiserver/pkg/authentication/token/cache"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	webhooktoken "k8s.io/apiserver/plugin/pkg/authenticator/token/webhook"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fieldwatch/fieldwatch/internal/history"
)

// AuthOptions bound how callers are authenticated and authorized: with
// TokenReviews and SubjectAccessReviews on a client of their own, whose
// requests never wait behind the process's others (Lease renewals,
// actions) nor queue: a review that would exceed its rate or its
// concurrency is refused at once, and so is the request that needs it
// (429).
type AuthOptions struct {
	// QPS and Burst rate the reviews (defaults DefaultReviewQPS and
	// DefaultReviewBurst).
	QPS   float32
	Burst int
	// MaxInFlight bounds the reviews under way at once (default
	// DefaultReviewsInFlight).
	MaxInFlight int
	// TokenCacheTTL is how long a token's review is reused, valid or not;
	// AllowCacheTTL and DenyCacheTTL how long an access decision is
	// (defaults DefaultCacheTTL).
	TokenCacheTTL, AllowCacheTTL, DenyCacheTTL time.Duration
	// FailuresQPS and FailuresBurst rate, per source address (an IPv6 /64),
	// the requests that arrive without credentials or whose credentials
	// are refused (defaults DefaultFailuresQPS and DefaultFailuresBurst):
	// beyond, a source's requests are refused (429) before any review.
	FailuresQPS   float64
	FailuresBurst int
}

// Defaults of AuthOptions.
const (
	DefaultReviewQPS       = 20
	DefaultReviewBurst     = 50
	DefaultReviewsInFlight = 8
	DefaultCacheTTL        = 10 * time.Second
	DefaultFailuresQPS     = 1
	DefaultFailuresBurst   = 20
	// reviewTimeout bounds one review.
	reviewTimeout = 5 * time.Second
)

func (o *AuthOptions) withDefaults() {
	if o.QPS <= 0 {
		o.QPS = DefaultReviewQPS
	}
	if o.Burst <= 0 {
		o.Burst = DefaultReviewBurst
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = DefaultReviewsInFlight
	}
	for _, ttl := range []*time.Duration{&o.TokenCacheTTL, &o.AllowCacheTTL, &o.DenyCacheTTL} {
		if *ttl <= 0 {
			*ttl = DefaultCacheTTL
		}
	}
	if o.FailuresQPS <= 0 {
		o.FailuresQPS = DefaultFailuresQPS
	}
	if o.FailuresBurst <= 0 {
		o.FailuresBurst = DefaultFailuresBurst
	}
}

// errUnauthenticated is the error of a request that must carry valid
// credentials (401).
var errUnauthenticated = errors.New("unauthenticated")

// errThrottled is what a throttledError is (errors.Is).
var errThrottled = errors.New("throttled")

// throttledError is the error of a request refused to keep the reviews,
// or the memory, within their bounds (429); reason labels
// fieldwatch_history_throttled_total.
type throttledError struct{ reason, msg string }

func (e *throttledError) Error() string        { return e.msg }
func (e *throttledError) Is(target error) bool { return target == errThrottled }

// caller is who asks: everything (a token-less request allowed by
// Options.InsecureLoopback), or a user whose access is reviewed.
type caller struct {
	all  bool
	user user.Info
}

// name is the caller's name for logs and the page.
func (c *caller) name() string {
	if c.all {
		return "loopback without credentials (--history-insecure-loopback): everything"
	}
	return c.user.GetName()
}

// auth authenticates and authorizes callers with the apiserver, through
// k8s.io/apiserver's webhook token authenticator and authorizer and their
// caches, on a client of its own.
type auth struct {
	authn    authenticator.Request
	authz    authorizer.Authorizer
	reviews  *reviewGate
	sources  *sourceLimiter
	loopback bool // Options.InsecureLoopback
}

// newAuth builds the authenticator and the authorizer on a copy of cfg
// whose requests go through the review gate.
func newAuth(cfg *rest.Config, o AuthOptions, insecureLoopback bool) (*auth, error) {
	if cfg == nil {
		return nil, errors.New("no Kubernetes client configuration to review callers with")
	}
	o.withDefaults()
	gate := newReviewGate(o.QPS, o.Burst, o.MaxInFlight)
	cfg = rest.CopyConfig(cfg)
	cfg.RateLimiter = gate
	cfg.Wrap(gate.wrap)
	cfg.Timeout = reviewTimeout
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("review client: %w", err)
	}
	// One attempt per review: a refused or failed one fails its request,
	// which the caller may retry; retries here would queue.
	once := wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 1}
	webhook, err := webhooktoken.NewFromInterface(client.AuthenticationV1(), nil, once, reviewTimeout, webhooktoken.AuthenticatorMetrics{
		RecordRequestTotal:   func(context.Context, string) {},
		RecordRequestLatency: func(context.Context, string, float64) {},
	})
	if err != nil {
		return nil, fmt.Errorf("token authenticator: %w", err)
	}
	// authenticatorfactory.DelegatingAuthenticatorConfig builds this
	// chain, but with nowhere to refuse a review before the webhook
	// authenticator logs its failure as an error: a flood of forged
	// tokens would be a flood of log lines.
	authn := group.NewAuthenticatedGroupAdder(bearertoken.New(cache.New(gatedTokens{webhook, gate}, false, o.TokenCacheTTL, o.TokenCacheTTL)))
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: client.AuthorizationV1(),
		AllowCacheTTL:             o.AllowCacheTTL,
		DenyCacheTTL:              o.DenyCacheTTL,
		WebhookRetryBackoff:       &once,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("authorizer: %w", err)
	}
	return &auth{authn: authn, authz: authz, reviews: gate, sources: newSourceLimiter(rate.Limit(o.FailuresQPS), o.FailuresBurst),
		loopback: insecureLoopback}, nil
}

// authenticate returns who made r. A request without credentials is
// everything only when the insecure loopback is on, from a loopback
// address, to a loopback Host (a page of another site that a browser
// sends there, by DNS rebinding, names its own host). Credentials are a
// bearer token, or, for a browser, HTTP Basic credentials whose password
// is the token. A source whose requests failed too often is refused
// before any review.
func (a *auth) authenticate(r *http.Request) (*caller, error) {
	creds := r.Header.Get("Authorization")
	if creds == "" && a.loopback && loopback(r.RemoteAddr) && loopbackHost(r.Host) {
		return &caller{all: true}, nil
	}
	if !a.sources.allows(r.RemoteAddr) {
		return nil, &throttledError{"source", "too many requests without valid credentials from " + sourceOf(r.RemoteAddr) + ": try again in a second"}
	}
	c, err := a.authenticateCredentials(r, creds)
	if errors.Is(err, errUnauthenticated) {
		a.sources.failed(r.RemoteAddr)
	}
	return c, err
}

// authenticateCredentials returns who made r, whose Authorization header
// is creds: errUnauthenticated when it carries no valid credentials.
func (a *auth) authenticateCredentials(r *http.Request, creds string) (*caller, error) {
	if creds == "" {
		why := "a bearer token is required (Authorization: Bearer TOKEN, such as `kubectl create token NAME`)"
		if a.loopback && loopback(r.RemoteAddr) {
			why += "; a loopback request without one is served only to Host localhost, 127.0.0.1 or [::1]"
		}
		return nil, fmt.Errorf("%w: %s", errUnauthenticated, why)
	}
	if scheme, rest, _ := strings.Cut(creds, " "); strings.EqualFold(scheme, "basic") {
		// A browser's: the password is the token.
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(rest))
		_, token, ok := strings.Cut(string(raw), ":")
		if err != nil || !ok || token == "" {
			return nil, fmt.Errorf("%w: Basic credentials must carry a token as their password", errUnauthenticated)
		}
		r.Header.Set("Authorization", "Bearer "+token)
	}
	resp, ok, err := a.authn.AuthenticateRequest(r)
	switch {
	case errors.Is(err, errThrottled):
		return nil, err // the token was not judged
	case reviewFailed(err):
		return nil, fmt.Errorf("token review: %w", err)
	case err != nil || !ok:
		return nil, fmt.Errorf("%w: the token is not valid", errUnauthenticated)
	}
	return &caller{user: resp.User}, nil
}

// reviewFailed reports whether err says that a review could not be made
// (the apiserver unreachable, slow or failing), rather than that the
// token is not valid.
func reviewFailed(err error) bool {
	var ue *url.Error
	var status apierrors.APIStatus
	return err != nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.As(err, &ue) || errors.As(err, &status))
}

// allowed reports whether c may do verb on a resource (of group) in
// namespace ("" for cluster-wide), on the object name when not "".
func (a *auth) allowed(ctx context.Context, c *caller, verb string, gr history.GroupResource, namespace, name string) (bool, error) {
	if c.all {
		return true, nil
	}
	d, _, err := a.authz.Authorize(ctx, authorizer.AttributesRecord{User: c.user, Verb: verb, APIGroup: gr.Group, Resource: gr.Resource,
		Namespace: namespace, Name: name, ResourceRequest: true})
	if err != nil {
		return false, fmt.Errorf("subject access review: %w", err)
	}
	return d == authorizer.DecisionAllow, nil
}

// allowedPath reports whether c may do verb on the non-resource URL path.
func (a *auth) allowedPath(ctx context.Context, c *caller, verb, path string) (bool, error) {
	if c.all {
		return true, nil
	}
	d, _, err := a.authz.Authorize(ctx, authorizer.AttributesRecord{User: c.user, Verb: verb, Path: path})
	if err != nil {
		return false, fmt.Errorf("subject access review: %w", err)
	}
	return d == authorizer.DecisionAllow, nil
}

// loopback reports whether addr (host:port) is a loopback address.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// loopbackHost reports whether a request's Host (with or without a port)
// is localhost, 127.0.0.1 or [::1], as `kubectl proxy --accept-hosts`
// accepts by default.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	} else {
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	}
	switch strings.ToLower(host) {
	case "localhost", "127.0.0.1", "::1":
		return true
	}
	return false
}

// gatedTokens admits a token's review through the review gate before the
// webhook authenticator is asked, and refuses it when the gate has no
// room: refused there, it is not logged.
type gatedTokens struct {
	webhook authenticator.Token
	gate    *reviewGate
}

func (g gatedTokens) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	ctx, release, ok := g.gate.admit(ctx)
	if !ok {
		return nil, false, g.gate.refused()
	}
	defer release()
	return g.webhook.AuthenticateToken(ctx, token)
}
