package action

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
	"github.com/fieldwatch/fieldwatch/rules"
)

// alertmanagerBin is Debian's prometheus-alertmanager (make testdeps).
const alertmanagerBin = "/usr/bin/prometheus-alertmanager"

// freeAddr returns a 127.0.0.1 address nothing listens on (yet).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// startAlertmanager starts a real Alertmanager on 127.0.0.1 with config,
// its own storage and no cluster, and stops it by its PID when the test
// ends. It returns its base URL.
func startAlertmanager(t *testing.T, config string) string {
	t.Helper()
	testenv.SkipShort(t, testenv.NeedsAlertmanager)
	if _, err := os.Stat(alertmanagerBin); err != nil {
		t.Fatalf("%s: %v (make testdeps installs Debian's prometheus-alertmanager)", alertmanagerBin, err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "alertmanager.yml")
	writeFile(t, cfg, config)
	addr := freeAddr(t)
	var out testenv.SyncBuffer
	cmd := exec.Command(alertmanagerBin, "--config.file="+cfg, "--storage.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--cluster.listen-address=", "--log.level=debug")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("alertmanager:\n%s", out.String())
		}
	})
	base := "http://" + addr
	testenv.Eventually(t, 30*time.Second, "Alertmanager ready", func() bool {
		resp, err := http.Get(base + "/-/ready")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return base
}

// amAlert is an alert as Alertmanager's API v2 lists it.
type amAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	StartsAt    time.Time         `json:"startsAt"`
	EndsAt      time.Time         `json:"endsAt"`
	Status      struct {
		State      string   `json:"state"`
		SilencedBy []string `json:"silencedBy"`
	} `json:"status"`
}

func listAlerts(t *testing.T, base string) []amAlert {
	t.Helper()
	resp, err := http.Get(base + "/api/v2/alerts")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var alerts []amAlert
	if err := json.NewDecoder(resp.Body).Decode(&alerts); err != nil {
		t.Fatal(err)
	}
	return alerts
}

// amNotification is the body of Alertmanager's webhook receiver.
type amNotification struct {
	GroupLabels map[string]string `json:"groupLabels"`
	Alerts      []struct {
		Labels map[string]string `json:"labels"`
	} `json:"alerts"`
}

