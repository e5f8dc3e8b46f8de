//go:build e2e

package e2e

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

var (
	widgetsGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	crdsGVR    = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// made is one write a writer made.
type made struct {
	typ  string // created, updated, deleted
	name string
	uid  types.UID
	rv   string // of the new state; "" for a deletion
	at   time.Time
}

// writers create, update and delete Widgets in a namespace until stopped
// and record every write that succeeded, as ../../e2e's: of ten writes
// three create, one deletes the oldest object, one the newest, five
// update.
type writers struct {
	mu     sync.Mutex
	writes []made
	stop   context.CancelFunc
	done   sync.WaitGroup
}

// startWriter starts one writer in ns, writing every interval.
func startWriter(t testing.TB, ns string, interval time.Duration) *writers {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &writers{stop: cancel}
	rnd := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	w.done.Go(func() { w.run(ctx, c.dyn.Resource(widgetsGVR).Namespace(ns), ns, interval, rnd) })
	t.Cleanup(w.finish)
	return w
}

// finish stops the writers and waits for them.
func (w *writers) finish() {
	w.stop()
	w.done.Wait()
}

func (w *writers) run(ctx context.Context, client dynamic.ResourceInterface, ns string, interval time.Duration, rnd *rand.Rand) {
	var live []string
	uids := map[string]types.UID{}
	for i := 0; ctx.Err() == nil; i++ {
		now := time.Now()
		switch op := rnd.IntN(10); {
		case len(live) < 5 || op < 3:
			name := fmt.Sprintf("w-%05d", i)
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "example.com/v1", "kind": "Widget",
				"metadata": map[string]any{"name": name, "namespace": ns},
				"spec":     map[string]any{"size": int64(i)},
			}}
			if o, err := client.Create(ctx, obj, metav1.CreateOptions{}); err == nil {
				live = append(live, name)
				uids[name] = o.GetUID()
				w.record(made{"created", name, o.GetUID(), o.GetResourceVersion(), now})
			}
		case op < 5:
			at := 0
			if op == 4 {
				at = len(live) - 1
			}
			name := live[at]
			if err := client.Delete(ctx, name, metav1.DeleteOptions{}); err == nil {
				live = slices.Delete(live, at, at+1)
				w.record(made{"deleted", name, uids[name], "", now})
			}
		default:
			name := live[rnd.IntN(len(live))]
			patch := fmt.Appendf(nil, `{"spec":{"size":%d}}`, i)
			if o, err := client.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err == nil {
				w.record(made{"updated", name, o.GetUID(), o.GetResourceVersion(), now})
			}
		}
		sleep(ctx, interval)
	}
}

func (w *writers) record(m made) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, m)
}

// made returns the writes so far.
func (w *writers) made() []made {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.writes)
}

// waitWrites waits until the writers have made n more writes than now.
func (w *writers) waitWrites(t testing.TB, n int) {
	t.Helper()
	start := len(w.made())
	if !poll(time.Minute, func() bool { return len(w.made()) >= start+n }) {
		t.Fatalf("the writer made fewer than %d writes in a minute", n)
	}
}

// outcome is how the payloads compare with the writes (losscheck).
type outcome = losscheck.Outcome

// compare checks the payloads against the writes (losscheck.Compare).
func compare(writes []made, got []payload) outcome {
	ws := make([]losscheck.Write, len(writes))
	for i, m := range writes {
		ws[i] = losscheck.Write{Type: m.typ, Name: m.name, UID: string(m.uid), ResourceVersion: m.rv, At: m.at}
	}
	ds := make([]losscheck.Delivery, len(got))
	for i, p := range got {
		ds[i] = losscheck.Delivery{ID: p.ID, Type: string(p.Type), UID: p.UID, ResourceVersion: p.ResourceVersion}
	}
	return losscheck.Compare(ws, ds)
}

// settle stops the writers, waits until every write is covered by the
// payloads of rule in the pods' logs, and fails the test with what was
// lost otherwise.
func settle(t testing.TB, logs *podLogs, w *writers, rule string, timeout time.Duration) outcome {
	t.Helper()
	w.finish()
	uids := map[string]bool{}
	for _, m := range w.made() {
		uids[string(m.uid)] = true
	}
	var o outcome
	deadline := time.Now().Add(timeout)
	for {
		var ours []payload
		for _, p := range logs.payloads(rule) {
			if uids[p.UID] {
				ours = append(ours, p)
			}
		}
		o = compare(w.made(), ours)
		if len(o.Lost) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if len(o.Lost) > 0 {
		n := min(len(o.Lost), 20)
		t.Errorf("%d changes never delivered by any replica, first %d:\n  %s", len(o.Lost), n, strings.Join(o.Lost[:n], "\n  "))
	}
	if len(o.Conflicting) > 0 {
		t.Errorf("changes delivered under different ids: %v", o.Conflicting)
	}
	return o
}
