package web

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// DefaultCacheTTL is how long a TokenReview's or a SubjectAccessReview's
// answer is reused.
const DefaultCacheTTL = 10 * time.Second

// cacheMax bounds each cache: tokens and users come from outside.
const cacheMax = 10000

// caller is who asks: everything (a loopback request without a token),
// or an authenticated user whose access is reviewed.
type caller struct {
	all  bool
	user authenticationv1.UserInfo
	// key identifies the user in the decision cache.
	key string
}

// name is the caller's name for logs and the page.
func (c *caller) name() string {
	if c.all {
		return "loopback (no token: everything)"
	}
	return c.user.Username
}

// errUnauthenticated is the error of a request that must carry a valid
// bearer token.
var errUnauthenticated = errors.New("unauthenticated")

// authorizer authenticates callers and decides what they may read.
type authorizer struct {
	kube kubernetes.Interface
	ttl  time.Duration
	now  func() time.Time

	tokens    ttlCache[authenticationv1.UserInfo] // by the token's SHA-256; Username "" when not authenticated
	decisions ttlCache[bool]                      // by user key and resource
}

func newAuthorizer(kube kubernetes.Interface, ttl time.Duration) *authorizer {
	return &authorizer{kube: kube, ttl: ttl, now: time.Now,
		tokens:    ttlCache[authenticationv1.UserInfo]{m: map[string]cached[authenticationv1.UserInfo]{}},
		decisions: ttlCache[bool]{m: map[string]cached[bool]{}}}
}

// authenticate returns who made r: the user of its bearer token (a
// TokenReview), or everything for a loopback request without one.
func (a *authorizer) authenticate(ctx context.Context, r *http.Request) (*caller, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		if loopback(r.RemoteAddr) {
			return &caller{all: true}, nil
		}
		return nil, fmt.Errorf("%w: a bearer token is required (Authorization: Bearer TOKEN, such as `kubectl create token NAME`); only loopback requests are served without one", errUnauthenticated)
	}
	scheme, token, ok := strings.Cut(h, " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "bearer") || token == "" {
		return nil, fmt.Errorf("%w: the Authorization header is not a bearer token", errUnauthenticated)
	}
	sum := sha256.Sum256([]byte(token))
	key := string(sum[:])
	user, ok := a.tokens.get(key, a.now())
	if !ok {
		review, err := a.kube.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
			Spec: authenticationv1.TokenReviewSpec{Token: token},
		}, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("token review: %w", err)
		}
		if review.Status.Authenticated {
			user = review.Status.User
		}
		a.tokens.put(key, user, a.now().Add(a.ttl))
	}
	if user.Username == "" {
		return nil, fmt.Errorf("%w: the token is not valid", errUnauthenticated)
	}
	return &caller{user: user, key: userKey(user)}, nil
}

// userKey identifies a user's identity (name, uid, groups, extra) in the
// decision cache.
func userKey(u authenticationv1.UserInfo) string {
	var b strings.Builder
	b.WriteString(u.Username)
	b.WriteByte(0)
	b.WriteString(u.UID)
	for _, g := range u.Groups {
		b.WriteByte(0)
		b.WriteString(g)
	}
	for k, vs := range u.Extra {
		b.WriteByte(1)
		b.WriteString(k)
		for _, v := range vs {
			b.WriteByte(0)
			b.WriteString(v)
		}
	}
	return b.String()
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

// readVerb is the verb a caller needs on a resource to see its entries.
const readVerb = "get"

// allowed reports whether c may get resource (of group) in namespace
// ("" for cluster-scoped resources: cluster-wide access).
func (a *authorizer) allowed(ctx context.Context, c *caller, group, resource, namespace string) (bool, error) {
	if c.all {
		return true, nil
	}
	key := c.key + "\x02" + group + "\x00" + resource + "\x00" + namespace
	if ok, hit := a.decisions.get(key, a.now()); hit {
		return ok, nil
	}
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range c.user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	review, err := a.kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: c.user.Username, UID: c.user.UID, Groups: c.user.Groups, Extra: extra,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: namespace, Verb: readVerb, Group: group, Resource: resource},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("subject access review: %w", err)
	}
	a.decisions.put(key, review.Status.Allowed, a.now().Add(a.ttl))
	return review.Status.Allowed, nil
}

// ttlCache is a map whose values expire, bounded to cacheMax entries.
type ttlCache[V any] struct {
	mu sync.Mutex
	m  map[string]cached[V]
}

type cached[V any] struct {
	v       V
	expires time.Time
}

func (c *ttlCache[V]) get(key string, now time.Time) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok || now.After(e.expires) {
		var zero V
		return zero, false
	}
	return e.v, true
}

func (c *ttlCache[V]) put(key string, v V, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= cacheMax {
		now := time.Now()
		for k, e := range c.m {
			if now.After(e.expires) {
				delete(c.m, k)
			}
		}
		if len(c.m) >= cacheMax {
			clear(c.m)
		}
	}
	c.m[key] = cached[V]{v: v, expires: expires}
}
