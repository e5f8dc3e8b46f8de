package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/fieldwatch/fieldwatch/internal/payloadtest"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// The tests of this file check that every write the watch delivers
// reaches the actions as its own payload: bursts of updates of one object
// faster than a receiver answers are queued, never merged.

var configMapsGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// seqPayload is what the sequence tests read of a payload.
type seqPayload struct {
	id, name, rv, observed string
	value, oldValue        string // of the change at /data/v
	user, match            string // the actor's effective username and match
}

// parseSeqPayload decodes a payload, which must be one of
// payload.Payload's as it is written (payloadtest.Check).
func parseSeqPayload(body []byte) (seqPayload, error) {
	p, err := payloadtest.Check(body)
	if err != nil {
		return seqPayload{}, err
	}
	out := seqPayload{id: p.ID, name: p.Name, rv: p.ResourceVersion, observed: string(p.Observed)}
	for _, c := range p.Changes {
		if c.Path == "/data/v" {
			out.value, out.oldValue = jsonText(c.Value), jsonText(c.OldValue)
		}
	}
	if a := p.Actor; a != nil {
		out.match, out.user = string(a.Match), a.Username()
	}
	return out, nil
}

// jsonText returns a JSON string's text, and any other JSON value as it
// is written ("<nil>" when absent).
func jsonText(v json.RawMessage) string {
	var s string
	switch {
	case v == nil:
		return "<nil>"
	case json.Unmarshal(v, &s) == nil:
		return s
	}
	return string(v)
}

// seqHooks is a webhook receiver on 127.0.0.1: a POST to /<ms>/<label>
// is answered after ms milliseconds and recorded under label.
type seqHooks struct {
	t    *testing.T
	addr string
	mu   sync.Mutex
	got  map[string][]seqPayload
}

func newSeqHooks(t *testing.T) *seqHooks {
	t.Helper()
	h := &seqHooks{t: t, got: map[string][]seqPayload{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr = ln.Addr().String()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return h
}

// ServeHTTP implements http.Handler.
func (h *seqHooks) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	delay, label, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	ms, _ := strconv.Atoi(delay)
	time.Sleep(time.Duration(ms) * time.Millisecond) // the receiver's own pace: a latency the fieldwatch process must live through, not a condition
	p, err := parseSeqPayload(body)
	if err != nil {
		h.t.Errorf("payload is not JSON: %s", body)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	h.got[label] = append(h.got[label], p)
	h.mu.Unlock()
}

// action returns a webhook action posting to label, answered after delay.
func (h *seqHooks) action(delay time.Duration, label string) string {
	return fmt.Sprintf(`{webhook: {url: "http://%s/%d/%s", timeout: 10s, retry: {attempts: 100000, initialBackoff: 20ms, maxBackoff: 200ms}}}`,
		h.addr, delay.Milliseconds(), label)
}

// payloads returns what label received.
func (h *seqHooks) payloads(label string) []seqPayload {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.got[label])
}

// logged returns the payloads a process's log action printed, in order.
func logged(t *testing.T, p *proc) []seqPayload {
	t.Helper()
	p.mu.Lock()
	lines := slices.Clone(p.out)
	p.mu.Unlock()
	out := make([]seqPayload, 0, len(lines))
	for _, line := range lines {
		sp, err := parseSeqPayload([]byte(line))
		if err != nil {
			t.Errorf("stdout line is not JSON: %q", line)
			continue
		}
		out = append(out, sp)
	}
	return out
}

// written is one object's writes: the resourceVersion each made, in
// order, data.v being "1", "2", ... and "0" before them.
type written struct {
	name   string
	writer string // the effective username ("" when not checked)
	rvs    []string
}

// burst sets data.v of the ConfigMap name to from+1 ... from+n, one patch
// after the other as fast as the apiserver takes them, and returns the
// resourceVersion of each.
func burst(ctx context.Context, cms dynamic.ResourceInterface, name string, from, n int) ([]string, error) {
	rvs := make([]string, 0, n)
	for i := from + 1; i <= from+n; i++ {
		o, err := cms.Patch(ctx, name, types.MergePatchType, fmt.Appendf(nil, `{"data":{"v":"%d"}}`, i), metav1.PatchOptions{})
		if err != nil {
			return rvs, fmt.Errorf("patch %s to %d: %w", name, i, err)
		}
		rvs = append(rvs, o.GetResourceVersion())
	}
	return rvs, nil
}

// createV creates the ConfigMap name with data.v "0".
func createV(t *testing.T, cms dynamic.ResourceInterface, name string) {
	t.Helper()
	cm := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name}, "data": map[string]any{"v": "0"}}}
	if _, err := cms.Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// seqRules returns a rules file with one rule on updates of data.v of the
