package web

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/fieldwatch/fieldwatch/internal/history"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// The tests of the probe of the history API (each finding a test): a
// forged-token flood fails fast, access is decided before entries are
// read and bounds the bytes, a request goes through at most the scan
// window, loopback is everything only when asked and for a loopback
// Host, cursors and timing tell nothing, `list` is needed to enumerate,
// malformed query strings are refused.

// countingStore counts the queries a Server makes.
type countingStore struct {
	history.Store
	queries atomic.Int64
}

func (c *countingStore) Query(ctx context.Context, q history.Query) (history.Page, error) {
	c.queries.Add(1)
	return c.Store.Query(ctx, q)
}

// bulk is a history of 45,000 generated entries (more than two scan
// windows) and the seed's, shared by the tests that only read it; closed
// and removed when the tests are done (TestMain).
var bulk struct {
	once  sync.Once
	store history.Store
	dir   string
	close []func()
}

func bulkHistory(t *testing.T) history.Store {
	t.Helper()
	testenv.SkipShort(t, testenv.NeedsControlPlane) // its readers do: skip before seeding
	bulk.once.Do(func() {
		dir, err := os.MkdirTemp("", "fieldwatch-web-test-")
		if err != nil {
			t.Fatal(err)
		}
		bulk.dir = dir
		bulk.store = seed(&shared{T: t}, 45000)
	})
	if bulk.store == nil {
		t.Fatal("the shared history could not be made")
	}
	return bulk.store
}

// closeBulk closes the shared history and removes its directory.
func closeBulk() {
	for _, f := range bulk.close {
		f()
	}
	if bulk.dir != "" {
		_ = os.RemoveAll(bulk.dir)
	}
}

// shared is the testing.TB that makes the shared history: its clean-ups
// and temporary directory outlive the test (closeBulk).
type shared struct{ *testing.T }

func (s *shared) Cleanup(f func()) { bulk.close = append(bulk.close, f) }
func (s *shared) TempDir() string  { return bulk.dir }
func (s *shared) Helper()          {}
func (s *shared) Name() string     { return "shared" }

// get asks base+path as token ("" for none) with Host host ("" for the
// URL's) and returns the status, the headers and the body.
func get(t *testing.T, base, path, token, host string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(body)
}

// TestLoopbackNeedsTheFlagAndALoopbackHost: a token-less request from
// loopback is everything only with Options.InsecureLoopback, and only to
// a Host of localhost, 127.0.0.1 or [::1]: a page elsewhere that a
// browser sends to a port-forward by DNS rebinding names its own host.
// Without the flag the API asks for a token, and the page for Basic
// credentials whose password is one. Before, every loopback request
// without a token read everything, whatever its Host.
func TestLoopbackNeedsTheFlagAndALoopbackHost(t *testing.T) {
	store := seed(t, 0)
	r := newReaders(t)
	_, strict := serve(t, store, func(o *Options) { o.InsecureLoopback = false })
	_, open := serve(t, store)
	port := open[strings.LastIndex(open, ":"):]
	for _, tc := range []struct {
		name, base, host, token string
		code, entries           int
	}{
		{"no flag", strict, "", "", http.StatusUnauthorized, 0},
		{"no flag, a token", strict, "", r.shop, http.StatusOK, 4},
		{"the flag, Host 127.0.0.1", open, "", "", http.StatusOK, 6},
		{"the flag, Host localhost", open, "localhost" + port, "", http.StatusOK, 6},
		{"the flag, Host [::1]", open, "[::1]" + port, "", http.StatusOK, 6},
		{"the flag, Host LOCALHOST without a port", open, "LOCALHOST", "", http.StatusOK, 6},
		{"the flag, another Host", open, "attacker.example" + port, "", http.StatusUnauthorized, 0},
		{"the flag, a Host that starts like localhost", open, "localhost.attacker.example" + port, "", http.StatusUnauthorized, 0},
		{"the flag, another Host, a token", open, "attacker.example" + port, r.lab, http.StatusOK, 2},
	} {
		code, h, body := get(t, tc.base, "/api/v1/history", tc.token, tc.host)
		if code != tc.code || (code == http.StatusOK && strings.Count(body, `"seq":`) != tc.entries) {
			t.Errorf("%s: %d with %d entries, want %d with %d\n%s", tc.name, code, strings.Count(body, `"seq":`), tc.code, tc.entries, body)
		}
		if code == http.StatusUnauthorized && !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: WWW-Authenticate %q", tc.name, h.Get("WWW-Authenticate"))
		}
	}
	// The page asks a browser for a token: Basic credentials whose
	// password is one.
	code, h, body := get(t, strict, "/history", "", "")
	if code != http.StatusUnauthorized || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Basic ") || !strings.Contains(body, "bearer token is required") {
		t.Errorf("the page without a token: %d %q\n%s", code, h.Get("WWW-Authenticate"), body)
	}
	req, _ := http.NewRequest(http.MethodGet, strict+"/history", nil)
	req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("anyone:"+r.lab)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), "lab/w2") || strings.Contains(string(page), "shop/w1") {
		t.Errorf("the page with Basic credentials: %d\n%s", resp.StatusCode, page)
	}
}

