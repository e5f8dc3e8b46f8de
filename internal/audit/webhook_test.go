package audit

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/internal/testenv"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// recordingSink is a Sink that keeps what it is given.
type recordingSink struct {
	mu      sync.Mutex
	recs    []Record
	sourced []sourcedRecord
	ignored int
}

func (s *recordingSink) Add(source string, recs []Record, ignored int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs = append(s.recs, recs...)
	for _, r := range recs {
		s.sourced = append(s.sourced, sourcedRecord{Record: r, source: source})
	}
	s.ignored += ignored
}

func (s *recordingSink) ids() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for _, r := range s.recs {
		ids = append(ids, r.AuditID)
	}
	return ids
}

// webhookPKI is a server certificate and the credentials of a legitimate
// client and of an impostor.
type webhookPKI struct {
	dir                          string
	ca                           *testenv.CA
	certFile, keyFile            string
	caFile, tokenFile            string
	clientCert, clientKey        []byte
	impostorCert, impostorKey    []byte
	kubeletCert, kubeletKey      []byte // the same CA, another client
	token                        string
	serverCertPEM, serverKeyPEM  []byte
	otherCA                      *testenv.CA
	otherServerCert, otherServer []byte
}

func newWebhookPKI(t testing.TB, dir string) *webhookPKI {
	t.Helper()
	p := &webhookPKI{dir: dir, token: "s3cret-token"}
	var err error
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	p.ca, err = testenv.NewCA("fieldwatch-audit-ca")
	must(err)
	p.otherCA, err = testenv.NewCA("impostor-ca")
	must(err)
	p.serverCertPEM, p.serverKeyPEM, err = p.ca.ServerCert("fieldwatch-audit")
	must(err)
	p.clientCert, p.clientKey, err = p.ca.ClientCert("kube-apiserver")
	must(err)
	p.impostorCert, p.impostorKey, err = p.otherCA.ClientCert("kube-apiserver")
	must(err)
	p.kubeletCert, p.kubeletKey, err = p.ca.ClientCert("system:node:worker-1")
	must(err)
	p.otherServerCert, p.otherServer, err = p.otherCA.ServerCert("fieldwatch-audit")
	must(err)
	paths, err := testenv.WriteFiles(dir,
		testenv.NamedData{Name: "tls.crt", Data: p.serverCertPEM},
		testenv.NamedData{Name: "tls.key", Data: p.serverKeyPEM},
		testenv.NamedData{Name: "client-ca.crt", Data: p.ca.CertPEM},
		testenv.NamedData{Name: "token", Data: []byte(p.token + "\n")})
	must(err)
	p.certFile, p.keyFile, p.caFile, p.tokenFile = paths[0], paths[1], paths[2], paths[3]
	return p
}

// client returns an HTTPS client trusting ca, presenting the given
// certificate when there is one.
func httpsClient(t testing.TB, caPEM, certPEM, keyPEM []byte) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if certPEM != nil {
		c, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
}

// serveWebhook serves w on 127.0.0.1 until the test ends.
func serveWebhook(t testing.TB, w *Webhook) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return "https://" + ln.Addr().String() + "/audit"
}