// ConfigMaps of ns, with the given actions.
func seqRules(t *testing.T, ns string, actions ...string) string {
	t.Helper()
	return writeFile(t, "rules.yaml", fmt.Sprintf(`rules:
  - name: v
    match:
      resources: [{group: "", kind: ConfigMap}]
      namespaces: [%s]
    on: [update]
    fields: [data.v]
    actions: [%s]
`, ns, strings.Join(actions, ", ")))
}

// seqCheck says how checkWrites judges a receiver's payloads.
type seqCheck struct {
	// repeats allows a write to be delivered more than once (after a
	// SIGKILL or a takeover), with one id.
	repeats bool
	// attributed wants each payload's actor to name the object's writer,
	// matched exact or window.
	attributed bool
}

// checkWrites checks the payloads one receiver got about w's object: each
// write's resourceVersion delivered once (or, with repeats, at least once
// and always under one id), nothing else, none observed as a net effect,
// and, in resourceVersion order, each old value the previous payload's
// value. It returns how many payloads were repeats.
func checkWrites(t *testing.T, label string, w written, all []seqPayload, how seqCheck) (repeats int) {
	t.Helper()
	byRV := map[string][]seqPayload{}
	for _, p := range all {
		if p.name == w.name {
			byRV[p.rv] = append(byRV[p.rv], p)
		}
	}
	var missing, unknown, merged, wrongActor []string
	for _, rv := range w.rvs {
		ps := byRV[rv]
		switch {
		case len(ps) == 0:
			missing = append(missing, rv)
			continue
		case len(ps) > 1 && !how.repeats:
			t.Errorf("%s: %s rv %s delivered %d times", label, w.name, rv, len(ps))
		}
		repeats += len(ps) - 1
		for _, p := range ps {
			if p.id != ps[0].id {
				t.Errorf("%s: %s rv %s delivered under ids %s and %s", label, w.name, rv, ps[0].id, p.id)
			}
			if p.observed != "" {
				merged = append(merged, fmt.Sprintf("rv %s observed %s", rv, p.observed))
			}
			if how.attributed && (p.user != w.writer || p.match != "exact" && p.match != "window") {
				wrongActor = append(wrongActor, fmt.Sprintf("rv %s: %s %s", rv, p.user, p.match))
			}
		}
	}
	for rv := range byRV {
		if !slices.Contains(w.rvs, rv) {
			unknown = append(unknown, rv)
		}
	}
	report := func(what string, list []string) {
		if len(list) > 0 {
			t.Errorf("%s: %s: %d %s, first %v", label, w.name, len(list), what, list[:min(len(list), 5)])
		}
	}
	report("writes never delivered", missing)
	report("payloads of no write", unknown)
	report("net effects", merged)
	report("payloads not attributed to "+w.writer, wrongActor)
	// The chain: each payload's old value is the previous one's value.
	prev := "0"
	for _, rv := range w.rvs {
		ps := byRV[rv]
		if len(ps) == 0 {
			prev = "?"
			continue
		}
		if prev != "?" && ps[0].oldValue != prev {
			t.Errorf("%s: %s rv %s: old value %s, want %s (the previous write's value)", label, w.name, rv, ps[0].oldValue, prev)
		}
		prev = ps[0].value
	}
	return repeats
}

// checkOrder checks that the payloads of each object come in the order of
// its writes (a log action writes in the order it is handed them).
func checkOrder(t *testing.T, label string, ps []seqPayload) {
	t.Helper()
	last := map[string]uint64{}
	for _, p := range ps {
		rv, _ := strconv.ParseUint(p.rv, 10, 64)
		if rv < last[p.name] {
			t.Errorf("%s: %s rv %d after rv %d", label, p.name, rv, last[p.name])
		}
		last[p.name] = rv
	}
}

// runWriters runs each write plan at once and returns what they wrote.
func runWriters(t *testing.T, plans []writePlan) []written {
	t.Helper()
	out := make([]written, len(plans))
	var wg sync.WaitGroup
	for i, pl := range plans {
		wg.Go(func() {
			rvs, err := burst(context.Background(), pl.client, pl.name, pl.from, pl.n)
			if err != nil {
				t.Error(err)
			}
			out[i] = written{name: pl.name, writer: pl.writer, rvs: rvs}
		})
	}
	wg.Wait()
	return out
}