// TestMalformedQueryRefused: a query string that does not parse is
// refused (400), on the API and the pages; url.Values dropped the pair,
// and ?namespace=shop;x returned every namespace's entries.
func TestMalformedQueryRefused(t *testing.T) {
	_, base := serve(t, seed(t, 0))
	r := newReaders(t)
	for _, path := range []string{
		"/api/v1/history?namespace=lab;x", "/api/v1/history?namespace=lab&x;y=1", "/api/v1/history?namespace=%zz", "/api/v1/history?namespace=lab%",
		"/history?namespace=lab;x", "/history/object?uid=w2-uid;x", "/history/object?uid=%g0",
	} {
		code, _, body := get(t, base, path, r.shop, "")
		if code != http.StatusBadRequest || !strings.Contains(body, "does not parse") {
			t.Errorf("%s: %d, want 400 saying the query does not parse\n%s", path, code, body)
		}
	}
	// Escaped, the same characters are a value like any other.
	if code, _, body := get(t, base, "/api/v1/history?namespace=lab%3Bx", r.shop, ""); code != http.StatusOK || strings.Count(body, `"seq":`) != 0 {
		t.Errorf("namespace=lab%%3Bx: %d\n%s", code, body)
	}
}

// grant binds the service account sa (in ns) to a Role in ns with rules,
// or to a ClusterRole when ns is "", and waits until verb on
// resource (or the non-resource path) is allowed.
func grant(t *testing.T, saNS, sa, ns string, rule rbacv1.PolicyRule) {
	t.Helper()
	env := testenv.Shared(t)
	cs := env.Clientset(t)
	ctx := context.Background()
	name := "hist-" + saNS + "-" + sa
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: saNS}}
	var err error
	if ns == "" {
		_, err = cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{rule}}, metav1.CreateOptions{})
		if err == nil || apierrors.IsAlreadyExists(err) {
			_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}, Subjects: subjects}, metav1.CreateOptions{})
		}
	} else {
		env.EnsureNamespace(t, ns)
		_, err = cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{rule}}, metav1.CreateOptions{})
		if err == nil || apierrors.IsAlreadyExists(err) {
			_, err = cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}, Subjects: subjects}, metav1.CreateOptions{})
		}
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// TestListNeededToEnumerate: `get` alone on a resource shows the entries
// of the object the query names, not the others: listing, in
// Kubernetes, is what shows which objects exist (and which did).
// Before, `get` showed every entry of the resource, names and deleted
// objects included.
func TestListNeededToEnumerate(t *testing.T) {
	_, base := serve(t, seed(t, 0))
	env := testenv.Shared(t)
	token := env.ServiceAccountToken(t, "shop", "getter")
	grant(t, "shop", "getter", "shop", rbacv1.PolicyRule{APIGroups: []string{"example.com"}, Resources: []string{"widgets"}, Verbs: []string{"get"}})
	testenv.Eventually(t, 30*time.Second, "the getter's grant to reach the authorizer", func() bool {
		_, _, body := get(t, base, "/api/v1/history?namespace=shop&name=w1", token, "")
		return strings.Count(body, `"seq":`) == 3
	})
	for _, tc := range []struct {
		query   string
		entries int
	}{
		{"", 0},
		{"?namespace=shop", 0},
		{"?resource=widgets.example.com", 0},
		{"?namespace=shop&name=w1", 3},
		{"?name=w1", 3},
		{"?namespace=shop&name=w9", 0},
		{"?namespace=lab&name=w2", 0},
	} {
		code, _, body := get(t, base, "/api/v1/history"+tc.query, token, "")
		if code != http.StatusOK || strings.Count(body, `"seq":`) != tc.entries {
			t.Errorf("%q: %d with %d entries, want %d\n%s", tc.query, code, strings.Count(body, `"seq":`), tc.entries, body)
		}
	}
}

