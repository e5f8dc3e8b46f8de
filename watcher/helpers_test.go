package watcher

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// TestMain runs the tests on a shared control plane, or, started by
// BenchmarkInformer as its writer process, that process's job.
func TestMain(m *testing.M) {
	if code, ok := benchWriterMain(); ok {
		os.Exit(code)
	}
	testenv.Main(m, testenv.Options{})
}

var (
	configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	widgets    = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
)

// recorder is a Handler that records every change.
type recorder struct {
	mu      sync.Mutex
	changes []*Change
	fail    func(*Change) error // optional: make Handle fail
}

func (r *recorder) Handle(_ context.Context, c *Change) error {
	if r.fail != nil {
		if err := r.fail(c); err != nil {
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changes = append(r.changes, c)
	return nil
}

// of returns the recorded changes of one object, in order.
func (r *recorder) of(want schema.GroupVersionResource, namespace, name string) []*Change {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*Change
	for _, c := range r.changes {
		o := c.Object()
		if gvr(c.Resource) == want && o.GetNamespace() == namespace && o.GetName() == name {
			out = append(out, c)
		}
	}
	return out
}

// count returns the number of recorded changes matching keep.
func (r *recorder) count(keep func(*Change) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.changes {
		if keep(c) {
			n++
		}
	}
	return n
}

// types lists the change types, for messages.
func kinds(cs []*Change) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = string(c.Type)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// startWatcher runs a watcher until the test ends and waits for its sync.
// prepare, if given, sees the watcher before it runs.
func startWatcher(t *testing.T, config *rest.Config, cfg Config, prepare ...func(*Watcher)) (*Watcher, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	if cfg.RediscoveryInterval == 0 {
		cfg.RediscoveryInterval = 2 * time.Second
	}
	w, err := New(config, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range prepare {
		p(w)
	}
	testenv.RunUntilCleanup(t, 30*time.Second, w.Run)
	testenv.Eventually(t, time.Minute, "watcher to sync", w.Synced)
	return w, reg
}

// testLogger logs to the test output when -v, else discards.
func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// testLoggerB discards, for benchmarks.
func testLoggerB() *slog.Logger { return slog.New(slog.DiscardHandler) }

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// namespace creates a namespace for one test, named after it; with
// -count=N the later runs of a test get its name with -2, -3, ... (the
// control plane outlives each run).
func namespace(t *testing.T, env *testenv.Env) string {
	t.Helper()
	base := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(base) > 50 {
		base = base[:50]
	}
	for run := 1; ; run++ {
		name := base
		if run > 1 {
			name = fmt.Sprintf("%s-%d", base, run)
		}
		_, err := env.Clientset(t).CoreV1().Namespaces().Create(context.Background(),
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		switch {
		case err == nil:
			return name
		case !apierrors.IsAlreadyExists(err):
			t.Fatalf("create namespace: %v", err)
		}
	}
}

// installWidgets installs the example Widget CRD.
func installWidgets(t *testing.T, env *testenv.Env) {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.InstallCRDs(filepath.Join(root, "examples", "crds", "widgets.yaml")); err != nil {
		t.Fatalf("install widgets CRD: %v", err)
	}
}

func widget(namespace, name string, size int64) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1",
		"kind":       "Widget",
		"metadata":   map[string]any{"name": name, "namespace": namespace},
		"spec":       map[string]any{"size": size},
	}}
}

func configMap(namespace, name string, data map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "ConfigMap",
		"metadata":   map[string]any{"name": name, "namespace": namespace},
		"data":       data,
	}}
}

// field reads a nested field of an object's map form.
func field(o *Object, path ...string) any {
	if o == nil {
		return nil
	}
	v, _, _ := unstructured.NestedFieldNoCopy(o.Map(), path...)
	return v
}

// takeovers is the changes w fired at its takeover, of every type.
func takeovers(w *Watcher) (n float64) {
	for _, typ := range []change.Type{change.Created, change.Updated, change.Deleted} {
		n += testutil.ToFloat64(w.baseline.takeover.WithLabelValues(string(typ)))
	}
	return n
}

func mustf(t *testing.T, err error, format string, args ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", fmt.Sprintf(format, args...), err)
	}
}

// waitPasses waits until the watcher has run n more discovery passes.
func waitPasses(t *testing.T, w *Watcher, n int64) {
	t.Helper()
	target := w.passes.Load() + n
	testenv.Eventually(t, time.Duration(n+5)*w.cfg.RediscoveryInterval, fmt.Sprintf("%d discovery passes", n),
		func() bool { return w.passes.Load() >= target })
}