func TestWebhookAuthentication(t *testing.T) {
	p := newWebhookPKI(t, t.TempDir())
	sink := &recordingSink{}
	m := NewMetrics(nil)
	w, err := NewWebhook(WebhookOptions{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.caFile, ClientNames: []string{"kube-apiserver"},
		TokenFile: p.tokenFile, MaxBodyBytes: 64 << 10, Metrics: m, Logger: slog.New(slog.DiscardHandler)}, sink)
	if err != nil {
		t.Fatal(err)
	}
	url := serveWebhook(t, w)
	lines := readLines(t, apiserverLog)
	body := eventList(lines[:10])

	// over 64 KiB after ten events (seven kept)
	huge := eventList(append(slices.Clone(lines[:10]), []byte(`{"userAgent":"`+strings.Repeat("x", 64<<10)+`"}`)))
	// under 64 KiB, of events that keep more than 16 KiB (a quarter)
	many := eventList(slices.Concat(lines, lines)[:50])
	if len(huge) <= 64<<10 || len(many) > 64<<10 {
		t.Fatalf("test bodies of %d and %d bytes", len(huge), len(many))
	}
	for _, tc := range []struct {
		name            string
		client          *http.Client
		method, token   string
		auth            string // the Authorization header as sent, instead of "Bearer " + token
		body            []byte
		wantCode        int
		wantIndexedMore int
	}{
		{"client certificate", httpsClient(t, p.ca.CertPEM, p.clientCert, p.clientKey), "POST", "", "", body, 200, 7},
		{"bearer token", httpsClient(t, p.ca.CertPEM, nil, nil), "POST", p.token, "", body, 200, 7},
		{"bearer in lower case", httpsClient(t, p.ca.CertPEM, nil, nil), "POST", "", "bearer " + p.token, body, 200, 7},
		{"BEARER, two spaces", httpsClient(t, p.ca.CertPEM, nil, nil), "POST", "", "BEARER  " + p.token, body, 200, 7},
		{"the token in another scheme", httpsClient(t, p.ca.CertPEM, nil, nil), "POST", "", "Basic " + p.token, body, 403, 0},
		{"no credentials", httpsClient(t, p.ca.CertPEM, nil, nil), "POST", "", "", body, 401, 0},
		{"wrong token", httpsClient(t, p.ca.CertPEM, nil, nil), "POST", "s3cret-tokem", "", body, 403, 0},
		{"certificate of the CA naming another client", httpsClient(t, p.ca.CertPEM, p.kubeletCert, p.kubeletKey), "POST", "", "", body, 403, 0},
		{"certificate of another CA", httpsClient(t, p.ca.CertPEM, p.impostorCert, p.impostorKey), "POST", "", "", body, 403, 0},
		{"server certificate as client", httpsClient(t, p.ca.CertPEM, p.serverCertPEM, p.serverKeyPEM), "POST", "", "", body, 403, 0},
		{"GET", httpsClient(t, p.ca.CertPEM, p.clientCert, p.clientKey), "GET", "", "", nil, 405, 0},
		{"too large", httpsClient(t, p.ca.CertPEM, nil, nil), "POST", p.token, "", huge, 413, 0},
		{"keeps too much", httpsClient(t, p.ca.CertPEM, nil, nil), "POST", p.token, "", many, 413, 0},
		{"malformed", httpsClient(t, p.ca.CertPEM, nil, nil), "POST", p.token, "", eventList(append(slices.Clone(lines[:10]), []byte(`{"stage":1}`))), 400, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(sink.ids())
			req, err := http.NewRequest(tc.method, url, bytes.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := tc.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			msg, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != tc.wantCode {
				t.Fatalf("status %d (%s), want %d", resp.StatusCode, msg, tc.wantCode)
			}
			if got := len(sink.ids()) - before; tc.wantIndexedMore >= 0 && got != tc.wantIndexedMore {
				t.Errorf("%d records added, want %d", got, tc.wantIndexedMore)
			}
			if want := map[string]string{"too large": "larger than 65536 bytes", "keeps too much": "keep more than a quarter of the body limit"}[tc.name]; want != "" && !strings.Contains(string(msg), want) {
				t.Errorf("413 body %q, want it to say %q", msg, want)
			}
		})
	}
	for code, want := range map[string]float64{"200": 4, "401": 1, "403": 5, "405": 1, "413": 2, "400": 1} {
		if got := testutil.ToFloat64(m.webhookRequests.WithLabelValues(code)); got != want {
			t.Errorf("webhook_requests_total{code=%s} = %v, want %v", code, got, want)
		}
	}
}