// TestActorDetails: a caller sees who made a change (usernames, field
// manager, verb, match) in every entry it may read; the user's uid and
// groups, the user agent and the source IPs only with `get` on the
// non-resource URL ActorsPath.
func TestActorDetails(t *testing.T) {
	_, base := serve(t, seed(t, 0))
	env := testenv.Shared(t)
	r := newReaders(t)
	_, _, body := get(t, base, "/api/v1/history?namespace=lab", r.lab, "")
	if !strings.Contains(body, `"actor":{"user":{"username":"carol"},"verb":"patch","match":"window"}`) ||
		strings.Contains(body, "system:authenticated") || strings.Contains(body, "kubectl/v1.37.2") {
		t.Errorf("the lab reader without ActorsPath:\n%s", body)
	}
	auditor := env.ServiceAccountToken(t, "lab", "auditor")
	env.GrantRead(t, "lab", "auditor", "example.com", "widgets", "lab")
	grant(t, "lab", "auditor", "", rbacv1.PolicyRule{NonResourceURLs: []string{ActorsPath}, Verbs: []string{"get"}})
	testenv.Eventually(t, 30*time.Second, "the auditor to see the actor details", func() bool {
		_, _, body = get(t, base, "/api/v1/history?namespace=lab", auditor, "")
		return strings.Contains(body, `"groups":["system:authenticated"]`) && strings.Contains(body, `"userAgent":"kubectl/v1.37.2"`)
	})
}

// TestCursorsTellNothing: where a page ends depends on the history, not
// on what matches nor on what the caller may read, and the cursor is
// sealed: a caller who may read lab only gets the same answer for a
// user with thousands of entries elsewhere as for one with none. Before,
// the first answer carried a cursor with a hidden entry's time and the
// second none.
func TestCursorsTellNothing(t *testing.T) {
	s, base := serve(t, bulkHistory(t))
	r := newReaders(t)
	shape := func(query string) (int, string) {
		t.Helper()
		code, p, body := getPage(t, base+"/api/v1/history"+query, r.lab)
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", query, code, body)
		}
		return len(p.Entries), p.Next
	}
	n1, next1 := shape("?user=bot-1")
	n2, next2 := shape("?user=nobody")
	if n1 != 0 || n2 != 0 || next1 == "" || next2 == "" {
		t.Errorf("bot-1: %d entries, next %q; nobody: %d entries, next %q: want the same answer, no entries and a cursor", n1, next1, n2, next2)
	}
	if next1 == next2 || strings.Trim(next1, "0123456789-") == "" {
		t.Errorf("cursors %q and %q: want them sealed, each sealed afresh", next1, next2)
	}
	c1, err1 := s.cursors.open(next1)
	c2, err2 := s.cursors.open(next2)
	if err1 != nil || err2 != nil || c1 != c2 {
		t.Errorf("the two cursors open to %v (%v) and %v (%v): want the same place", c1, err1, c2, err2)
	}
	// A cursor written by hand, or by another server, is refused.
	for _, forged := range []string{"1764579600000000-5", next1[:len(next1)-2] + "AA"} {
		if code, _, body := getPage(t, base+"/api/v1/history?cursor="+forged, r.lab); code != http.StatusBadRequest || !strings.Contains(body, "not a cursor this server returned") {
			t.Errorf("cursor %q: %d %s", forged, code, body)
		}
	}
	// The pages' links carry sealed cursors that the API takes.
	code, _, page := get(t, base, "/history", r.lab, "")
	if !strings.Contains(page, "cursor=") {
		t.Errorf("the timeline (%d) has no link to older entries:\n%s", code, page)
	}
}