// writePlan is one writer's burst on one object.
type writePlan struct {
	name, writer string
	client       dynamic.ResourceInterface
	from, n      int
}

// seqPlans are the bursts of TestEveryWriteItsOwnRecord and
// TestEveryWriteAttributed: 300 and 3,000 updates of one object by one
// writer, and 300 by each of 8 writers on 8 objects at once.
func seqPlans(client func(writer string) dynamic.ResourceInterface) []writePlan {
	plans := []writePlan{
		{name: "one-300", writer: "ann", n: 300},
		{name: "one-3000", writer: "bob", n: 3000},
	}
	for i := range 8 {
		plans = append(plans, writePlan{name: fmt.Sprintf("eight-%d", i), writer: fmt.Sprintf("writer-%d", i), n: 300})
	}
	for i := range plans {
		plans[i].client = client(plans[i].writer)
	}
	return plans
}

// seqDelays are the receivers' answer times.
var seqDelays = []time.Duration{0, 20 * time.Millisecond, 100 * time.Millisecond}

// TestEveryWriteItsOwnRecord: bursts of updates (300 and 3,000 of one
// object by one writer, 300 on each of 8 objects by 8 writers at once)
// reach three receivers answering in 0, 20 and 100 ms: each receives
// every write, once, with the value it replaced; the log action has
// each object's payloads in the order of its writes. A per-object bound
// of 200 makes the watcher hold its watch if the slow receiver falls
// behind: nothing is merged for that.
func TestEveryWriteItsOwnRecord(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	ns := namespace(t, env, "every-write")
	hooks := newSeqHooks(t)
	actions := []string{"{log: {}}"}
	for _, d := range seqDelays {
		actions = append(actions, hooks.action(d, d.String()))
	}
	p := startFieldwatch(t, env.WriteKubeconfig(t), "--rules", seqRules(t, ns, actions...), "--queue-max-object-changes", "200")
	cms := env.Dynamic(t).Resource(configMapsGVR).Namespace(ns)
	plans := seqPlans(func(string) dynamic.ResourceInterface { return cms })
	total := 0
	for _, pl := range plans {
		createV(t, cms, pl.name)
		total += pl.n
	}
	start := time.Now()
	writes := runWriters(t, plans)
	wrote := time.Since(start)
	for _, d := range seqDelays {
		testenv.Eventually(t, 3*time.Minute, fmt.Sprintf("%d payloads at the %s receiver", total, d), func() bool {
			return len(hooks.payloads(d.String())) >= total
		})
	}
	t.Logf("%d writes in %s; all delivered %s after the first; the watch waited %.1f s for the slow receiver",
		total, wrote.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), p.metric("fieldwatch_watcher_backpressure_seconds_total"))
	for _, d := range seqDelays {
		for _, w := range writes {
			checkWrites(t, d.String()+" receiver", w, hooks.payloads(d.String()), seqCheck{})
		}
	}
	log := logged(t, p)
	for _, w := range writes {
		checkWrites(t, "log", w, log, seqCheck{})
	}
	checkOrder(t, "log", log)
}

// TestEveryWriteAttributed: the bursts of TestEveryWriteItsOwnRecord, each
// writer a user of its own, on a control plane that audits ConfigMap
// writes at Metadata level and sends them to fieldwatch's audit webhook
// in batches of a second: every payload names its writer (exact or
// window), none is merged, at each of the three receivers.
func TestEveryWriteAttributed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certs, err := testenv.NewAuditTLS(dir, "fieldwatch-sequence-audit")
	if err != nil {
		t.Fatal(err)
	}
	px := testenv.NewProxy(t, "")
	webhook := certs.Webhook("https://" + px.Addr() + "/")
	webhook.BatchMaxWait = time.Second
	env := testenv.Start(t, testenv.Options{Audit: &testenv.Audit{Policy: testenv.AttributionPolicy, Webhook: webhook}})
	ns := namespace(t, env, "every-write-attributed")
	hooks := newSeqHooks(t)
	var actions []string
	for _, d := range seqDelays {
		actions = append(actions, hooks.action(d, d.String()))
	}
	// A race-built process on a loaded machine may read a write or its
	// audit event seconds late: wider bounds than the defaults keep the
	// test about merging, not timing (one writer per object: no window
	// can make a match ambiguous).
	p := startFieldwatch(t, env.WriteKubeconfig(t), "--rules", seqRules(t, ns, actions...), "--audit-webhook-addr", "127.0.0.1:0",
		"--audit-webhook-cert-file", certs.CertFile, "--audit-webhook-key-file", certs.KeyFile,
		"--audit-webhook-client-ca-file", certs.CAFile, "--audit-webhook-client-name", certs.ClientName,
		"--audit-wait", "10s", "--audit-match-window", "10s")
	px.SetTarget(p.loggedAddr("audit webhook listening"))

	admin := env.Dynamic(t).Resource(configMapsGVR).Namespace(ns)
	plans := seqPlans(func(writer string) dynamic.ResourceInterface {
		return env.Impersonating(t, writer).Dynamic.Resource(configMapsGVR).Namespace(ns)
	})
	total := 0
	for _, pl := range plans {
		createV(t, admin, pl.name)
		total += pl.n
	}
	// The apiserver retries its first batches until fieldwatch listens:
	// wait until one went through.
	testenv.Eventually(t, time.Minute, "the apiserver's first audit batch", func() bool {
		return p.metric(`fieldwatch_audit_events_total{result="indexed",source="webhook"}`) > 0
	})
	start := time.Now()
	writes := runWriters(t, plans)
	wrote := time.Since(start)
	for _, d := range seqDelays {
		testenv.Eventually(t, 3*time.Minute, fmt.Sprintf("%d payloads at the %s receiver", total, d), func() bool {
			return len(hooks.payloads(d.String())) >= total
		})
	}
	t.Logf("%d writes in %s; all delivered %s after the first", total, wrote.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	for _, d := range seqDelays {
		for _, w := range writes {
			checkWrites(t, d.String()+" receiver", w, hooks.payloads(d.String()), seqCheck{attributed: true})
		}
	}
}

