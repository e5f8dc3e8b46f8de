package main

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// errorProxy is an HTTPS reverse proxy in front of a control plane's
// apiserver, through which a fieldwatch reaches it as the test's admin.
// While it fails it answers every request with a 500 Status, and it
// cuts the requests in flight (watches) as it starts failing.
type errorProxy struct {
	srv     *httptest.Server
	failing atomic.Bool
	refused atomic.Int64

	mu     sync.Mutex
	flight context.Context // the requests proxied since the last fail
	cut    context.CancelFunc
}

// internalError is the Status body of the 500s.
const internalError = `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"injected by the test","reason":"InternalError","code":500}`

func newErrorProxy(t *testing.T, env *testenv.Env) *errorProxy {
	t.Helper()
	cfg := env.Config()
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	target, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport, rp.FlushInterval = rt, -1 // watches stream
	p := &errorProxy{}
	p.flight, p.cut = context.WithCancel(context.Background())
	p.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.failing.Load() {
			p.refused.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(internalError))
			return
		}
		p.mu.Lock()
		flight := p.flight
		p.mu.Unlock()
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		defer context.AfterFunc(flight, cancel)()
		rp.ServeHTTP(w, r.WithContext(ctx))
	}))
	p.srv.StartTLS()
	t.Cleanup(p.srv.Close)
	return p
}

// fail starts answering 500 and cuts the requests in flight.
func (p *errorProxy) fail() {
	p.failing.Store(true)
	p.mu.Lock()
	p.cut()
	p.flight, p.cut = context.WithCancel(context.Background())
	p.mu.Unlock()
}

// heal proxies again.
func (p *errorProxy) heal() { p.failing.Store(false) }

// kubeconfig writes a kubeconfig that reaches the apiserver through p.
func (p *errorProxy) kubeconfig(t *testing.T) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["proxy"] = &clientcmdapi.Cluster{Server: p.srv.URL,
		CertificateAuthorityData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.srv.Certificate().Raw})}
	cfg.AuthInfos["proxy"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["proxy"] = &clientcmdapi.Context{Cluster: "proxy", AuthInfo: "proxy"}
	cfg.CurrentContext = "proxy"
	path := writeFile(t, "kubeconfig", "")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestFaultAPIServerErrors: the apiserver answers 500 to every request of
// fieldwatch's (lists, watches, discovery) for a minute, its watches cut
// as it starts, while writes go on. fieldwatch retries with backoff (no
// hot loop: a bounded number of requests in the minute), goes on without
// a restart once the apiserver answers again, and misses nothing: the
// writes of the minute come as the relist's net effects, none under two
// ids.
func TestFaultAPIServerErrors(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	ns := namespace(t, env, "fault-apiserver-errors")
	px := newErrorProxy(t, env)
	h := newHooks(t)
	p := startFieldwatch(t, px.kubeconfig(t), "--rules", h.rules(t, ns, "a"))
	// Objects live 3 minutes at least, longer than the minute and the
	// relists after it: one created and deleted within it would be seen
	// by no one, which is no loss.
	w := startWriters(t, env, ns, 20*time.Millisecond, 3*time.Minute)
	w.waitWrites(t, 50)
	px.fail()
	failed := time.Now()
	const outage = time.Minute
	testenv.Eventually(t, 2*outage, "a minute of 500s", func() bool { return time.Since(failed) >= outage })
	refused := px.refused.Load()
	px.heal()
	w.waitWrites(t, 100)
	w.finish()
	o := settle(t, h, w, 2*time.Minute)
	relisted := h.relisted()
	t.Logf("a minute of 500s: %s; %d requests refused, %d payloads observed by a relist", o, refused, relisted)
	// client-go's reflectors back off to 30 s, fieldwatch's discovery to
	// its own bound: a few dozen requests a resource, not thousands.
	if refused == 0 || refused > 600 {
		t.Errorf("%d requests answered 500 in the minute: want some, and at most 600 (no hot loop)", refused)
	}
	if relisted == 0 {
		t.Error("no payload says observed relist: the minute's writes cannot all have come from watch events")
	}
	select {
	case <-p.done:
		t.Errorf("fieldwatch exited: it should have gone on without a restart")
	default:
	}
}