func TestWebhookOptionsRequired(t *testing.T) {
	p := newWebhookPKI(t, t.TempDir())
	emptyFile := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(emptyFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts WebhookOptions
		want string
	}{
		{"no cert", WebhookOptions{TokenFile: p.tokenFile}, "a certificate and a key file are required"},
		{"no authentication", WebhookOptions{CertFile: p.certFile, KeyFile: p.keyFile}, "a client CA file or a token file is required"},
		{"missing key", WebhookOptions{CertFile: p.certFile, KeyFile: p.keyFile + ".missing", TokenFile: p.tokenFile}, "no such file"},
		{"key of another cert", WebhookOptions{CertFile: p.certFile, KeyFile: p.caFile, TokenFile: p.tokenFile}, "key"},
		{"empty token", WebhookOptions{CertFile: p.certFile, KeyFile: p.keyFile, TokenFile: emptyFile}, "empty token"},
		{"CA file without certificates", WebhookOptions{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.tokenFile, ClientNames: []string{"kube-apiserver"}}, "no PEM certificate"},
		{"client CA without client names", WebhookOptions{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.caFile, TokenFile: p.tokenFile}, "needs the names of the apiserver's client certificate"},
		{"client names without a client CA", WebhookOptions{CertFile: p.certFile, KeyFile: p.keyFile, TokenFile: p.tokenFile, ClientNames: []string{"kube-apiserver"}}, "client names without a client CA file"},
		{"an empty client name", WebhookOptions{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.caFile, ClientNames: []string{"kube-apiserver", ""}}, `client name "": empty`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewWebhook(tc.opts, &recordingSink{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestWebhookClientNames: a certificate of the client CA is accepted only
// when its common name or a DNS or URI SAN is one of the client names;
// the others are refused (403), counted by reason, and logged at most once
// per RefusalLogInterval however many come.
func TestWebhookClientNames(t *testing.T) {
	p := newWebhookPKI(t, t.TempDir())
	issue := func(cn string, dns []string, uris ...string) [2][]byte {
		t.Helper()
		var us []*url.URL
		for _, u := range uris {
			parsed, err := url.Parse(u)
			if err != nil {
				t.Fatal(err)
			}
			us = append(us, parsed)
		}
		c, k, err := p.ca.ClientCertSANs(cn, dns, us)
		if err != nil {
			t.Fatal(err)
		}
		return [2][]byte{c, k}
	}
	certs := map[string][2][]byte{
		"cn":        {p.clientCert, p.clientKey},
		"dns":       issue("apiserver-1", []string{"kube-apiserver.control-plane"}),
		"uri":       issue("apiserver-2", nil, "spiffe://cluster.local/ns/kube-system/sa/kube-apiserver"),
		"kubelet":   {p.kubeletCert, p.kubeletKey},
		"prefix":    issue("kube-apiserver-impostor", []string{"kube-apiserver.control-plane.evil"}),
		"case":      issue("Kube-Apiserver", nil),
		"other-ca":  {p.impostorCert, p.impostorKey},
		"other-san": issue("someone", []string{"someone.example"}, "spiffe://cluster.local/ns/default/sa/someone"),
	}
	sink := &recordingSink{}
	m := NewMetrics(nil)
	var logs testenv.SyncBuffer
	w, err := NewWebhook(WebhookOptions{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.caFile,
		ClientNames: []string{"kube-apiserver", "kube-apiserver.control-plane", "spiffe://cluster.local/ns/kube-system/sa/kube-apiserver"},
		Metrics:     m, Logger: slog.New(slog.NewJSONHandler(&logs, nil))}, sink)
	if err != nil {
		t.Fatal(err)
	}
	url := serveWebhook(t, w)
	body := eventList(readLines(t, apiserverLog)[:10])
	post := func(cert [2][]byte) int {
		t.Helper()
		resp, err := httpsClient(t, p.ca.CertPEM, cert[0], cert[1]).Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		cert string
		want int
	}{
		{"cn", 200}, {"dns", 200}, {"uri", 200},
		{"kubelet", 403}, {"prefix", 403}, {"case", 403}, {"other-san", 403}, {"other-ca", 403},
	} {
		if got := post(certs[tc.cert]); got != tc.want {
			t.Errorf("certificate %s: %d, want %d", tc.cert, got, tc.want)
		}
	}
	if got := len(sink.ids()); got != 3*7 {
		t.Errorf("%d records reached the sink, want those of the 3 accepted posts (21)", got)
	}
	// A flood: counted in full, logged once per reason.
	for range 30 {
		post(certs["kubelet"])
	}
	for reason, want := range map[string]float64{RefusedCertificateName: 34, RefusedCertificate: 1, RefusedToken: 0, RefusedNoCredentials: 0} {
		if got := testutil.ToFloat64(m.refusedBy[reason]); got != want {
			t.Errorf("webhook_refused_total{reason=%s} = %v, want %v", reason, got, want)
		}
	}
	lines := strings.Count(logs.String(), `"msg":"audit webhook: refused a request"`)
	named := strings.Count(logs.String(), `"refused":"certificate_name","client":"system:node:worker-1"`)
	if lines != 2 || named != 1 {
		t.Errorf("%d refusal lines (%d naming the kubelet's certificate), want 2: one per reason within the interval\n%s", lines, named, logs.String())
	}
}

// TestRefusalLog: one line per key and interval, the next one with the
// count of those left out.
func TestRefusalLog(t *testing.T) {
	l := newRefusalLog(10 * time.Second)
	var got []string
	for i, at := range []time.Duration{0, time.Second, 2 * time.Second, 11 * time.Second, 12 * time.Second, 30 * time.Second} {
		for _, key := range []string{"403" + RefusedToken, "401" + RefusedNoCredentials} {
			if key != "403"+RefusedToken && i%2 == 1 {
				continue
			}
			if n, ok := l.allow(key, t0.Add(at)); ok {
				got = append(got, fmt.Sprintf("%s@%s+%d", key, at, n))
			}
		}
	}
	want := []string{"403wrong_token@0s+0", "401no_credentials@0s+0", "403wrong_token@11s+2", "401no_credentials@12s+1", "403wrong_token@30s+1"}
	if !slices.Equal(got, want) {
		t.Errorf("logged %q, want %q", got, want)
	}
}

// TestWebhookReloadsCertificate: a new certificate/key pair written over
// the files is served without a restart; a broken one keeps the last
// good pair.
func TestWebhookReloadsCertificate(t *testing.T) {
	p := newWebhookPKI(t, t.TempDir())
	w, err := NewWebhook(WebhookOptions{CertFile: p.certFile, KeyFile: p.keyFile, TokenFile: p.tokenFile, Logger: slog.New(slog.DiscardHandler)}, &recordingSink{})
	if err != nil {
		t.Fatal(err)
	}
	url := serveWebhook(t, w)
	post := func(caPEM []byte) error {
		req, _ := http.NewRequest("POST", url, strings.NewReader(`{"items":[]}`))
		req.Header.Set("Authorization", "Bearer "+p.token)
		resp, err := httpsClient(t, caPEM, nil, nil).Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	if err := post(p.ca.CertPEM); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.keyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "the broken key noticed", func() bool { _, err := w.cert.get(); return err != nil })
	if err := post(p.ca.CertPEM); err != nil {
		t.Fatalf("after a broken key was written: %v (the last good pair must be served)", err)
	}
	if _, err := testenv.WriteFiles(filepath.Dir(p.certFile),
		testenv.NamedData{Name: filepath.Base(p.certFile), Data: p.otherServerCert},
		testenv.NamedData{Name: filepath.Base(p.keyFile), Data: p.otherServer}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "the new certificate served", func() bool { return post(p.otherCA.CertPEM) == nil })
	var uerr *tls.CertificateVerificationError
	if err := post(p.ca.CertPEM); !errors.As(err, &uerr) {
		t.Errorf("the old certificate is still served: %v", err)
	}
}

// TestWebhookStandingBy: while Accepting says no, authenticated posts get
// 503 with Retry-After and a closed connection, and nothing reaches the
// sink; unauthenticated ones are still refused as such.
// TestWebhookNotAccepting: while Accepting says no (a replica starting,
// before it has an index), an authenticated post gets 503 with
// Retry-After: 0 on a closed connection, so that the apiserver retries at
// once, elsewhere; then it is taken.
func TestWebhookNotAccepting(t *testing.T) {
	p := newWebhookPKI(t, t.TempDir())
	sink := &recordingSink{}
	var accepting sync.Mutex
	leading := false
	w, err := NewWebhook(WebhookOptions{CertFile: p.certFile, KeyFile: p.keyFile, TokenFile: p.tokenFile,
		Logger: slog.New(slog.DiscardHandler), Accepting: func() bool {
			accepting.Lock()
			defer accepting.Unlock()
			return leading
		}}, sink)
	if err != nil {
		t.Fatal(err)
	}
	url := serveWebhook(t, w)
	body := eventList(readLines(t, apiserverLog)[:10])
	client := httpsClient(t, p.ca.CertPEM, nil, nil)
	post := func(token string) *http.Response {
		t.Helper()
		req, err := http.NewRequest("POST", url, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp
	}
	if resp := post(""); resp.StatusCode != 401 {
		t.Errorf("not accepting, no credentials: %d, want 401", resp.StatusCode)
	}
	resp := post(p.token)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "0" || !resp.Close {
		t.Errorf("not accepting: %d Retry-After %q close %v, want 503, 0, closed", resp.StatusCode, resp.Header.Get("Retry-After"), resp.Close)
	}
	if n := len(sink.ids()); n != 0 {
		t.Errorf("not accepting: %d records reached the sink", n)
	}
	accepting.Lock()
	leading = true
	accepting.Unlock()
	if resp := post(p.token); resp.StatusCode != 200 || len(sink.ids()) == 0 {
		t.Errorf("accepting: %d, %d records", resp.StatusCode, len(sink.ids()))
	}
}

// TestWebhookPeers: two replicas' receivers with the same certificate,
// each the other's peer (and, through a name, its own): a list the
// apiserver posts to either is held by both once it is acknowledged, and
// by the receiving one once only; a post on the peer path without the
// receivers' certificate is refused, the apiserver's included.
func TestWebhookPeers(t *testing.T) {
	p := newWebhookPKI(t, t.TempDir())
	listen := func() net.Listener {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return ln
	}
	lnA, lnB := listen(), listen()
	peers := []string{lnA.Addr().String(), lnB.Addr().String()} // each is one of its own
	sinks := []*sourceSink{{}, {}}
	metrics := []*Metrics{NewMetrics(nil), NewMetrics(nil)}
	var urls []string
	for i, ln := range []net.Listener{lnA, lnB} {
		w, err := NewWebhook(WebhookOptions{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.caFile, ClientNames: []string{"kube-apiserver"},
			Peers: peers, Metrics: metrics[i], Logger: slog.New(slog.DiscardHandler)}, sinks[i])
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Serve(ctx, ln) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
		})
		urls = append(urls, "https://"+ln.Addr().String())
	}
	apiserver := httpsClient(t, p.ca.CertPEM, p.clientCert, p.clientKey)
	post := func(c *http.Client, url string, body []byte) int {
		t.Helper()
		resp, err := c.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	lines := readLines(t, apiserverLog)
	if code := post(apiserver, urls[0]+"/audit", eventList(lines[:10])); code != 200 {
		t.Fatalf("post to a: %d", code)
	}
	if code := post(apiserver, urls[1]+"/audit", eventList(lines[10:20])); code != 200 {
		t.Fatalf("post to b: %d", code)
	}
	for i, s := range sinks {
		own, forwarded := s.by(SourceWebhook), s.by(SourcePeer)
		if len(own) == 0 || len(forwarded) == 0 {
			t.Errorf("replica %d holds %d events posted to it and %d forwarded, want both", i, len(own), len(forwarded))
		}
		if other := sinks[1-i].by(SourceWebhook); !slices.Equal(forwarded, other) {
			t.Errorf("replica %d was forwarded %v, the other was posted %v", i, forwarded, other)
		}
	}
	for i, m := range metrics {
		if ok, failed := testutil.ToFloat64(m.peerOK), testutil.ToFloat64(m.peerFailed); ok != 1 || failed != 0 {
			t.Errorf("replica %d forwarded %v lists, %v failed; want 1 and 0 (itself left out)", i, ok, failed)
		}
	}
	// The peer path takes the receivers' own certificate only.
	for name, c := range map[string]*http.Client{
		"the apiserver's certificate": apiserver,
		"no certificate":              httpsClient(t, p.ca.CertPEM, nil, nil),
		"another server certificate":  httpsClient(t, p.ca.CertPEM, p.otherServerCert, p.otherServer),
	} {
		if code := post(c, urls[0]+PeerPath, []byte(`[{"AuditID":"forged"}]`)); code != 403 {
			t.Errorf("peer post with %s: %d, want 403", name, code)
		}
	}
	if code := post(httpsClient(t, p.ca.CertPEM, p.serverCertPEM, p.serverKeyPEM), urls[0]+PeerPath, []byte(`[{"AuditID":"from-a-peer","Code":200}]`)); code != 200 {
		t.Errorf("peer post with the receivers' certificate: %d, want 200", code)
	}
	if got := testutil.ToFloat64(metrics[0].refusedBy[RefusedPeer]); got != 3 {
		t.Errorf("refused as not a peer: %v, want 3", got)
	}
}

// peerRig is a receiver at ln that forwards to the peer at peer, and
// posts the apiserver's event lists to it.
type peerRig struct {
	t       *testing.T
	opts    WebhookOptions
	w       *Webhook
	m       *Metrics
	ln      net.Listener
	peer    string
	lines   [][]byte
	posting *http.Client
}

func newPeerRig(t *testing.T, peer string, timeout time.Duration) *peerRig {
	t.Helper()
	p := newWebhookPKI(t, t.TempDir())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &peerRig{t: t, m: NewMetrics(nil), ln: ln, peer: peer, lines: readLines(t, apiserverLog),
		posting: httpsClient(t, p.ca.CertPEM, p.clientCert, p.clientKey)}
	r.opts = WebhookOptions{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.caFile, ClientNames: []string{"kube-apiserver"},
		Peers: []string{peer}, PeerTimeout: timeout, Metrics: r.m, Logger: slog.New(slog.DiscardHandler)}
	if r.w, err = NewWebhook(r.opts, &sourceSink{}); err != nil {
		t.Fatal(err)
	}
	r.serve(r.w, ln)
	return r
}

// serve serves w on ln until the test ends.
func (r *peerRig) serve(w *Webhook, ln net.Listener) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Serve(ctx, ln) }()
	r.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			r.t.Errorf("serve: %v", err)
		}
	})
}

