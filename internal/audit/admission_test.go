package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// serveAdmission serves a on 127.0.0.1 until the test ends and returns
// its base URL.
func serveAdmission(t testing.TB, a *Admission) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return "https://" + ln.Addr().String()
}

// post sends body to url and returns the code and the response.
func post(t testing.TB, c *http.Client, url string, body []byte, header ...string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// allowedUID returns the uid of an allowed answer, or fails.
func allowedUID(t testing.TB, body []byte) string {
	t.Helper()
	var rv admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &rv); err != nil || rv.Response == nil || !rv.Response.Allowed ||
		rv.APIVersion != "admission.k8s.io/v1" || rv.Kind != "AdmissionReview" {
		t.Fatalf("answer %s (%v): want an allowed AdmissionReview", body, err)
	}
	return string(rv.Response.UID)
}

// TestAdmissionEndpoint: every review it can read is answered allowed
// with its uid, and kept when it is a selected write; what it cannot read
// gets a clear refusal, counted, and nothing is kept of it.
func TestAdmissionEndpoint(t *testing.T) {
	p := newWebhookPKI(t, t.TempDir())
	sink := &recordingSink{}
	m := NewAdmissionMetrics(nil)
	a, err := NewAdmission(AdmissionOptions{CertFile: p.certFile, KeyFile: p.keyFile, MaxBodyBytes: 8 << 20, Metrics: m,
		Keep:   func(group, resource string) bool { return resource == "configmaps" },
		Logger: slog.New(slog.DiscardHandler)}, sink)
	if err != nil {
		t.Fatal(err)
	}
	url := serveAdmission(t, a) + AdmissionPath
	c := httpsClient(t, p.ca.CertPEM, nil, nil)
	obj, old := cmJSON("cm", "u1", "6", "b"), cmJSON("cm", "u1", "5", "a")
	good := reviewOf(t, request(admissionv1.Update, "alice", obj, old))
	big := cmJSON("cm", "u1", "6", strings.Repeat("x", 3<<20)) // a 3 MiB object
	bigReview := reviewOf(t, request(admissionv1.Update, "alice", big, old))
	secrets := request(admissionv1.Update, "alice", obj, old)
	secrets.Resource.Resource = "secrets"
	dry := request(admissionv1.Update, "alice", obj, old)
	dry.DryRun = ptr(true)
	tests := []struct {
		name   string
		body   []byte
		code   int
		result string // fieldwatch_admission_reviews_total's
		kept   bool
	}{
		{"a write", good, 200, reviewKept, true},
		{"a 3 MiB object", bigReview, 200, reviewKept, true},
		{"an unselected resource", reviewOf(t, secrets), 200, reviewFiltered, false},
		{"a dry run", reviewOf(t, dry), 200, reviewDryRun, false},
		{"v1beta1", bytes.Replace(good, []byte(`admission.k8s.io/v1"`), []byte(`admission.k8s.io/v1beta1"`), 1), 400, reviewVersion, false},
		{"malformed", good[:len(good)-3], 400, reviewMalformed, false},
		{"not JSON", []byte("\x00\x01"), 400, reviewMalformed, false},
		{"over the body limit", bytes.Replace(bigReview, []byte(`"a"}`), []byte(`"`+strings.Repeat("y", 6<<20)+`"}`), 1), 413, reviewBody, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(sink.all())
			beforeResult := testutil.ToFloat64(m.reviewBy[tt.result])
			code, body := post(t, c, url, tt.body)
			if code != tt.code {
				t.Fatalf("code %d (%s), want %d", code, body, tt.code)
			}
			if code == 200 {
				if uid := allowedUID(t, body); uid != "req-update-alice" {
					t.Errorf("answered uid %q", uid)
				}
			}
			if got := testutil.ToFloat64(m.reviewBy[tt.result]) - beforeResult; got != 1 {
				t.Errorf("counted %v %s, want 1", got, tt.result)
			}
			want := before
			if tt.kept {
				want++
			}
			testenv.Eventually(t, 10*time.Second, "the records", func() bool { return len(sink.all()) == want })
		})
	}
	recs := sink.all()
	if len(recs) != 2 || recs[1].ContentHash != hashOf(t, big) || recs[1].Source() != SourceAdmission {
		t.Errorf("records %d, the 3 MiB one hashed %q, want %q", len(recs), recs[len(recs)-1].ContentHash, hashOf(t, big))
	}
	for _, tc := range []struct {
		name, method, path string
		code               int
	}{{"GET", http.MethodGet, AdmissionPath, 405}, {"another path", http.MethodPost, "/mutate", 404}} {
		req, _ := http.NewRequest(tc.method, strings.TrimSuffix(url, AdmissionPath)+tc.path, bytes.NewReader(good))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, tc.code)
		}
	}
}