// midBurst runs plans in the background and returns a function that waits
// for them and returns what they wrote.
func midBurst(t *testing.T, plans []writePlan) func() []written {
	t.Helper()
	done := make(chan []written, 1)
	go func() { done <- runWriters(t, plans) }()
	return func() []written { return <-done }
}

// fourBursts are the bursts of the SIGKILL and failover tests: 500
// updates of each of four objects at once.
func fourBursts(cms dynamic.ResourceInterface) []writePlan {
	var plans []writePlan
	for i := range 4 {
		plans = append(plans, writePlan{name: fmt.Sprintf("hot-%d", i), client: cms, n: 500})
	}
	return plans
}

// waitDelivered waits until label received a payload of every write.
func waitDelivered(t *testing.T, hooks *seqHooks, label string, writes []written) {
	t.Helper()
	testenv.Eventually(t, 2*time.Minute, "every write delivered", func() bool {
		got := map[string]bool{}
		for _, p := range hooks.payloads(label) {
			got[p.name+"/"+p.rv] = true
		}
		for _, w := range writes {
			for _, rv := range w.rvs {
				if !got[w.name+"/"+rv] {
					return false
				}
			}
		}
		return true
	})
}

// TestEveryWriteAcrossSIGKILL SIGKILLs fieldwatch (--state-dir) in the
// middle of bursts of updates and starts it again while they go on: every
// write is delivered, those the kill cut short again under the same id,
// each with the value it replaced; the writes made while no process ran
// come one by one too (replayed from the baseline's watermark), none as
// a net effect.
func TestEveryWriteAcrossSIGKILL(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	ns := namespace(t, env, "every-write-sigkill")
	hooks := newSeqHooks(t)
	rules := seqRules(t, ns, hooks.action(20*time.Millisecond, "r"))
	kc := env.WriteKubeconfig(t)
	stateDir := t.TempDir()
	cms := env.Dynamic(t).Resource(configMapsGVR).Namespace(ns)
	plans := fourBursts(cms)
	for _, pl := range plans {
		createV(t, cms, pl.name)
	}
	p1 := startFieldwatch(t, kc, "--rules", rules, "--state-dir", stateDir)
	wait := midBurst(t, plans)
	testenv.Eventually(t, time.Minute, "the burst to be under way", func() bool { return len(hooks.payloads("r")) >= 300 })
	p1.kill()
	killedAt := len(hooks.payloads("r"))
	p2 := startFieldwatch(t, kc, "--rules", rules, "--state-dir", stateDir)
	writes := wait()
	waitDelivered(t, hooks, "r", writes)
	repeats := 0
	for _, w := range writes {
		repeats += checkWrites(t, "receiver", w, hooks.payloads("r"), seqCheck{repeats: true})
	}
	t.Logf("killed after %d deliveries; %d writes delivered, %d again with the same id; the restart replayed %v informer(s)",
		killedAt, len(hooks.payloads("r"))-repeats, repeats, p2.metric(`fieldwatch_baseline_resumes_total{outcome="replayed"}`))
	if p2.metric(`fieldwatch_baseline_resumes_total{outcome="replayed"}`) < 1 {
		t.Errorf("the restart did not replay from the baseline's watermark")
	}
}

