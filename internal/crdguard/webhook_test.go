package crdguard

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
	"github.com/fieldwatch/fieldwatch/watcher"
)

func TestMain(m *testing.M) { testenv.Main(m, testenv.Options{}) }

// guardServer is a test-only admission endpoint: TLS on 127.0.0.1, the
// AdmissionReviews of CRDs to the current Guard, everything else allowed.
type guardServer struct {
	url     string
	ca      []byte
	guard   atomic.Pointer[Guard]
	reviews atomic.Int64
}

func serveGuard(t *testing.T, g *Guard) *guardServer {
	t.Helper()
	ca, err := testenv.NewCA("crd-guard-test-ca")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.ServerCert("crd-guard-test")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &guardServer{url: "https://" + ln.Addr().String() + "/validate", ca: ca.CertPEM}
	s.guard.Store(g)
	mux := http.NewServeMux()
	mux.HandleFunc("/validate", s.validate)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.ServeTLS(ln, "", ""); !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("webhook server: %v", err)
		}
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return s
}

func (s *guardServer) validate(w http.ResponseWriter, r *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<20)).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
		return
	}
	s.reviews.Add(1)
	resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	if Handles(review.Request) {
		resp = s.guard.Load().Review(r.Context(), review.Request).Response
	}
	review.Request, review.Response = nil, resp
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&review)
}

// register makes the apiserver call s for the updates and deletions of
// the CRD name (its status included), failing the request when s does
// not answer, and waits until it does.
func (s *guardServer) register(t *testing.T, env *testenv.Env, name string) {
	t.Helper()
	ctx := context.Background()
	cs := env.Clientset(t)
	fail, none, timeout := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone, int32(10)
	url := s.url
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "crd-guard-" + name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "crd-guard.fieldwatch.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: s.ca},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update, admissionregistrationv1.Delete}, Rule: admissionregistrationv1.Rule{APIGroups: []string{"apiextensions.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"customresourcedefinitions", "customresourcedefinitions/status"}}}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
			MatchConditions:         []admissionregistrationv1.MatchCondition{{Name: "this-test", Expression: fmt.Sprintf("request.name == %q", name)}},
		}},
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), cfg.Name, metav1.DeleteOptions{})
	})
	// The apiserver takes the configuration up from its own watch: dry
	// runs of a metadata change until one reaches the server.
	crds := env.Dynamic(t).Resource(CRDResource)
	testenv.Eventually(t, 30*time.Second, "the apiserver to call the test webhook", func() bool {
		u, err := crds.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		u.SetLabels(map[string]string{"probe": "1"})
		_, _ = crds.Update(ctx, u, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		return s.reviews.Load() > 0
	})
}

// warningsSeen collects the warnings client-go receives.
type warningsSeen struct {
	mu   sync.Mutex
	list []string
}

func (w *warningsSeen) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

// take returns the warnings seen since the last take.
func (w *warningsSeen) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

// warned returns a dynamic client whose warnings w collects.
func warned(t *testing.T, env *testenv.Env, w *warningsSeen) dynamic.Interface {
	t.Helper()
	cfg := env.Config()
	cfg.WarningHandler = w
	c, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// widgetCRD is a namespaced Widget CRD of group, v1 stored, whose
// spec.color is an enum of red, blue and green.
func widgetCRD(t testing.TB, group string) *apiextensionsv1.CustomResourceDefinition {
	crd := mustCRD(t, testCRD)
	crd.ObjectMeta = metav1.ObjectMeta{Name: "widgets." + group}
	crd.Spec.Group = group
	crd.Status = apiextensionsv1.CustomResourceDefinitionStatus{}
	return crd
}

func installWidgets(t *testing.T, env *testenv.Env, group string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd := widgetCRD(t, group)
	if err := env.InstallCRD(crd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Dynamic(t).Resource(CRDResource).Delete(context.Background(), crd.Name, metav1.DeleteOptions{})
	})
	return crd
}