// TestAlertmanager posts firings to a real Alertmanager, one of an HA
// pair being down: the alerts carry the labels; Alertmanager's group by
// rule and namespace sends one webhook notification for a burst of 20; a
// silence on a namespace suppresses its alerts; its Slack receiver,
// pointed at a local server, gets its message.
func TestAlertmanager(t *testing.T) {
	hook := newReceiver(t, nil)
	slackAPI := newReceiver(t, nil)
	base := startAlertmanager(t, fmt.Sprintf(`route:
  receiver: hook
  group_by: [rule, namespace]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
  routes:
    - matchers: ['rule="to-slack"']
      receiver: slack
receivers:
  - name: hook
    webhook_configs: [{url: '%s/hook', send_resolved: false}]
  - name: slack
    slack_configs: [{api_url: '%s/slack', channel: '#ops', send_resolved: false, title: '{{ .CommonLabels.rule }}'}]
`, hook.URL, slackAPI.URL))

	h := newHarness(t, func(o *Options) { o.ClusterName = "prod-eu"; o.ExternalURL = "https://fw.example.com" })
	spec := &rules.AlertmanagerAction{URLs: []string{"http://" + freeAddr(t), base}, Severity: rules.SeverityCritical,
		Labels: map[string]string{"team": "shop"}, Retry: fastRetry}
	burst := notifyRule("burst", rules.Action{Alertmanager: spec})
	dc := newDoneCounter(t)
	// Changes of now: Alertmanager flushes at once a group whose alerts
	// started more than group_wait ago.
	now := time.Now().UTC().Truncate(time.Millisecond)
	for range 20 {
		f := newFiring(burst)
		f.User = "alice"
		f.Time = now
		h.deliver(t, f, dc.fn(f.ID))
	}
	testenv.Eventually(t, 30*time.Second, "20 firings done", func() bool { return dc.total.Load() == 20 })
	if dls := h.deadLetters(t); len(dls) != 0 {
		t.Fatalf("dead letters with one Alertmanager up: %+v", dls)
	}
	alerts := listAlerts(t, base)
	if len(alerts) != 20 {
		t.Fatalf("%d alerts, want 20", len(alerts))
	}
	a := alerts[0]
	for k, v := range map[string]string{"alertname": "burst", "rule": "burst", "cluster": "prod-eu", "namespace": "default", "kind": "Widget",
		"user": "alice", "severity": "critical", "team": "shop"} {
		if a.Labels[k] != v {
			t.Errorf("label %s = %q, want %q (labels %v)", k, a.Labels[k], v, a.Labels)
		}
	}
	if !strings.HasPrefix(a.Labels["name"], "w") || !strings.HasSuffix(a.Labels["id"], "/burst") {
		t.Errorf("labels %v", a.Labels)
	}
	if a.Annotations["summary"] != "burst: Widget default/"+a.Labels["name"]+" updated by alice" || a.Annotations["changes"] != "/spec/size: 1 → 2" ||
		!strings.HasPrefix(a.Annotations["history"], "https://fw.example.com/history/object?uid=") {
		t.Errorf("annotations %v", a.Annotations)
	}
	if !a.StartsAt.Equal(now) || a.EndsAt.Before(time.Now().Add(4*time.Minute)) {
		t.Errorf("startsAt %v endsAt %v: want the change's time and about 5m from now", a.StartsAt, a.EndsAt)
	}
	testenv.Eventually(t, 30*time.Second, "the burst's notification", func() bool { return hook.count() > 0 })
	var n amNotification
	if err := json.Unmarshal(hook.got()[0].body, &n); err != nil {
		t.Fatal(err)
	}
	if len(n.Alerts) != 20 || n.GroupLabels["rule"] != "burst" {
		t.Errorf("first notification: %d alerts, group %v; want the 20 of the burst in one", len(n.Alerts), n.GroupLabels)
	}

	// A silence on namespace quiet: its firings are suppressed, those of
	// namespace loud notified.
	silence, _ := json.Marshal(map[string]any{
		"matchers": []map[string]any{{"name": "namespace", "value": "quiet", "isRegex": false, "isEqual": true}},
		"startsAt": time.Now().UTC(), "endsAt": time.Now().Add(time.Hour).UTC(), "createdBy": "test", "comment": "maintenance",
	})
	resp, err := http.Post(base+"/api/v2/silences", "application/json", bytes.NewReader(silence))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("silence: %v %v", resp, err)
	}
	_ = resp.Body.Close()
	ns := notifyRule("ns", rules.Action{Alertmanager: &rules.AlertmanagerAction{URLs: []string{base}, Retry: fastRetry}})
	for _, namespace := range []string{"quiet", "quiet", "quiet", "loud"} {
		f := newFiring(ns)
		f.Time = time.Now()
		f.Object.Namespace = namespace
		h.deliver(t, f, dc.fn(f.ID))
	}
	testenv.Eventually(t, 30*time.Second, "namespace loud notified", func() bool {
		for _, r := range hook.got() {
			if strings.Contains(string(r.body), `"namespace":"loud"`) {
				return true
			}
		}
		return false
	})
	suppressed := 0
	for _, a := range listAlerts(t, base) {
		if a.Labels["namespace"] == "quiet" {
			if a.Status.State != "suppressed" || len(a.Status.SilencedBy) != 1 {
				t.Errorf("alert of namespace quiet: %+v", a.Status)
			}
			suppressed++
		}
	}
	if suppressed != 3 {
		t.Errorf("%d alerts of namespace quiet, want 3", suppressed)
	}
	for _, r := range hook.got() {
		if strings.Contains(string(r.body), `"namespace":"quiet"`) {
			t.Errorf("a silenced alert was notified: %s", r.body)
		}
	}

	// Alertmanager's own Slack receiver.
	toSlack := notifyRule("to-slack", rules.Action{Alertmanager: &rules.AlertmanagerAction{URLs: []string{base}, Retry: fastRetry}})
	f := newFiring(toSlack)
	h.deliver(t, f, dc.fn(f.ID))
	testenv.Eventually(t, 30*time.Second, "Alertmanager's Slack message", func() bool { return slackAPI.count() > 0 })
	var sm struct {
		Channel     string `json:"channel"`
		Attachments []struct {
			Title string `json:"title"`
		} `json:"attachments"`
	}
	if err := json.Unmarshal(slackAPI.got()[0].body, &sm); err != nil || sm.Channel != "#ops" || len(sm.Attachments) != 1 || sm.Attachments[0].Title != "to-slack" {
		t.Errorf("slack message %s (%v)", slackAPI.got()[0].body, err)
	}
}