// TestUnreadableNamespaceAnswersAsAnEmptyOne: a caller who may read
// nothing in a namespace is answered without the store being read,
// whether the namespace holds entries or not: its answer takes the same
// work. Before, the unreadable namespace's entries were read and
// checked, and it answered measurably slower than an empty one.
func TestUnreadableNamespaceAnswersAsAnEmptyOne(t *testing.T) {
	store := &countingStore{Store: bulkHistory(t)}
	s, base := serve(t, store)
	r := newReaders(t)
	getPage(t, base+"/api/v1/history?namespace=lab", r.lab) // the decisions cached
	for _, ns := range []string{"bulk-3", "no-such-namespace"} {
		queries, scanned := store.queries.Load(), testutil.ToFloat64(s.scanned)
		code, p, body := getPage(t, base+"/api/v1/history?namespace="+ns, r.lab)
		if code != http.StatusOK || len(p.Entries) != 0 || p.Next != "" {
			t.Errorf("namespace %s: %d, %d entries, next %q\n%s", ns, code, len(p.Entries), p.Next, body)
		}
		if q, sc := store.queries.Load()-queries, testutil.ToFloat64(s.scanned)-scanned; q != 0 || sc != 0 {
			t.Errorf("namespace %s: %d store queries, %v entries scanned; want none", ns, q, sc)
		}
	}
}

// TestScanBoundPerRequest: a filter that matches nothing goes through at
// most the scan window (20,000 entries) a request, whoever asks, and the
// answer's cursor goes on from there. Before, the API went on through
// the whole history within one request (a million entries: 0.8-1.5 s,
// and 16 such requests at once made it answer 503 to everyone).
func TestScanBoundPerRequest(t *testing.T) {
	store := &countingStore{Store: bulkHistory(t)}
	// The bound is on entries, which the test counts: under -race on a
	// loaded machine a window of 20,000 can take longer than the default
	// 10 s a request.
	s, base := serve(t, store, func(o *Options) { o.Timeout = 2 * time.Minute })
	r := newReaders(t)
	for _, token := range []string{"", r.lab} {
		query, pages := "?name=nonexistent", 0
		for {
			queries, scanned := store.queries.Load(), testutil.ToFloat64(s.scanned)
			code, p, body := getPage(t, base+"/api/v1/history"+query, token)
			if code != http.StatusOK || len(p.Entries) != 0 {
				t.Fatalf("%s: %d %s", query, code, body)
			}
			if q, sc := store.queries.Load()-queries, testutil.ToFloat64(s.scanned)-scanned; q != 1 || sc > 20000 {
				t.Errorf("token %v, page %d: %d store queries, %v entries scanned; want one of at most 20,000", token != "", pages, q, sc)
			}
			pages++
			if p.Next == "" || pages > 5 {
				break
			}
			query = "?name=nonexistent&cursor=" + p.Next
		}
		if pages != 3 {
			t.Errorf("token %v: %d pages to go through 45,006 entries, want 3", token != "", pages)
		}
	}
}