// blockingSink holds every Add until release is closed.
type blockingSink struct {
	recordingSink
	release chan struct{}
}

func (s *blockingSink) Add(source string, recs []Record, ignored int) {
	<-s.release
	s.recordingSink.Add(source, recs, ignored)
}

// TestAdmissionNeverWaits: a sink that does not take records (an index
// held up) never holds an answer: the queue fills, and what does not fit
// is allowed, dropped and counted.
func TestAdmissionNeverWaits(t *testing.T) {
	p := newWebhookPKI(t, t.TempDir())
	sink := &blockingSink{release: make(chan struct{})}
	m := NewAdmissionMetrics(nil)
	a, err := NewAdmission(AdmissionOptions{CertFile: p.certFile, KeyFile: p.keyFile, QueueSize: 4, Metrics: m, Logger: slog.New(slog.DiscardHandler)}, sink)
	if err != nil {
		t.Fatal(err)
	}
	url := serveAdmission(t, a) + AdmissionPath
	defer close(sink.release)
	c := httpsClient(t, p.ca.CertPEM, nil, nil)
	const n = 20
	for i := range n {
		req := request(admissionv1.Update, "alice", cmJSON("cm", "u1", "6", "b"), cmJSON("cm", "u1", "5", "a"))
		req.UID += types.UID("-" + string(rune('a'+i)))
		if code, body := post(t, c, url, reviewOf(t, req)); code != 200 || allowedUID(t, body) != string(req.UID) {
			t.Fatalf("review %d: %d %s", i, code, body)
		}
	}
	kept, dropped := testutil.ToFloat64(m.reviewBy[reviewKept]), testutil.ToFloat64(m.reviewBy[reviewDropped])
	// The feeder took what was queued when the first came and waits in
	// Add; the queue holds four more; the rest were dropped.
	if kept+dropped != n || dropped == 0 {
		t.Errorf("kept %v, dropped %v of %d with a queue of 4", kept, dropped, n)
	}
}