// replica starts, at the peer's address, a replica with the same
// certificate.
func (r *peerRig) replica() {
	r.t.Helper()
	back, err := net.Listen("tcp", r.peer)
	if err != nil {
		r.t.Fatal(err)
	}
	opts := r.opts
	opts.Peers, opts.Metrics = nil, NewMetrics(nil)
	w, err := NewWebhook(opts, &sourceSink{})
	if err != nil {
		r.t.Fatal(err)
	}
	r.serve(w, back)
}

// post posts the i-th list of five events and wants them acknowledged.
func (r *peerRig) post(i int) {
	r.t.Helper()
	resp, err := r.posting.Post("https://"+r.ln.Addr().String()+"/audit", "application/json", bytes.NewReader(eventList(r.lines[i*5:i*5+5])))
	if err != nil {
		r.t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		r.t.Fatalf("post %d: %d", i, resp.StatusCode)
	}
}

// forwards wants ok forwards that succeeded and failed that failed.
func (r *peerRig) forwards(ok, failed float64, why string) {
	r.t.Helper()
	if o, f := testutil.ToFloat64(r.m.peerOK), testutil.ToFloat64(r.m.peerFailed); o != ok || f != failed {
		r.t.Fatalf("forwards: %v ok, %v failed; want %v and %v (%s)", o, f, ok, failed, why)
	}
}

