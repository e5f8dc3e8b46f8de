package testenv

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/fieldwatch/fieldwatch/internal/losscheck"
)

// WidgetsGVR is the resource of examples/crds/widgets.yaml.
var WidgetsGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

// Write is one write a WidgetWriters made.
type Write struct {
	Type            string // created, updated, deleted
	Name            string
	UID             types.UID
	ResourceVersion string // of the new state; "" for a deletion
	At              time.Time
	User            string // who wrote it ("" for the admin)
}

// WidgetWriter is one writer of WidgetWriters: its user (for
// attribution), the prefix of its objects' names and its client.
type WidgetWriter struct {
	User   string
	Prefix string
	Client dynamic.Interface
}

// WidgetWriters create, update and delete Widgets in a namespace until
// stopped, each writer with its own client and name prefix, and record
// every write that succeeded: the load of the end-to-end tests, whose
// payloads they check with losscheck. Of ten writes three create, one
// deletes the oldest object, one the newest, five update.
type WidgetWriters struct {
	mu     sync.Mutex
	writes []Write
	stop   context.CancelFunc
	done   sync.WaitGroup
}

// StartWidgetWriters starts the writers in ns, each writing every
// interval, and stops them when the test ends.
func StartWidgetWriters(t testing.TB, ns string, interval time.Duration, ws ...WidgetWriter) *WidgetWriters {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &WidgetWriters{stop: cancel}
	for i, wr := range ws {
		rnd := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
		w.done.Go(func() { w.run(ctx, wr, ns, interval, rnd) })
	}
	t.Cleanup(w.Finish)
	return w
}

// Finish stops the writers and waits for them.
func (w *WidgetWriters) Finish() {
	w.stop()
	w.done.Wait()
}

// widgetWriter is one running writer and the objects it keeps.
type widgetWriter struct {
	WidgetWriter
	to     *WidgetWriters
	client dynamic.ResourceInterface
	ns     string
	rnd    *rand.Rand
	live   []string // names, oldest first
	uids   map[string]types.UID
}

func (w *WidgetWriters) run(ctx context.Context, wr WidgetWriter, ns string, interval time.Duration, rnd *rand.Rand) {
	ww := &widgetWriter{WidgetWriter: wr, to: w, client: wr.Client.Resource(WidgetsGVR).Namespace(ns), ns: ns, rnd: rnd, uids: map[string]types.UID{}}
	for i := 0; ctx.Err() == nil; i++ {
		// Not under ctx: a write that Finish cancelled could be applied
		// by the apiserver and go unrecorded here.
		wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		ww.write(wctx, i)
		cancel()
		pause(ctx, interval)
	}
}

// write makes the writer's i-th write and records it if it succeeded.
func (ww *widgetWriter) write(ctx context.Context, i int) {
	now := time.Now()
	switch op := ww.rnd.IntN(10); {
	case len(ww.live) < 5 || op < 3:
		name := fmt.Sprintf("%s-%05d", ww.Prefix, i)
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "example.com/v1", "kind": "Widget",
			"metadata": map[string]any{"name": name, "namespace": ww.ns},
			"spec":     map[string]any{"size": int64(i)},
		}}
		if o, err := ww.client.Create(ctx, obj, metav1.CreateOptions{}); err == nil {
			ww.live = append(ww.live, name)
			ww.uids[name] = o.GetUID()
			ww.to.Record(Write{"created", name, o.GetUID(), o.GetResourceVersion(), now, ww.User})
		}
	case op < 5:
		// The oldest object, or the newest: objects that live for well
		// under a second are created and deleted while a replica is
		// away, which only the other sees.
		at := 0
		if op == 4 {
			at = len(ww.live) - 1
		}
		name := ww.live[at]
		if err := ww.client.Delete(ctx, name, metav1.DeleteOptions{}); err == nil {
			ww.live = slices.Delete(ww.live, at, at+1)
			ww.to.Record(Write{"deleted", name, ww.uids[name], "", now, ww.User})
		}
	default:
		name := ww.live[ww.rnd.IntN(len(ww.live))]
		patch := fmt.Appendf(nil, `{"spec":{"size":%d}}`, i)
		if o, err := ww.client.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err == nil {
			ww.to.Record(Write{"updated", name, o.GetUID(), o.GetResourceVersion(), now, ww.User})
		}
	}
}

// Record adds a write made outside the writers (an object a test created
// itself), to be checked with theirs.
func (w *WidgetWriters) Record(m Write) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, m)
}

// Made returns the writes so far.
func (w *WidgetWriters) Made() []Write {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.writes)
}

// WaitWrites waits until the writers have made n more writes than now:
// changes in flight, where a test would sleep.
func (w *WidgetWriters) WaitWrites(t testing.TB, n int) {
	t.Helper()
	target := len(w.Made()) + n
	if !PollEvery(100*time.Millisecond, 2*time.Minute, func() bool { return len(w.Made()) >= target }) {
		t.Fatalf("the writers made fewer than %d writes in 2 minutes", n)
	}
}

// Ours reports whether uid is an object the writers wrote.
func (w *WidgetWriters) Ours() func(uid string) bool {
	uids := map[string]bool{}
	for _, m := range w.Made() {
		uids[string(m.UID)] = true
	}
	return func(uid string) bool { return uids[uid] }
}

// Settle stops the writers, then waits until every write is covered by
// the deliveries that delivered returns (those about other objects are
// left out), and fails the test with what was lost otherwise.
func (w *WidgetWriters) Settle(t testing.TB, timeout time.Duration, delivered func() []losscheck.Delivery) losscheck.Outcome {
	t.Helper()
	w.Finish()
	writes := w.Made()
	ws := make([]losscheck.Write, len(writes))
	for i, m := range writes {
		ws[i] = losscheck.Write{Type: m.Type, Name: m.Name, UID: string(m.UID), ResourceVersion: m.ResourceVersion, At: m.At}
	}
	ours := w.Ours()
	var o losscheck.Outcome
	PollEvery(500*time.Millisecond, timeout, func() bool {
		ds := slices.DeleteFunc(delivered(), func(d losscheck.Delivery) bool { return !ours(d.UID) })
		o = losscheck.Compare(ws, ds)
		return len(o.Lost) == 0
	})
	if len(o.Lost) > 0 {
		n := min(len(o.Lost), 20)
		t.Errorf("%d changes never delivered by any replica, first %d:\n  %s", len(o.Lost), n, strings.Join(o.Lost[:n], "\n  "))
	}
	if len(o.Conflicting) > 0 {
		t.Errorf("changes delivered under different ids: %v", o.Conflicting)
	}
	return o
}
