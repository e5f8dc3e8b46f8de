package examples_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fieldwatch/fieldwatch/internal/app"
	"github.com/fieldwatch/fieldwatch/internal/payloadtest"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
	fwpayload "github.com/fieldwatch/fieldwatch/payload"
)

// waitTimeout bounds every wait for something fieldwatch does.
const waitTimeout = 30 * time.Second

// fieldwatch is one `fieldwatch run` in process, against the shared
// control plane.
type fieldwatch struct {
	stdout, logs testenv.SyncBuffer
	addr         string // of /metrics, /healthz, /readyz
}

// startFieldwatch runs app.Run with the rules file until the test ends and
// returns once it is ready (every watched resource synced): changes made
// after that are changes, not its baseline. At cleanup it cancels Run and
// waits for it to return.
func startFieldwatch(t *testing.T, rulesFile string) *fieldwatch {
	t.Helper()
	env := testenv.Shared(t)
	fw := &fieldwatch{}
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	finished := make(chan struct{})
	stateDir := t.TempDir() // here, so that it is removed after Run returns
	var runErr error
	go func() {
		defer close(finished)
		runErr = app.Run(ctx, app.Config{
			RulesFiles:  []string{rulesFile},
			Rest:        env.Config(),
			HTTPAddr:    "127.0.0.1:0",
			StateDir:    stateDir,
			GracePeriod: 10 * time.Second,
			Logger:      slog.New(slog.NewJSONHandler(&fw.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			Stdout:      &fw.stdout,
			Ready:       func(addr string) { addrc <- addr },
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-finished:
			if runErr != nil {
				t.Errorf("app.Run: %v", runErr)
			}
		case <-time.After(waitTimeout):
			t.Errorf("app.Run did not return %s after its context ended", waitTimeout)
		}
		if t.Failed() {
			t.Logf("fieldwatch stdout:\n%s\nfieldwatch logs:\n%s", fw.stdout.String(), fw.logs.String())
		}
	})

	select {
	case fw.addr = <-addrc:
	case <-finished:
		t.Fatalf("app.Run returned before listening: %v\nlogs:\n%s", runErr, fw.logs.String())
	case <-time.After(waitTimeout):
		t.Fatalf("app.Run did not listen within %s", waitTimeout)
	}
	waitFor(t, "fieldwatch ready", func() (bool, string) {
		code, body := fw.get(t, "/readyz")
		return code == http.StatusOK, fmt.Sprintf("/readyz: %d %s", code, body)
	})
	return fw
}

// httpClient talks to fieldwatch's HTTP server.
var httpClient = &http.Client{Timeout: 5 * time.Second}

// get GETs a path of fieldwatch's HTTP server.
func (fw *fieldwatch) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := httpClient.Get("http://" + fw.addr + path)
	if err != nil {
		return 0, err.Error()
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, strings.TrimSpace(string(body))
}

// evaluated returns fieldwatch_changes_evaluated_total summed over types:
// the changes of watched resources fieldwatch has taken from its queue.
func (fw *fieldwatch) evaluated(t *testing.T) int {
	t.Helper()
	return fw.metric(t, "fieldwatch_changes_evaluated_total{")
}

// metric returns the sum of the samples of /metrics whose line starts
// with prefix (a metric name and "{", or with some of its labels).
func (fw *fieldwatch) metric(t *testing.T, prefix string) int {
	t.Helper()
	code, body := fw.get(t, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	total := 0
	for line := range strings.Lines(body) {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(line[strings.LastIndexByte(line, ' ')+1:]), 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		total += int(v)
	}
	return total
}

// step makes one change (do) and waits until fieldwatch has taken it from
// its queue, so that the next step is a change of its own and not merged
// with this one (the queue holds a key once). A change that fires nothing
// is shown quiet by a later step on the same object that does fire: the
// log action of a rule writes in order.
func (fw *fieldwatch) step(t *testing.T, what string, do func() error) {
	t.Helper()
	before := fw.evaluated(t)
	if err := do(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	waitFor(t, what+": evaluated", func() (bool, string) {
		n := fw.evaluated(t)
		return n > before, fmt.Sprintf("changes evaluated: %d, before the change: %d", n, before)
	})
}

// unwatched makes a change in a namespace the rules do not name: fieldwatch
// does not even list that namespace (its informers are per named
// namespace), so there is nothing to wait for. That it stays quiet is
// checked on the payloads once the later, watched steps have fired.
func (fw *fieldwatch) unwatched(t *testing.T, what string, do func() error) {
	t.Helper()
	if err := do(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// payload is one JSON line of the log action: the payload and the line.
type payload struct {
	fwpayload.Payload
	raw string
}

// object returns the payload's object decoded, nil when it has none.
func (p payload) object() map[string]any { return decodeObject(p.Object) }

// oldObject returns the payload's oldObject decoded, nil when it has none.
func (p payload) oldObject() map[string]any { return decodeObject(p.OldObject) }

func decodeObject(v json.RawMessage) map[string]any {
	var m map[string]any
	_ = json.Unmarshal(v, &m)
	return m
}

// payloads parses the lines the log action has written so far (a line
// being written is left for the next call); every line must be a payload
// as payload.Payload writes it (payloadtest.Check).
func (fw *fieldwatch) payloads(t *testing.T) []payload {
	t.Helper()
	out := fw.stdout.String()
	complete := out[:strings.LastIndexByte(out, '\n')+1]
	var ps []payload
	sc := bufio.NewScanner(strings.NewReader(complete))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		line := sc.Text()
		p, err := payloadtest.Check([]byte(line))
		if err != nil {
			t.Fatalf("stdout line: %v", err)
		}
		ps = append(ps, payload{Payload: p, raw: line})
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read stdout: %v", err)
	}
	return ps
}

// firings returns the payloads of rule about the named object, in order.
func (fw *fieldwatch) firings(t *testing.T, rule, namespace, name string) []payload {
	t.Helper()
	var out []payload
	for _, p := range fw.payloads(t) {
		if p.Rule == rule && p.Namespace == namespace && p.Name == name {
			out = append(out, p)
		}
	}
	return out
}

// waitFiring waits until rule has fired for the object at resource
// version rv ("" for any) and returns that payload.
func (fw *fieldwatch) waitFiring(t *testing.T, rule, namespace, name, rv string) payload {
	t.Helper()
	var found payload
	waitFor(t, fmt.Sprintf("%s fires for %s/%s at %q", rule, namespace, name, rv), func() (bool, string) {
		ps := fw.firings(t, rule, namespace, name)
		for _, p := range ps {
			if rv == "" || p.ResourceVersion == rv {
				found = p
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d payloads of %s for it so far; stdout:\n%s", len(ps), rule, fw.stdout.String())
	})
	return found
}

// resourceVersions lists the resource versions of payloads.
func resourceVersions(ps []payload) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.ResourceVersion
	}
	return out
}

// waitFor polls cond until it holds or waitTimeout passes; why says what
// was seen last, for the failure message.
func waitFor(t *testing.T, what string, cond func() (ok bool, why string)) {
	t.Helper()
	testenv.EventuallyWhy(t, waitTimeout, what, cond)
}

// jsonEqual reports whether got, encoded as JSON, equals the JSON want.
func jsonEqual(t *testing.T, got any, want string) bool {
	t.Helper()
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	var g, w any
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad JSON in the test: %v: %s", err, want)
	}
	return reflect.DeepEqual(g, w)
}

// checkChanges fails the test unless p's changes are want (JSON).
func checkChanges(t *testing.T, p payload, want string) {
	t.Helper()
	if !jsonEqual(t, p.Changes, want) {
		t.Errorf("%s changes:\n got %s\nwant %s", p.ID, mustJSON(t, p.Changes), want)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// ensureNamespace creates a namespace unless it exists (the examples name
// production and kube-system, which several tests share).
func ensureNamespace(t *testing.T, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	_, err := testenv.Shared(t).Clientset(t).CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

// waitEvent waits for an events.k8s.io/v1 Event in namespace regarding
// the object uid with the reason, and returns it.
func waitEvent(t *testing.T, namespace string, uid types.UID, reason string) eventsv1.Event {
	t.Helper()
	return waitEventWhere(t, namespace, uid, reason, func(eventsv1.Event) bool { return true })
}

// waitEventWhere waits for an Event with reason regarding uid for which
// match is true (an object may have several Events with one reason).
func waitEventWhere(t *testing.T, namespace string, uid types.UID, reason string, match func(eventsv1.Event) bool) eventsv1.Event {
	t.Helper()
	cs := testenv.Shared(t).Clientset(t)
	var found eventsv1.Event
	waitFor(t, fmt.Sprintf("a %s Event regarding %s in %s", reason, uid, namespace), func() (bool, string) {
		list, err := cs.EventsV1().Events(namespace).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, ev := range list.Items {
			if ev.Regarding.UID == uid && ev.Reason == reason && match(ev) {
				found = ev
				return true, ""
			}
			seen = append(seen, ev.Reason+" "+ev.Regarding.Name+": "+ev.Note)
		}
		return false, fmt.Sprintf("events: %v", seen)
	})
	return found
}