// TestWebhookPeerUnreachable: a peer that refuses connections fails every
// forward at once and is tried again with every post, since that costs
// nothing: every post is acknowledged, and a replica that comes back at
// the address gets the next one.
func TestWebhookPeerUnreachable(t *testing.T) {
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_ = gone.Close() // connection refused from now on
	r := newPeerRig(t, gone.Addr().String(), 0)
	for i := range 3 {
		r.post(i)
	}
	r.forwards(0, 3, "a refused peer tried with every post")
	r.replica()
	r.post(3)
	r.forwards(1, 3, "the replica back at the address forwarded to at once")
}

// TestWebhookPeerReplaced: a peer that fails slowly (it takes the
// connection and never answers) is left out for peerResolveEvery, the
// names being resolved again meanwhile, so that the posts do not wait on
// it; once its time is out, a replica that now answers there gets the
// records again.
func TestWebhookPeerReplaced(t *testing.T) {
	stalled, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := stalled.Accept()
			if err != nil {
				return
			}
			held = append(held, c) // neither read nor answered
		}
	}()
	r := newPeerRig(t, stalled.Addr().String(), 2*peerSlowFailure)
	r.post(0)
	r.forwards(0, 1, "the stalled peer timed out")
	r.post(1)
	r.forwards(0, 1, "the slow peer left out")
	_ = stalled.Close()
	<-accepted
	for _, c := range held {
		_ = c.Close()
	}
	r.replica()
	r.post(2) // within the address's time out: left out
	r.forwards(0, 1, "the address left out while its time is not out")
	r.w.peers.mu.Lock()
	r.w.peers.failed[r.peer] = time.Now().Add(-peerResolveEvery)
	r.w.peers.resolved = time.Now().Add(-peerResolveAfterFailure)
	r.w.peers.mu.Unlock()
	r.post(3)
	r.forwards(1, 1, "the replaced peer forwarded to again")
}