// createWidgets creates n Widgets in namespaces ns0..ns3 with 32 writers:
// widget i is red when i%20 == 0, blue otherwise.
func createWidgets(t testing.TB, env *testenv.Env, group, version string, n int) {
	t.Helper()
	ctx := context.Background()
	for i := range 4 {
		env.EnsureNamespace(t, fmt.Sprintf("ns%d", i))
	}
	res := env.Dynamic(t).Resource(schema.GroupVersionResource{Group: group, Version: version, Resource: "widgets"})
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || failed.Load() != nil {
					return
				}
				color := "blue"
				if i%20 == 0 {
					color = "red"
				}
				u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": group + "/" + version, "kind": "Widget",
					"metadata": map[string]any{"name": fmt.Sprintf("w%05d", i), "namespace": fmt.Sprintf("ns%d", i%4)},
					"spec":     map[string]any{"color": color, "name": "widget"}}}
				if _, err := res.Namespace(u.GetNamespace()).Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatalf("create widgets: %v", err)
	}
}

// watchWidgets runs a watcher caching the Widgets of group whole, as
// fieldwatch does for a rule with crd: {impact: true}, until the test
// ends, and returns it once it holds n of them.
func watchWidgets(t testing.TB, env *testenv.Env, group string, n int) *watcher.Watcher {
	t.Helper()
	w := widgetWatcher(t, env, group)
	testenv.RunUntilCleanup(t, time.Minute, w.Run)
	waitCached(t, w, group, n)
	return w
}

func widgetWatcher(tb testing.TB, env *testenv.Env, group string) *watcher.Watcher {
	tb.Helper()
	w, err := watcher.New(env.Config(), watcher.Config{
		Selectors:  []change.Selector{{Group: group, Resource: "widgets"}},
		Projection: func(change.Resource) change.Projection { return change.Projection{Full: true} },
		Handler:    watcher.HandlerFunc(func(context.Context, *watcher.Change) error { return nil }),
		Logger:     slog.New(slog.DiscardHandler),
	})
	if err != nil {
		tb.Fatal(err)
	}
	return w
}

// waitCached waits until w caches n Widgets of group.
func waitCached(tb testing.TB, w *watcher.Watcher, group string, n int) {
	tb.Helper()
	testenv.Eventually(tb, 10*time.Minute, fmt.Sprintf("the watcher to cache %d widgets", n), func() bool {
		snap, err := w.Cached(schema.GroupResource{Group: group, Resource: "widgets"})
		return err == nil && len(snap.Objects) == n
	})
}

// sources returns the guard's Source: the watcher's cache (none when w is
// nil), then paged lists.
func sources(t testing.TB, env *testenv.Env, w *watcher.Watcher) Source {
	t.Helper()
	md, err := metadata.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	return Chain{CacheSource{Cache: func() Cache {
		if w == nil {
			return nil
		}
		return w
	}}, ListSource{Dynamic: env.Dynamic(t), Metadata: md}}
}

func newGuard(t testing.TB, opts Options) *Guard {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = discard
	}
	g, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// editCRD gets the CRD, edits it and updates it (a dry run when dry),
// returning the apiserver's error.
func editCRD(ctx context.Context, dyn dynamic.Interface, name string, dry bool, edit func(*apiextensionsv1.CustomResourceDefinition)) error {
	crds := dyn.Resource(CRDResource)
	u, err := crds.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	crd, err := fromUnstructured(u)
	if err != nil {
		return err
	}
	edit(crd)
	u, err = toUnstructured(crd)
	if err != nil {
		return err
	}
	opts := metav1.UpdateOptions{}
	if dry {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err = crds.Update(ctx, u, opts)
	return err
}

func toUnstructured(crd *apiextensionsv1.CustomResourceDefinition) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(crd)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion("apiextensions.k8s.io/v1")
	u.SetKind("CustomResourceDefinition")
	return u, nil
}

var _ rest.WarningHandler = &warningsSeen{}