// TestAdmissionAuthentication: with a client CA and names, or a token,
// only the apiserver's credentials are taken; the others get 401 or 403,
// counted by reason, and nothing is kept.
func TestAdmissionAuthentication(t *testing.T) {
	p := newWebhookPKI(t, t.TempDir())
	sink := &recordingSink{}
	m := NewAdmissionMetrics(nil)
	a, err := NewAdmission(AdmissionOptions{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.caFile, ClientNames: []string{"kube-apiserver"},
		TokenFile: p.tokenFile, Metrics: m, Logger: slog.New(slog.DiscardHandler)}, sink)
	if err != nil {
		t.Fatal(err)
	}
	url := serveAdmission(t, a) + AdmissionPath
	body := reviewOf(t, request(admissionv1.Update, "alice", cmJSON("cm", "u1", "6", "b"), cmJSON("cm", "u1", "5", "a")))
	tests := []struct {
		name   string
		client *http.Client
		header []string
		code   int
		reason string
	}{
		{"client certificate", httpsClient(t, p.ca.CertPEM, p.clientCert, p.clientKey), nil, 200, ""},
		{"token", httpsClient(t, p.ca.CertPEM, nil, nil), []string{"Authorization", "Bearer " + p.token}, 200, ""},
		{"nothing", httpsClient(t, p.ca.CertPEM, nil, nil), nil, 401, RefusedNoCredentials},
		{"wrong token", httpsClient(t, p.ca.CertPEM, nil, nil), []string{"Authorization", "Bearer nope"}, 403, RefusedToken},
		{"another client of the CA", httpsClient(t, p.ca.CertPEM, p.kubeletCert, p.kubeletKey), nil, 403, RefusedCertificateName},
		{"another CA", httpsClient(t, p.ca.CertPEM, p.impostorCert, p.impostorKey), nil, 403, RefusedCertificate},
	}
	for _, tt := range tests {
		before := len(sink.all())
		code, resp := post(t, tt.client, url, body, tt.header...)
		if code != tt.code {
			t.Errorf("%s: %d (%s), want %d", tt.name, code, resp, tt.code)
			continue
		}
		if tt.reason == "" {
			testenv.Eventually(t, 10*time.Second, tt.name+": the record", func() bool { return len(sink.all()) == before+1 })
		} else {
			if got := testutil.ToFloat64(m.refusedBy[tt.reason]); got != 1 {
				t.Errorf("%s: refused %s counted %v, want 1", tt.name, tt.reason, got)
			}
			if len(sink.all()) != before {
				t.Errorf("%s: a refused review was kept", tt.name)
			}
		}
	}
	if _, err := NewAdmission(AdmissionOptions{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.caFile}, sink); err == nil {
		t.Error("a client CA without names: no error")
	}
	if _, err := NewAdmission(AdmissionOptions{CertFile: p.certFile}, sink); err == nil {
		t.Error("no key: no error")
	}
}

// TestAdmissionPeers: two replicas' endpoints forward what each keeps to
// the other, so that both hold every record; a forward from a client
// without the endpoints' certificate is refused.
func TestAdmissionPeers(t *testing.T) {
	p := newWebhookPKI(t, t.TempDir())
	var sinks [2]*recordingSink
	var urls [2]string
	var lns [2]net.Listener
	for i := range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i] = ln
	}
	for i := range 2 {
		sinks[i] = &recordingSink{}
		a, err := NewAdmission(AdmissionOptions{CertFile: p.certFile, KeyFile: p.keyFile, Logger: slog.New(slog.DiscardHandler),
			Peers: []string{lns[0].Addr().String(), lns[1].Addr().String()}}, sinks[i])
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Serve(ctx, lns[i]) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Logf("admission server %d: %v", i, err)
			}
		})
		urls[i] = "https://" + lns[i].Addr().String()
	}
	c := httpsClient(t, p.ca.CertPEM, nil, nil)
	for i, user := range []string{"alice", "bob"} {
		if code, body := post(t, c, urls[i]+AdmissionPath, reviewOf(t, request(admissionv1.Update, user, cmJSON("cm", "u1", "6", user), cmJSON("cm", "u1", "5", "a")))); code != 200 {
			t.Fatalf("%s: %d %s", user, code, body)
		}
	}
	testenv.Eventually(t, 10*time.Second, "both replicas to hold both records", func() bool {
		return len(sinks[0].all()) == 2 && len(sinks[1].all()) == 2
	})
	for i, s := range sinks {
		srcs := map[string]int{}
		for _, r := range s.all() {
			srcs[r.Source()]++
		}
		if srcs[SourceAdmission] != 1 || srcs[SourceAdmissionPeer] != 1 {
			t.Errorf("replica %d holds %v, want one of its own and one of its peer", i, srcs)
		}
	}
	code, _ := post(t, c, urls[0]+PeerPath, []byte(`[]`))
	if code != http.StatusForbidden {
		t.Errorf("a forward without the endpoint's certificate: %d, want 403", code)
	}
}

// all returns the records the sink was given, each with the source it
// came from.
func (s *recordingSink) all() []sourcedRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sourcedRecord(nil), s.sourced...)
}

type sourcedRecord struct {
	Record
	source string
}

func (r sourcedRecord) Source() string { return r.source }