// TestAlertmanagerAnswers: both Alertmanagers down is retried then
// dead-lettered; a 400 (an alert Alertmanager refuses) is not retried and
// its body is in the error.
func TestAlertmanagerAnswers(t *testing.T) {
	bad := newReceiver(t, func(int, http.ResponseWriter, *http.Request) int { return http.StatusBadRequest })
	h := newHarness(t, nil)
	r := &rules.Rule{Name: "am", Actions: []rules.Action{
		{Alertmanager: &rules.AlertmanagerAction{URLs: []string{"http://" + freeAddr(t), "http://" + freeAddr(t)}, Retry: fastRetry}},
		{Alertmanager: &rules.AlertmanagerAction{URLs: []string{bad.URL}, Retry: fastRetry}},
	}}
	dc := newDoneCounter(t)
	f := newFiring(r)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Deliver(ctx, f, dc.fn(f.ID)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the firing done", func() bool { return dc.count(f.ID) == 1 })
	dls := h.deadLetters(t)
	if len(dls) != 2 {
		t.Fatalf("dead letters %+v", dls)
	}
	for _, dl := range dls {
		if dl.Index == 0 && (dl.Attempts != fastRetry.Attempts || !strings.Contains(dl.Error, "connection refused")) {
			t.Errorf("both down: %+v", dl)
		}
		if dl.Index == 1 && (dl.Attempts != 1 || !strings.Contains(dl.Error, "400 Bad Request: answer Bad Request")) {
			t.Errorf("400: %+v", dl)
		}
	}
}

// TestAlertmanagerAuth sends basic authentication with the password read
// from its file, or the bearer token of its file, and neither in errors.
func TestAlertmanagerAuth(t *testing.T) {
	var basicOK, bearerOK bool
	var mu sync.Mutex
	rc := newReceiver(t, func(_ int, _ http.ResponseWriter, r *http.Request) int {
		mu.Lock()
		defer mu.Unlock()
		if u, p, ok := r.BasicAuth(); ok && u == "fw" && p == "pw-from-file" {
			basicOK = true
			return http.StatusOK
		}
		if r.Header.Get("Authorization") == "Bearer token-from-file" {
			bearerOK = true
			return http.StatusOK
		}
		return http.StatusUnauthorized
	})
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "pw"), "pw-from-file\n")
	writeFile(t, filepath.Join(dir, "token"), "token-from-file\n")
	writeFile(t, filepath.Join(dir, "wrong"), "wrong-secret\n")
	h := newHarness(t, nil)
	r := &rules.Rule{Name: "am-auth", Actions: []rules.Action{
		{Alertmanager: &rules.AlertmanagerAction{URLs: []string{rc.URL}, BasicAuth: &rules.BasicAuth{Username: "fw", PasswordFile: filepath.Join(dir, "pw")}, Retry: fastRetry}},
		{Alertmanager: &rules.AlertmanagerAction{URLs: []string{rc.URL}, BearerTokenFile: filepath.Join(dir, "token"), Retry: fastRetry}},
		{Alertmanager: &rules.AlertmanagerAction{URLs: []string{rc.URL}, BearerTokenFile: filepath.Join(dir, "wrong"), Retry: fastRetry}},
	}}
	dc := newDoneCounter(t)
	f := newFiring(r)
	h.deliver(t, f, dc.fn(f.ID))
	testenv.Eventually(t, 10*time.Second, "the firing done", func() bool { return dc.count(f.ID) == 1 })
	mu.Lock()
	defer mu.Unlock()
	if !basicOK || !bearerOK {
		t.Errorf("basic auth %v, bearer token %v", basicOK, bearerOK)
	}
	dls := h.deadLetters(t)
	if len(dls) != 1 || dls[0].Index != 2 || !strings.Contains(dls[0].Error, "401 Unauthorized") || strings.Contains(dls[0].Error, "wrong-secret") {
		t.Errorf("dead letters %+v, want the wrong token's 401 alone, without the token", dls)
	}
	if strings.Contains(h.logs.String(), "wrong-secret") || strings.Contains(h.logs.String(), "pw-from-file") {
		t.Error("a secret is in the logs")
	}
}