// sourceSink is a Sink that keeps the audit IDs it is given by source.
type sourceSink struct {
	mu  sync.Mutex
	ids map[string][]string
}

func (s *sourceSink) Add(source string, recs []Record, _ int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids == nil {
		s.ids = map[string][]string{}
	}
	for _, r := range recs {
		s.ids[source] = append(s.ids[source], r.AuditID)
	}
}

func (s *sourceSink) by(source string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ids[source])
}

// TestWebhookAllOrNothing: a request that is refused (a malformed item, a
// body over the limit) adds nothing to the index, however many events
// came before the refusal; the same events sent again whole are indexed,
// and sent once more (a retry of a batch that went through) are
// duplicates.
func TestWebhookAllOrNothing(t *testing.T) {
	p := newWebhookPKI(t, t.TempDir())
	m := NewMetrics(nil)
	ix := NewIndex(IndexOptions{Metrics: m})
	w, err := NewWebhook(WebhookOptions{CertFile: p.certFile, KeyFile: p.keyFile, TokenFile: p.tokenFile, MaxBodyBytes: 64 << 10,
		Metrics: m, Logger: slog.New(slog.DiscardHandler)}, ix)
	if err != nil {
		t.Fatal(err)
	}
	url := serveWebhook(t, w)
	client := httpsClient(t, p.ca.CertPEM, nil, nil)
	good := readLines(t, apiserverLog)[:10]
	held := 0
	for _, l := range good {
		if rec, keep, _ := DecodeEvent(l); keep && rec.Succeeded() {
			held++
		}
	}
	post := func(body []byte) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+p.token)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		name     string
		body     []byte
		wantCode int
		wantHeld int
	}{
		{"a malformed item after the events", eventList(append(slices.Clone(good), []byte(`{"stageTimestamp":5}`))), 400, 0},
		{"over the body limit after the events", eventList(append(slices.Clone(good), []byte(`{"userAgent":"`+strings.Repeat("x", 64<<10)+`"}`))), 413, 0},
		{"the events", eventList(good), 200, held},
		{"the events again", eventList(good), 200, held},
	} {
		if code := post(tc.body); code != tc.wantCode || ix.Len() != tc.wantHeld {
			t.Errorf("%s: %d, %d held; want %d, %d", tc.name, code, ix.Len(), tc.wantCode, tc.wantHeld)
		}
	}
	for result, want := range map[string]int{"indexed": held, "duplicate": held} {
		if got := testutil.ToFloat64(m.events.WithLabelValues(SourceWebhook, result)); got != float64(want) {
			t.Errorf("events_total{result=%s} = %v, want %v", result, got, want)
		}
	}
}

