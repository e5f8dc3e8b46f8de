package action

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
	"github.com/fieldwatch/fieldwatch/rules"
)

// TestMain starts the control plane for the event and patch tests, except
// in the worker processes of `go test -fuzz`: they run only the fuzz
// target, which needs no Kubernetes, and a control plane started in each
// of them stalls the fuzzer (its workers do not answer in time; their
// control planes are left behind). Started as a benchmark's receiver
// process, it runs that instead.
func TestMain(m *testing.M) {
	if code, ok := benchReceiverMain(); ok {
		os.Exit(code)
	}
	flag.Parse()
	if f := flag.Lookup("test.fuzzworker"); f != nil && f.Value.String() == "true" {
		os.Exit(m.Run())
	}
	testenv.Main(m, testenv.Options{})
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// harness is a Dispatcher under test with what the tests read back.
type harness struct {
	*Dispatcher
	reg      *prometheus.Registry
	logs     *syncBuffer
	stdout   *syncBuffer
	stateDir string
}

// newHarness starts a Dispatcher writing dead letters to a temporary state
// directory, logs and stdout to buffers, and closes it when the test ends.
// mutate may change the options first.
func newHarness(t testing.TB, mutate func(*Options)) *harness {
	t.Helper()
	h := &harness{
		reg:      prometheus.NewRegistry(),
		logs:     &syncBuffer{},
		stdout:   &syncBuffer{},
		stateDir: t.TempDir(),
	}
	opts := Options{
		Logger:     slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Registerer: h.reg,
		Stdout:     h.stdout,
		StateDir:   h.stateDir,
	}
	if mutate != nil {
		mutate(&opts)
	}
	d, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.Dispatcher = d
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = d.Close(ctx)
		if t.Failed() {
			t.Logf("dispatcher logs:\n%s", h.logs.String())
		}
	})
	return h
}

// fastRetry retries quickly, for tests.
var fastRetry = rules.Retry{Attempts: 3, InitialBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}

var firingSeq atomic.Int64

// firingTime is the time of the firings tests make, as their payloads
// write it.
var firingTime = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

// newFiring returns a firing of r with a unique id and a payload like the
// watcher's.
func newFiring(r *rules.Rule) rules.Firing {
	n := firingSeq.Add(1)
	uid := fmt.Sprintf("uid-%d", n)
	id := fmt.Sprintf("%s/%d/%s", uid, n, r.Name)
	payload, _ := json.Marshal(map[string]any{
		"id": id, "time": "2026-12-02T12:00:00.000000Z", "rule": r.Name, "type": "updated",
		"resource":  map[string]any{"group": "example.com", "version": "v1", "resource": "widgets", "kind": "Widget"},
		"namespace": "default", "name": "w" + strconv.FormatInt(n, 10), "uid": uid, "resourceVersion": strconv.FormatInt(n, 10),
		"changes": []any{map[string]any{"op": "replace", "path": "/spec/size", "value": 2, "oldValue": 1}},
	})
	return rules.Firing{
		ID: id, Rule: r, Payload: payload, Time: firingTime, Type: change.Updated,
		Object: rules.ObjectRef{
			Group: "example.com", Version: "v1", Resource: "widgets", Kind: "Widget",
			Namespace: "default", Name: "w" + strconv.FormatInt(n, 10), UID: uid, ResourceVersion: strconv.FormatInt(n, 10),
		},
	}
}

// doneCounter counts done calls per firing id and fails the test on a
// second call for the same id.
type doneCounter struct {
	t     testing.TB
	mu    sync.Mutex
	calls map[string]int
	total atomic.Int64
}

func newDoneCounter(t testing.TB) *doneCounter {
	return &doneCounter{t: t, calls: map[string]int{}}
}

func (c *doneCounter) fn(id string) func() {
	return func() {
		c.mu.Lock()
		c.calls[id]++
		n := c.calls[id]
		c.mu.Unlock()
		if n > 1 {
			c.t.Errorf("done called %d times for %s", n, id)
		}
		c.total.Add(1)
	}
}

func (c *doneCounter) count(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[id]
}

// deliver hands f to h and fails the test on an error.
func (h *harness) deliver(t testing.TB, f rules.Firing, done func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Deliver(ctx, f, done); err != nil {
		t.Fatalf("Deliver: %v", err)
	}
}

// closing reports whether Close has begun: Deliver refuses firings from
// then on.
func (h *harness) closing() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}

// deadLetters reads the dead-letter file (none: empty).
func (h *harness) deadLetters(t testing.TB) []DeadLetter {
	t.Helper()
	f, err := os.Open(filepath.Join(h.stateDir, DeadLetterFile))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var out []DeadLetter
	s := bufio.NewScanner(f)
	s.Buffer(nil, 1<<20)
	for s.Scan() {
		var dl DeadLetter
		if err := json.Unmarshal(s.Bytes(), &dl); err != nil {
			t.Fatalf("dead-letter line %q: %v", s.Text(), err)
		}
		out = append(out, dl)
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// metric returns the value of the series of name (without the
// fieldwatch_action_ prefix) for rule, action and index, read with
// prometheus/testutil: a counter's or gauge's value, a histogram's sample
// count.
func (h *harness) metric(t testing.TB, name, rule, action string, index int) float64 {
	t.Helper()
	m, labels := h.metrics, []string{rule, action, strconv.Itoa(index)}
	counters := map[string]*prometheus.CounterVec{
		"fired_total": m.fired, "delivered_total": m.delivered, "failed_total": m.failed,
		"retried_total": m.retried, "dead_lettered_total": m.deadLettered, "handed_over_total": m.handedOver,
	}
	switch {
	case counters[name] != nil:
		return testutil.ToFloat64(counters[name].WithLabelValues(labels...))
	case name == "queue_depth":
		return testutil.ToFloat64(m.depth.WithLabelValues(labels...))
	case name == "delivery_seconds":
		var d dto.Metric
		if err := m.latency.WithLabelValues(labels...).(prometheus.Metric).Write(&d); err != nil {
			t.Fatal(err)
		}
		return float64(d.GetHistogram().GetSampleCount())
	}
	t.Fatalf("no metric fieldwatch_action_%s", name)
	return 0
}
