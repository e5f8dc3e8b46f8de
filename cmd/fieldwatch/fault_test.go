package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fieldwatch/fieldwatch/action"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// kill SIGKILLs the process: no drain, no flush.
func (p *proc) kill() {
	p.t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.cmd.Wait()
	<-p.done
}

// waitExit waits for the process to exit on its own and returns its exit
// code (-1 if it had to be killed after timeout).
func (p *proc) waitExit(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		_ = p.cmd.Wait()
		p.t.Errorf("fieldwatch still running %s later", timeout)
		return -1
	}
	_ = p.cmd.Wait()
	return p.cmd.ProcessState.ExitCode()
}

// byName groups payloads by object name.
func byName(ps []map[string]any) map[string][]map[string]any {
	out := map[string][]map[string]any{}
	for _, p := range ps {
		n := fmt.Sprint(p["name"])
		out[n] = append(out[n], p)
	}
	return out
}

// TestSIGKILLRestart kills fieldwatch with SIGKILL while changes stream in,
// changes objects while it is down, and restarts it on the same
// --state-dir: every change made while it was down is reported once, each
// with the value it replaced, and whatever the kill cut short is reported
// again with the same id, never as a different change.
func TestSIGKILLRestart(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	ns := namespace(t, env, "sigkill")
	ctx := context.Background()
	kc := env.WriteKubeconfig(t)
	stateDir := t.TempDir()
	rules := writeFile(t, "rules.yaml", fmt.Sprintf(`rules:
  - name: cm
    match:
      resources: [{group: "", kind: ConfigMap}]
      namespaces: [%s]
    actions: [{log: {}}]
`, ns))
	cms := env.Clientset(t).CoreV1().ConfigMaps(ns)
	setV := func(name, v string) {
		t.Helper()
		if _, err := cms.Patch(ctx, name, types.MergePatchType, fmt.Appendf(nil, `{"data":{"v":%q}}`, v), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	const n = 30
	createConfigMaps(t, env, ns, "cm", n)

	// First run: the existing objects are the baseline, once recorded (the
	// Store commits in batches: a kill before the first leaves none, and
	// the next run then has nothing to compare with).
	p1 := startFieldwatch(t, kc, "--rules", rules, "--state-dir", stateDir)
	testenv.Eventually(t, 30*time.Second, "the baseline recorded", func() bool { return p1.metric("fieldwatch_baseline_objects") >= n })
	for i := range n {
		setV(fmt.Sprintf("cm-%02d", i), "live")
	}
	p1.waitPayloads(n/2, 30*time.Second) // mid-stream
	p1.kill()
	before := byName(inNamespace(p1.payloads(), ns))

	// While down.
	for i := range 10 {
		setV(fmt.Sprintf("cm-%02d", i), "down")
	}
	for i := 10; i < 15; i++ {
		if err := cms.Delete(ctx, fmt.Sprintf("cm-%02d", i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	createConfigMaps(t, env, ns, "new", 5)

	p2 := startFieldwatch(t, kc, "--rules", rules, "--state-dir", stateDir)
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "marker"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The marker's payload can overtake those of the changes found at
	// start (several workers): wait for all of them, then count.
	testenv.Eventually(t, 30*time.Second, "the marker and the changes made while down", func() bool {
		got := byName(inNamespace(p2.payloads(), ns))
		for i := range 15 {
			if len(got[fmt.Sprintf("cm-%02d", i)]) == 0 {
				return false
			}
		}
		return len(got["marker"]) == 1
	})
	got := byName(inNamespace(p2.payloads(), ns))
	for i := range n {
		name := fmt.Sprintf("cm-%02d", i)
		// The restart replays the writes since the first run's last
		// recorded watermark: the change to "live" comes again (same id)
		// when the kill cut it short.
		var ps []map[string]any
		ids := map[string]bool{}
		for _, pl := range append(before[name], got[name]...) {
			changes, _ := json.Marshal(pl["changes"])
			if pl["type"] == "updated" && strings.Contains(string(changes), `"value":"live"`) {
				ids[fmt.Sprint(pl["id"])] = true
				continue
			}
			ps = append(ps, pl)
		}
		if len(ids) > 1 {
			t.Errorf("%s changed to live once but was reported as %d different changes", name, len(ids))
		}
		switch {
		case i < 10:
			if len(ps) != 1 || ps[0]["type"] != "updated" {
				t.Errorf("%s changed while down: %d payloads %v, want one update", name, len(ps), ps)
				continue
			}
			changes, _ := json.Marshal(ps[0]["changes"])
			if !strings.Contains(string(changes), `"value":"down"`) || !strings.Contains(string(changes), `"oldValue":"live"`) {
				t.Errorf("%s: changes %s, want live -> down", name, changes)
			}
		case i < 15:
			if len(ps) != 1 || ps[0]["type"] != "deleted" {
				t.Errorf("%s deleted while down: %v, want one delete", name, ps)
			}
		default:
			// Unchanged while down: its one change (to "live") was
			// delivered before the kill, after the restart, or both when
			// the kill cut its commit short: then with the same id.
			if len(ids) != 1 || len(ps) != 0 {
				t.Errorf("%s changed once before the kill but was reported as %d different changes and %v", name, len(ids), ps)
			}
		}
	}
	for i := range 5 {
		name := fmt.Sprintf("new-%02d", i)
		if ps := got[name]; len(ps) != 1 || ps[0]["type"] != "created" {
			t.Errorf("%s created while down: %v, want one create", name, ps)
		}
	}
}

// receiver is a webhook receiver on 127.0.0.1 that can go down and come
// back on the same port (the port it was first given; going down and
// coming back there is what the tests are about).
type receiver struct {
	t    *testing.T
	addr string
	mu   sync.Mutex
	ids  map[string]int // Idempotency-Key -> deliveries
	srv  *http.Server
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{t: t, addr: "127.0.0.1:0", ids: map[string]int{}}
	r.up()
	t.Cleanup(r.down)
	return r
}

func (r *receiver) up() {
	r.t.Helper()
	ln, err := net.Listen("tcp", r.addr)
	if err != nil {
		r.t.Fatal(err)
	}
	r.addr = ln.Addr().String()
	r.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		r.mu.Lock()
		r.ids[req.Header.Get("Idempotency-Key")]++
		r.mu.Unlock()
	})}
	go func() { _ = r.srv.Serve(ln) }()
}

func (r *receiver) down() {
	if r.srv != nil {
		_ = r.srv.Close()
		r.srv = nil
	}
}

func (r *receiver) deliveries() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for k, v := range r.ids {
		out[k] = v
	}
	return out
}

// stall replaces the receiver by a listener at its address that takes
// connections and never answers; it returns the most connections it has
// held open at once so far, and unstall, which closes it and brings the
// receiver back.
func (r *receiver) stall() (peak func() int, unstall func()) {
	r.t.Helper()
	r.down()
	ln, err := net.Listen("tcp", r.addr)
	if err != nil {
		r.t.Fatal(err)
	}
	var (
		mu         sync.Mutex
		open, most int
		conns      []net.Conn
	)
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			open++
			most = max(most, open)
			mu.Unlock()
			go func() { // held until the client gives up
				_, _ = io.Copy(io.Discard, c)
				mu.Lock()
				open--
				mu.Unlock()
			}()
		}
	}()
	peak = func() int {
		mu.Lock()
		defer mu.Unlock()
		return most
	}
	return peak, func() {
		_ = ln.Close()
		<-accepted
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		r.up()
	}
}

