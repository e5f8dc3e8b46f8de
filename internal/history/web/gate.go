package web

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/util/flowcontrol"
)

// reviewGate is the review client's rate limiter and the bound on its
// requests in flight. Neither waits: a request beyond them fails at once
// with errThrottled, where client-go's limiter would queue it (and, on a
// shared client, the Lease renewals queued behind it).
type reviewGate struct {
	tokens   *rate.Limiter
	inFlight chan struct{}
}

var _ flowcontrol.RateLimiter = &reviewGate{}

func newReviewGate(qps float32, burst, inFlight int) *reviewGate {
	return &reviewGate{tokens: rate.NewLimiter(rate.Limit(qps), burst), inFlight: make(chan struct{}, inFlight)}
}

// admit takes a token and a place in flight for a review, or reports
// false; the returned context carries them to the client's rate limiter
// and transport, which let its request through, and release gives the
// place back once the review is done.
func (g *reviewGate) admit(ctx context.Context) (context.Context, func(), bool) {
	select {
	case g.inFlight <- struct{}{}:
	default:
		return ctx, nil, false
	}
	if !g.tokens.Allow() {
		<-g.inFlight
		return ctx, nil, false
	}
	return context.WithValue(ctx, admittedKey{}, g), func() { <-g.inFlight }, true
}

// admittedKey marks a context whose review the gate admitted already.
type admittedKey struct{}

// admitted reports whether ctx carries a review g admitted.
func (g *reviewGate) admitted(ctx context.Context) bool { return ctx.Value(admittedKey{}) == g }

// refused is the error of a review the gate does not let through.
func (g *reviewGate) refused() error {
	return &throttledError{"reviews", fmt.Sprintf("the apiserver reviews of this fieldwatch are at their bound (%d at once, %v a second): try again in a second",
		cap(g.inFlight), g.tokens.Limit())}
}

// TryAccept implements flowcontrol.RateLimiter.
func (g *reviewGate) TryAccept() bool { return g.tokens.Allow() }

// Accept implements flowcontrol.RateLimiter. client-go calls Wait; Accept
// takes a token without waiting too.
func (g *reviewGate) Accept() { g.tokens.Allow() }

// Wait implements flowcontrol.RateLimiter: it takes a token or fails at
// once; a review admitted already has its token.
func (g *reviewGate) Wait(ctx context.Context) error {
	if !g.admitted(ctx) && !g.tokens.Allow() {
		return g.refused()
	}
	return nil
}

// Stop implements flowcontrol.RateLimiter.
func (g *reviewGate) Stop() {}

// QPS implements flowcontrol.RateLimiter.
func (g *reviewGate) QPS() float32 { return float32(g.tokens.Limit()) }

// wrap bounds the requests in flight of the transport rt.
func (g *reviewGate) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if g.admitted(r.Context()) {
			return rt.RoundTrip(r) // its place is held by admit's caller
		}
		select {
		case g.inFlight <- struct{}{}:
		default:
			return nil, g.refused()
		}
		defer func() { <-g.inFlight }()
		return rt.RoundTrip(r)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// sourceLimiter rates, per source address, the requests without valid
// credentials. It remembers at most maxSources sources; past that it
// forgets those whose bucket is full again (idle), then half of them.
type sourceLimiter struct {
	limit rate.Limit
	burst int

	mu      sync.Mutex
	sources map[string]*rate.Limiter
}

// maxSources bounds the sources a sourceLimiter remembers.
const maxSources = 10000

func newSourceLimiter(limit rate.Limit, burst int) *sourceLimiter {
	return &sourceLimiter{limit: limit, burst: burst, sources: map[string]*rate.Limiter{}}
}

// allows reports whether the source of addr has a failure left: its
// requests are refused before any review when it has none.
func (l *sourceLimiter) allows(addr string) bool {
	return l.limiter(sourceOf(addr)).Tokens() >= 1
}

// failed counts a request of the source of addr that came without valid
// credentials. Only failures are counted, when they happen: a token
// taken up front and given back (rate.Reservation.Cancel) is given back
// only in part when other requests of the source took tokens meanwhile.
func (l *sourceLimiter) failed(addr string) {
	l.limiter(sourceOf(addr)).Allow()
}

// limiter returns the limiter of src, made when new.
func (l *sourceLimiter) limiter(src string) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim, ok := l.sources[src]
	if !ok {
		if len(l.sources) >= maxSources {
			l.forget(time.Now())
		}
		lim = rate.NewLimiter(l.limit, l.burst)
		l.sources[src] = lim
	}
	return lim
}

// forget drops the idle sources, then half of the others if that was not
// enough. l.mu is held.
func (l *sourceLimiter) forget(now time.Time) {
	for src, lim := range l.sources {
		if lim.TokensAt(now) >= float64(l.burst) {
			delete(l.sources, src)
		}
	}
	for src := range l.sources {
		if len(l.sources) < maxSources/2 {
			break
		}
		delete(l.sources, src)
	}
}

// sourceOf is the source of a remote address: its IP, or the /64 of an
// IPv6 address (one host's usual share).
func sourceOf(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	ip := net.ParseIP(host)
	switch {
	case ip == nil:
		return host
	case ip.To4() != nil:
		return ip.String()
	}
	return (&net.IPNet{IP: ip.Mask(net.CIDRMask(64, 128)), Mask: net.CIDRMask(64, 128)}).String()
}
