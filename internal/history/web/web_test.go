package web

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/internal/history"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m, testenv.Options{}, closeBulk) }

// serve runs a Server over store on 127.0.0.1 for the test, serving
// token-less loopback requests (Options.InsecureLoopback); edit, when
// not nil, changes its options.
func serve(t *testing.T, store history.Store, edit ...func(*Options)) (*Server, string) {
	t.Helper()
	env := testenv.Shared(t)
	opts := Options{Store: store, Rest: env.Config(), InsecureLoopback: true}
	for _, e := range edit {
		e(&opts)
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	s.Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return s, srv.URL
}

// readers are service accounts of the shared control plane: shop may get
// Widgets in shop and CRDs; lab may get Widgets in lab only.
type readers struct{ shop, lab, none string }

func newReaders(t *testing.T) readers {
	t.Helper()
	env := testenv.Shared(t)
	r := readers{
		shop: env.ServiceAccountToken(t, "shop", "shop-reader"),
		lab:  env.ServiceAccountToken(t, "lab", "lab-reader"),
		none: env.ServiceAccountToken(t, "shop", "nobody"),
	}
	env.GrantRead(t, "shop", "shop-reader", "example.com", "widgets", "shop")
	env.GrantRead(t, "shop", "shop-reader", "apiextensions.k8s.io", "customresourcedefinitions", "")
	env.GrantRead(t, "lab", "lab-reader", "example.com", "widgets", "lab")
	return r
}

// getPage asks the API as token ("" for none) and returns the status and
// the page.
func getPage(t *testing.T, url, token string) (int, APIPage, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	var p APIPage
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatalf("%s: %v: %s", url, err, body)
		}
	}
	return resp.StatusCode, p, string(body)
}

// objects returns namespace/name of a page's entries.
func objects(t *testing.T, p APIPage) []string {
	t.Helper()
	var out []string
	for _, e := range p.Entries {
		en, err := history.ParsePayload(e.Payload, e.Source)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, en.Namespace+"/"+en.Name)
	}
	return out
}

// TestAPIAuthorization: against the real apiserver's TokenReview and
// SubjectAccessReview, each caller sees the entries of what it may get,
// and a CRD change's objects hit only in the namespaces it may read
// (the others counted in "hidden", the keys in their order); without a
// token only loopback is served.
func TestAPIAuthorization(t *testing.T) {
	s, base := serve(t, seed(t, 0))
	r := newReaders(t)
	for _, tc := range []struct {
		name, token string
		want        []string
	}{
		{"loopback without a token", "", []string{"/widgets.example.com", "shop/w1", "lab/w2", "shop/w1", "lab/w2", "shop/w1"}},
		{"shop reader", r.shop, []string{"/widgets.example.com", "shop/w1", "shop/w1", "shop/w1"}},
		{"lab reader", r.lab, []string{"lab/w2", "lab/w2"}},
		{"nobody", r.none, nil},
	} {
		code, p, body := getPage(t, base+"/api/v1/history", tc.token)
		if code != http.StatusOK || !slices.Equal(objects(t, p), tc.want) {
			t.Errorf("%s: %d %v, want %v\n%s", tc.name, code, objects(t, p), tc.want, body)
		}
	}
	// The shop reader sees the CRD change's object in shop, not lab's.
	_, p, _ := getPage(t, base+"/api/v1/history?resource=customresourcedefinitions", r.shop)
	if len(p.Entries) != 1 {
		t.Fatalf("CRD entries: %d", len(p.Entries))
	}
	payload := string(p.Entries[0].Payload)
	if strings.Contains(payload, `"lab"`) || !strings.Contains(payload, `"namespace":"shop","name":"w9"`) ||
		!strings.Contains(payload, `"objects":[{"namespace":"shop","name":"w9","field":"spec.color","error":"spec.color: Unsupported value: \"green\""}],"message":"2 object(s) fail the new schema at spec.color","hidden":1}`) {
		t.Errorf("the shop reader's CRD payload:\n%s", payload)
	}
	if _, p, _ := getPage(t, base+"/api/v1/history?resource=customresourcedefinitions", ""); !strings.Contains(string(p.Entries[0].Payload), `"lab"`) ||
		strings.Contains(string(p.Entries[0].Payload), "hidden") {
		t.Errorf("loopback's CRD payload lacks lab's object: %s", p.Entries[0].Payload)
	}
	if code, _, body := getPage(t, base+"/api/v1/history", "forged"); code != http.StatusUnauthorized || !strings.Contains(body, "the token is not valid") {
		t.Errorf("a forged token: %d %s", code, body)
	}
	// Without a token from elsewhere than loopback: 401, said why.
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/api/v1/history", nil)
	req.RemoteAddr = "10.1.2.3:40000"
	mux := http.NewServeMux()
	s.Register(mux)
	mux.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), "a bearer token is required") {
		t.Errorf("no token from 10.1.2.3: %d %s", rec.Code, rec.Body.String())
	}
	if resp, err := http.Post(base+"/api/v1/history", "application/json", strings.NewReader("{}")); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %v %v", resp, err)
	}
	if code, _, body := getPage(t, base+"/api/v1/history?limit=-1", ""); code != http.StatusBadRequest || !strings.Contains(body, `parameter \"limit\"`) {
		t.Errorf("limit=-1: %d %s", code, body)
	}
}

// TestTimelineGaps: the timeline shows the trail's gap records written
// within its page, to every reader, with their count, time range and
// reasons, and without their ids (of objects a reader may not read).
func TestTimelineGaps(t *testing.T) {
	store := seed(t, 0)
	at := time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC)
	body, _ := json.Marshal(history.GapBody{Count: 3, From: at, To: at.Add(time.Second), IDs: []string{"hidden-uid/1/widget-audit"},
		Reasons: map[string]int64{"queueFull": 2, "storeFailed": 1}})
	if err := store.(history.Trail).Append(context.Background(), []history.Record{{Kind: history.LinkGap, Body: body}}); err != nil {
		t.Fatal(err)
	}
	_, base := serve(t, store)
	r := newReaders(t)
	for who, token := range map[string]string{"loopback": "", "the lab reader": r.lab} {
		req, _ := http.NewRequest(http.MethodGet, base+"/history", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		html := string(page)
		if resp.StatusCode != http.StatusOK || !strings.Contains(html, "did not keep <strong>3 payloads</strong> observed from 2026-12-01T09:30:00Z to 2026-12-01T09:30:01Z") ||
			!strings.Contains(html, "queueFull: 2, storeFailed: 1") || strings.Contains(html, "hidden-uid") {
			t.Errorf("as %s: %s\n%s", who, resp.Status, html)
		}
	}
}