// startForReceiver runs fieldwatch with one rule posting each ConfigMap
// created in ns to rec, with timeout and attempts, and returns it with
// its state directory.
func startForReceiver(t *testing.T, env *testenv.Env, ns string, rec *receiver, timeout string, attempts int) (*proc, string) {
	t.Helper()
	stateDir := t.TempDir()
	rules := writeFile(t, "rules.yaml", fmt.Sprintf(`rules:
  - name: cm-created
    match:
      resources: [{group: "", kind: ConfigMap}]
      namespaces: [%s]
    on: [create]
    actions:
      - webhook:
          url: http://%s/hook
          timeout: %s
          retry: {attempts: %d, initialBackoff: 100ms, maxBackoff: 1s}
`, ns, rec.addr, timeout, attempts))
	return startFieldwatch(t, env.WriteKubeconfig(t), "--rules", rules, "--state-dir", stateDir), stateDir
}

// deliveredOnce waits until rec has n distinct firings, and wants each
// delivered once and no dead letter in stateDir.
func deliveredOnce(t *testing.T, rec *receiver, n int, stateDir string) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, "every firing delivered", func() bool { return len(rec.deliveries()) >= n })
	for id, count := range rec.deliveries() {
		if count != 1 {
			t.Errorf("%s delivered %d times", id, count)
		}
	}
	if len(rec.deliveries()) != n {
		t.Errorf("%d distinct firings delivered, want %d", len(rec.deliveries()), n)
	}
	if _, err := os.Stat(filepath.Join(stateDir, "dead-letter.jsonl")); !os.IsNotExist(err) {
		b, _ := os.ReadFile(filepath.Join(stateDir, "dead-letter.jsonl"))
		t.Errorf("dead letters written although the receiver answered again within the retry budget:\n%s", b)
	}
}

// TestFaultReceiverNeverAnswers: a receiver that takes connections and
// never answers costs fieldwatch timed-out attempts, retried, with no
// more connections open at once than the action's workers (more
// firings than workers wait in its queue); once a receiver
// answers at the address again, without a restart, every firing is
// delivered once and none is dead-lettered.
func TestFaultReceiverNeverAnswers(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	ns := namespace(t, env, "receiver-stalled")
	rec := newReceiver(t)
	p, stateDir := startForReceiver(t, env, ns, rec, "500ms", 60)
	peak, unstall := rec.stall()
	const n = 3 * action.DefaultWebhookWorkers
	createConfigMaps(t, env, ns, "cm", n)
	testenv.Eventually(t, 30*time.Second, "attempts timed out and retried", func() bool {
		return p.metric(`fieldwatch_action_retried_total{`) >= 2*action.DefaultWebhookWorkers
	})
	// A worker closes its connection when its attempt times out, before
	// its backoff: a few may overlap with the receiver's noticing it.
	if most := peak(); most == 0 || most > action.DefaultWebhookWorkers+4 {
		t.Errorf("%d connections to the stalled receiver at once, want 1 to %d (the action's workers)", most, action.DefaultWebhookWorkers+4)
	}
	t.Logf("stalled: at most %d connections at once, %v attempts retried", peak(), p.metric(`fieldwatch_action_retried_total{`))
	unstall()
	deliveredOnce(t, rec, n, stateDir)
}

// TestWebhookReceiverDownThenBack: firings made while the receiver is down
// are retried and all delivered once it is back, none dead-lettered.
func TestWebhookReceiverDownThenBack(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	ns := namespace(t, env, "receiver")
	rec := newReceiver(t)
	p, stateDir := startForReceiver(t, env, ns, rec, "2s", 30)
	rec.down()
	const n = 20
	createConfigMaps(t, env, ns, "cm", n)
	testenv.Eventually(t, 30*time.Second, "retries while the receiver is down", func() bool {
		return p.metric(`fieldwatch_action_retried_total{`) > 0
	})
	rec.up()
	deliveredOnce(t, rec, n, stateDir)
}