// TestEveryWriteAcrossFailover SIGKILLs the leader of two replicas in the
// middle of bursts of updates: the standby, which kept every write the
// leader's watermark had not confirmed, takes over and delivers them; no
// write is missing, a repeat has the same id, none is merged.
func TestEveryWriteAcrossFailover(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	ns := namespace(t, env, "every-write-failover")
	hooks := newSeqHooks(t)
	kc := env.WriteKubeconfig(t)
	cms := env.Dynamic(t).Resource(configMapsGVR).Namespace(ns)
	plans := fourBursts(cms)
	for _, pl := range plans {
		createV(t, cms, pl.name)
	}
	args := func(name string) []string {
		return append([]string{"--rules", seqRules(t, ns, hooks.action(20*time.Millisecond, "r")), "--state-dir", t.TempDir(),
			"--leader-elect", "--leader-elect-namespace", ns, "--leader-elect-name", "fw", "--leader-elect-identity", name}, fastLease...)
	}
	reps := []*proc{startFieldwatch(t, kc, args("a")...), startFieldwatch(t, kc, args("b")...)}
	leader := leaderOf(t, 30*time.Second, reps...)
	standby := reps[0]
	if leader == reps[0] {
		standby = reps[1]
	}
	wait := midBurst(t, plans)
	testenv.Eventually(t, time.Minute, "the standby to follow the leader mid-burst", func() bool {
		return len(hooks.payloads("r")) >= 300 && standby.metric("fieldwatch_baseline_confirmed_total") > 0
	})
	leader.kill()
	testenv.Eventually(t, 30*time.Second, "the standby to take over", func() bool { return standby.metric("fieldwatch_leader ") == 1 })
	writes := wait()
	waitDelivered(t, hooks, "r", writes)
	repeats := 0
	for _, w := range writes {
		repeats += checkWrites(t, "receiver", w, hooks.payloads("r"), seqCheck{repeats: true})
	}
	t.Logf("the new leader fired %v changes the killed one had not confirmed; %d payloads repeated with the same id",
		standby.metric("fieldwatch_baseline_takeover_changes_total"), repeats)
}

// TestRelistObserved cuts fieldwatch off the apiserver while an object
// changes, and compacts etcd's history so that its watch cannot resume
// (ConfigMaps served without the watch cache): the informer relists, and
// the writes it could not see come as one change, the net effect, whose
// payload says "observed":"relist". The writes before come one by one.
func TestRelistObserved(t *testing.T) {
	t.Parallel()
	env := testenv.Start(t, testenv.Options{APIServerArgs: map[string][]string{"watch-cache-sizes": {"configmaps#0"}}})
	ns := namespace(t, env, "relist-observed")
	hooks := newSeqHooks(t)
	kc := env.WriteKubeconfig(t)
	px := testenv.NewProxy(t, apiserverAddr(t, kc))
	startFieldwatch(t, kubeconfigVia(t, kc, px.Addr()), "--rules", seqRules(t, ns, hooks.action(0, "r")))
	cms := env.Dynamic(t).Resource(configMapsGVR).Namespace(ns)
	createV(t, cms, "x")
	before, err := burst(context.Background(), cms, "x", 0, 5)
	if err != nil {
		t.Fatal(err)
	}
	waitDelivered(t, hooks, "r", []written{{name: "x", rvs: before}})
	px.Cut()
	gap, err := burst(context.Background(), cms, "x", 5, 5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.CompactEtcd(context.Background()); err != nil {
		t.Fatal(err)
	}
	px.Restore()
	last := gap[len(gap)-1]
	testenv.Eventually(t, time.Minute, "the relist's change", func() bool {
		return slices.ContainsFunc(hooks.payloads("r"), func(p seqPayload) bool { return p.rv == last })
	})
	for _, p := range hooks.payloads("r") {
		switch {
		case slices.Contains(before, p.rv):
			if p.observed != "" {
				t.Errorf("rv %s, a watch event, observed %q", p.rv, p.observed)
			}
		case p.rv == last:
			if p.observed != "relist" || p.oldValue != "5" || p.value != "10" {
				t.Errorf("the relist's change: observed %q, %s -> %s; want relist, 5 -> 10", p.observed, p.oldValue, p.value)
			}
		default:
			t.Errorf("rv %s (%s -> %s) delivered: a write of the gap one by one, or unknown", p.rv, p.oldValue, p.value)
		}
	}
}