// bigEntries writes n Widget entries of about size bytes each, in lab
// and shop by turns, into store.
func bigEntries(t *testing.T, store history.Store, n, size int) {
	t.Helper()
	t0 := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	value := strings.Repeat("x", size)
	for i := range n {
		ns := []string{"lab", "shop"}[i%2]
		payload := fmt.Appendf(nil, `{"id":"big-%d/1/widget-audit","time":%q,"rule":"widget-audit","type":"updated",`+
			`"resource":{"group":"example.com","version":"v1","resource":"widgets","kind":"Widget"},"namespace":%q,"name":"big-%d","uid":"big-%d","resourceVersion":"1",`+
			`"changes":[{"op":"replace","path":"/spec/text","value":%q,"oldValue":"y"}]}`, i, t0.Add(time.Duration(i)*time.Second).Format(time.RFC3339Nano), ns, i, i, value)
		e, err := history.ParsePayload(payload, history.Delivered)
		if err != nil {
			t.Fatal(err)
		}
		e.Recorded = e.Time
		if _, err := store.Write(context.Background(), []history.Entry{e}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLargeEntriesWithinTheBytesBound: a restricted caller's request over
// entries of 2 MB allocates no more than a few times the response bound,
// measured in bytes allocated, not time; an entry larger than the bound
// comes without its payload; past the bytes in flight a request is
// refused (429). Before, a page of up to 1,000 entries was loaded before
// access was checked: 100 entries of 3.7 MB took the pod from 154 MB to
// 521 MB, four requests to 1.79 GB.
func TestLargeEntriesWithinTheBytesBound(t *testing.T) {
	testenv.SkipShort(t, testenv.NeedsControlPlane) // before writing 80 MB of entries
	store, err := history.OpenSQLite(filepath.Join(t.TempDir(), "history.db"), history.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	const entries, size = 40, 2 << 20
	bigEntries(t, store, entries, size)
	r := newReaders(t)
	s, base := serve(t, store)
	getPage(t, base+"/api/v1/history?limit=1", r.lab) // the decisions cached
	allocated := func(path string) (uint64, int, string) {
		t.Helper()
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		req.Header.Set("Authorization", "Bearer "+r.lab)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		runtime.ReadMemStats(&after)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
		return after.TotalAlloc - before.TotalAlloc, int(n), resp.Header.Get("Content-Type")
	}
	got, n, _ := allocated("/api/v1/history?limit=1000")
	t.Logf("a request over %d entries of %d MiB: %d bytes answered, %.1f MiB allocated (bound %d MiB)", entries, size>>20, n, float64(got)/(1<<20), DefaultMaxResponseBytes>>20)
	if got > 4*DefaultMaxResponseBytes {
		t.Errorf("a request allocated %.1f MiB, more than four times the response bound (%d MiB)", float64(got)/(1<<20), DefaultMaxResponseBytes>>20)
	}
	if n > DefaultMaxResponseBytes+64<<10 {
		t.Errorf("the answer holds %d bytes, over the response bound %d", n, DefaultMaxResponseBytes)
	}
	if got, _, _ := allocated("/history"); got > 4*DefaultMaxResponseBytes {
		t.Errorf("the timeline allocated %.1f MiB", float64(got)/(1<<20))
	}
	_, small := serve(t, store, func(o *Options) { o.MaxResponseBytes = 1 << 20 })
	if code, _, page := get(t, small, "/history", r.lab, ""); code != http.StatusOK || !strings.Contains(page, "too large to show here") {
		t.Errorf("the timeline over a 1 MiB bound: %d", code)
	}

	// An entry over the response bound comes without its payload.
	code, p, body := getPage(t, small+"/api/v1/history?limit=3", r.lab)
	if code != http.StatusOK || len(p.Entries) != 3 {
		t.Fatalf("over a 1 MiB bound: %d %.300s", code, body)
	}
	for _, e := range p.Entries {
		h, err := history.ParsePayload(e.Payload, e.Source)
		if e.Omitted < size || err != nil || h.Namespace != "lab" || strings.Contains(string(e.Payload), "xxxx") {
			t.Errorf("an entry over the bound: omitted %d, %v, %s", e.Omitted, err, e.Payload)
		}
	}

	// Past the bytes in flight: 429, and nothing read.
	s.budget.used.Add(s.budget.max)
	code, _, body = getPage(t, base+"/api/v1/history?limit=5", r.lab)
	s.budget.used.Add(-s.budget.max)
	if code != http.StatusTooManyRequests || !strings.Contains(body, "--history-max-bytes-in-flight") {
		t.Errorf("with the bytes in flight at their bound: %d %s", code, body)
	}
	if v := testutil.ToFloat64(s.throttled.WithLabelValues("memory")); v != 1 {
		t.Errorf("throttled{reason=memory} = %v, want 1", v)
	}
	if used := s.budget.used.Load(); used != 0 {
		t.Errorf("%d bytes still held once the requests are answered", used)
	}
}

// reviewCounter counts the TokenReviews a client configuration sends.
type reviewCounter struct{ n atomic.Int64 }

func (c *reviewCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if strings.HasSuffix(r.URL.Path, "/tokenreviews") {
			c.n.Add(1)
		}
		return rt.RoundTrip(r)
	})
}

// TestForgedTokensFailFast: a flood of forged tokens from many sources
// is answered at once, 401 or 429, while the TokenReviews stay within the
// review client's rate and burst, and a caller whose token was reviewed
// already is served throughout; from one source, past its failures'
// burst, requests are refused before any review. Before, each forged
// token's TokenReview queued behind the process's client-side rate limit,
// which the Lease renewals share.
func TestForgedTokensFailFast(t *testing.T) {
	env := testenv.Shared(t)
	counter := &reviewCounter{}
	cfg := rest.CopyConfig(env.Config())
	cfg.Wrap(counter.wrap)
	const qps, burst, sources = 5, 10, 200
	s, base := serve(t, seed(t, 0), func(o *Options) {
		o.Rest = cfg
		o.Auth = AuthOptions{QPS: qps, Burst: burst, MaxInFlight: 4, FailuresBurst: 3}
	})
	mux := http.NewServeMux()
	s.Register(mux)
	r := newReaders(t)
	if code, _, _ := get(t, base, "/api/v1/history", r.lab, ""); code != http.StatusOK {
		t.Fatalf("the lab reader: %d", code)
	}
	start := time.Now()
	reviews := counter.n.Load()
	var codes sync.Map
	var wg sync.WaitGroup
	for i := range sources {
		wg.Go(func() {
			req := httptest.NewRequest(http.MethodGet, "/api/v1/history", nil)
			req.RemoteAddr = fmt.Sprintf("10.0.%d.%d:40000", i/250, i%250+1)
			req.Header.Set("Authorization", fmt.Sprintf("Bearer forged-%d", i))
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, req)
			n, _ := codes.LoadOrStore(rec.Code, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
		})
	}
	// The reviewed caller meanwhile.
	if code, _, body := get(t, base, "/api/v1/history", r.lab, ""); code != http.StatusOK {
		t.Errorf("the lab reader during the flood: %d %s", code, body)
	}
	wg.Wait()
	elapsed := time.Since(start)
	made := counter.n.Load() - reviews
	count := func(code int) int64 {
		if n, ok := codes.Load(code); ok {
			return n.(*atomic.Int64).Load()
		}
		return 0
	}
	t.Logf("%d forged tokens from %d sources in %s: %d answered 401, %d 429; %d TokenReviews", sources, sources, elapsed.Round(time.Millisecond),
		count(http.StatusUnauthorized), count(http.StatusTooManyRequests), made)
	if count(http.StatusUnauthorized)+count(http.StatusTooManyRequests) != sources {
		codes.Range(func(k, v any) bool { t.Errorf("%d answered %d", v.(*atomic.Int64).Load(), k); return true })
	}
	if limit := int64(burst + qps*elapsed.Seconds() + 1); made > limit {
		t.Errorf("%d TokenReviews in %s, over the client's burst and rate (%d)", made, elapsed, limit)
	}
	if count(http.StatusTooManyRequests) == 0 {
		t.Errorf("no request refused with 429")
	}

	// One source: past its burst of failures, refused before a review
	// (once the review client has its burst again).
	testenv.Eventually(t, 30*time.Second, "the review client's burst", func() bool { return s.auth.reviews.tokens.Tokens() >= burst-1 })
	reviews = counter.n.Load()
	var refused int
	for i := range 20 {
		req := httptest.NewRequest(http.MethodGet, "/api/v1/history", nil)
		req.RemoteAddr = "10.9.9.9:50000"
		req.Header.Set("Authorization", fmt.Sprintf("Bearer forged-again-%d", i))
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		if rec.Code == http.StatusTooManyRequests && strings.Contains(rec.Body.String(), "from 10.9.9.9") {
			refused++
		}
	}
	if made := counter.n.Load() - reviews; made > 3+1 || refused < 16 {
		t.Errorf("one source, 20 forged tokens: %d TokenReviews, %d refused as the source's; want at most 4 and at least 16", made, refused)
	}

	// Valid credentials count for nothing against their source, however
	// many come at once.
	var notOK atomic.Int64
	for range 40 {
		wg.Go(func() {
			req := httptest.NewRequest(http.MethodGet, "/api/v1/history", nil)
			req.RemoteAddr = "10.7.7.7:50000"
			req.Header.Set("Authorization", "Bearer "+r.lab)
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				notOK.Add(1)
			}
		})
	}
	wg.Wait()
	if n := notOK.Load(); n > 0 {
		t.Errorf("%d of 40 requests with a valid token from one source at once were refused", n)
	}
}