// TestWebhookConcurrencyLimit: while MaxConcurrentRequests posts are being
// read (their bodies still coming), another gets 429 with Retry-After,
// unread; once they are done, the same post goes through, and the events
// of all are indexed once.
func TestWebhookConcurrencyLimit(t *testing.T) {
	p := newWebhookPKI(t, t.TempDir())
	m := NewMetrics(nil)
	ix := NewIndex(IndexOptions{Metrics: m})
	w, err := NewWebhook(WebhookOptions{CertFile: p.certFile, KeyFile: p.keyFile, TokenFile: p.tokenFile, MaxConcurrentRequests: 2,
		Metrics: m, Logger: slog.New(slog.DiscardHandler)}, ix)
	if err != nil {
		t.Fatal(err)
	}
	url := serveWebhook(t, w)
	lines := readLines(t, apiserverLog)
	post := func(body io.Reader) (*http.Response, error) {
		req, err := http.NewRequest(http.MethodPost, url, body)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+p.token)
		resp, err := httpsClient(t, p.ca.CertPEM, nil, nil).Do(req)
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp, nil
	}
	// Two slow posts: half their body now, the rest later.
	var writers []*io.PipeWriter
	done := make(chan int, 2)
	for i := range 2 {
		body := eventList(lines[10*i : 10*i+10])
		pr, pw := io.Pipe()
		t.Cleanup(func() { _ = pw.CloseWithError(errors.New("test over")) })
		writers = append(writers, pw)
		go func() {
			resp, err := post(pr)
			if err != nil {
				t.Error(err)
				done <- 0
				return
			}
			done <- resp.StatusCode
		}()
		go func() { _, _ = pw.Write(body[:len(body)/2]) }()
	}
	testenv.Eventually(t, 10*time.Second, "both slow posts being read", func() bool { return len(w.slots) == 2 })
	third := eventList(lines[20:30])
	resp, err := post(bytes.NewReader(third))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("a third post while two are read: %d Retry-After %q, want 429 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if ix.Len() != 0 {
		t.Errorf("%d events held before the slow posts ended", ix.Len())
	}
	for i, pw := range writers {
		body := eventList(lines[10*i : 10*i+10])
		_, _ = pw.Write(body[len(body)/2:])
		_ = pw.Close()
	}
	for range 2 {
		if code := <-done; code != http.StatusOK {
			t.Errorf("a slow post: %d", code)
		}
	}
	if resp, err := post(bytes.NewReader(third)); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the retry: %v %v", resp, err)
	}
	want := 0
	for _, l := range lines[:30] {
		if rec, keep, _ := DecodeEvent(l); keep && rec.Succeeded() {
			want++
		}
	}
	if ix.Len() != want || testutil.ToFloat64(m.events.WithLabelValues(SourceWebhook, "duplicate")) != 0 {
		t.Errorf("%d held, %v duplicates; want %d, 0", ix.Len(), testutil.ToFloat64(m.events.WithLabelValues(SourceWebhook, "duplicate")), want)
	}
	if got := testutil.ToFloat64(m.webhookRequests.WithLabelValues("429")); got != 1 {
		t.Errorf("webhook_requests_total{code=429} = %v, want 1", got)
	}
}
