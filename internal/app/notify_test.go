package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// messageReceiver is a local Slack, Teams or PagerDuty endpoint that
// keeps the bodies it gets.
type messageReceiver struct {
	*httptest.Server
	mu     sync.Mutex
	bodies [][]byte
}

func newMessageReceiver(t *testing.T, status int) *messageReceiver {
	t.Helper()
	m := &messageReceiver{}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		m.mu.Lock()
		m.bodies = append(m.bodies, b)
		m.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(m.Close)
	return m
}

func (m *messageReceiver) got() [][]byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([][]byte(nil), m.bodies...)
}

// countRE reads how many firings a message stands for from its summary:
// "burst: 120 configmaps in notify-burst created by alice"; one firing's
// summary names its object instead.
var countRE = regexp.MustCompile(`burst: (\d+) configmaps in notify-burst created`)

// counted is how many firings the messages stand for.
func counted(t *testing.T, bodies [][]byte, summary func([]byte) string) int {
	t.Helper()
	n := 0
	for _, b := range bodies {
		s := summary(b)
		if m := countRE.FindStringSubmatch(s); m != nil {
			k, _ := strconv.Atoi(m[1])
			n += k
		} else if s != "" {
			n++
		}
	}
	return n
}

// TestNotifyBurst: a helm-upgrade-like burst of 300 ConfigMap creations
// fires a rule with slack, teams and pagerduty actions: each receiver
// gets a handful of messages that together stand for the 300 firings,
// and every one of the 300 is in the history.
func TestNotifyBurst(t *testing.T) {
	plane := sharedAuditPlane(t)
	env := plane.env
	env.EnsureNamespace(t, "notify-burst")
	alice := env.Impersonating(t, "alice")
	slackRecv, teamsRecv, pdRecv := newMessageReceiver(t, http.StatusOK), newMessageReceiver(t, http.StatusAccepted), newMessageReceiver(t, http.StatusAccepted)
	dir := t.TempDir()
	for name, v := range map[string]string{"slack": slackRecv.URL + "/services/T/B/x", "teams": teamsRecv.URL, "pd": "0123456789abcdef0123456789abcdef"} {
		if err := writeTestFile(filepath.Join(dir, name), v); err != nil {
			t.Fatal(err)
		}
	}
	rules := fmt.Sprintf(`rules:
  - name: burst
    match:
      resources: [{group: "", resource: configmaps}]
      namespaces: [notify-burst]
    on: [create]
    actions:
      - slack: {webhookURL: {file: %[1]s/slack}, group: {window: 5s}}
      - teams: {url: {file: %[1]s/teams}, group: {window: 5s}}
      - pagerduty: {routingKey: {file: %[1]s/pd}, url: '%[2]s', group: {window: 5s}}
`, dir, pdRecv.URL)
	httpAddr := make(chan string, 1)
	fw := runFieldwatch(t, plane, rules, func(c *Config) {
		c.StateDir = t.TempDir()
		c.ExternalURL = "https://fieldwatch.example.com"
		c.History.InsecureLoopback = true
		c.Ready = func(addr string) { httpAddr <- addr }
	})
	admin := historyClient{base: "http://" + <-httpAddr}
	fw.warmUp(t, plane)

	const n = 300
	ctx := context.Background()
	cms := alice.Dynamic.Resource(cmGVR).Namespace("notify-burst")
	var wg sync.WaitGroup
	for w := range 10 {
		wg.Go(func() {
			for i := w; i < n; i += 10 {
				if _, err := cms.Create(ctx, testConfigMap(fmt.Sprintf("cm-%03d", i), map[string]any{"k": "v"}), metav1.CreateOptions{}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	var inHistory int
	testenv.Eventually(t, 2*time.Minute, "the 300 firings in the history", func() bool {
		entries, _ := admin.query(t, url.Values{"rule": {"burst"}, "limit": {"1000"}})
		inHistory = len(entries)
		return inHistory == n
	})
	slackSummary := func(b []byte) string {
		var m struct{ Text string }
		_ = json.Unmarshal(b, &m)
		return m.Text
	}
	teamsSummary := func(b []byte) string {
		var m struct {
			Attachments []struct {
				Content struct{ Body []struct{ Text string } }
			}
		}
		_ = json.Unmarshal(b, &m)
		if len(m.Attachments) == 0 || len(m.Attachments[0].Content.Body) == 0 {
			return ""
		}
		return m.Attachments[0].Content.Body[0].Text
	}
	pdSummary := func(b []byte) string {
		var m struct{ Payload struct{ Summary string } }
		_ = json.Unmarshal(b, &m)
		return m.Payload.Summary
	}
	for _, r := range []struct {
		name    string
		recv    *messageReceiver
		summary func([]byte) string
	}{{"slack", slackRecv, slackSummary}, {"teams", teamsRecv, teamsSummary}, {"pagerduty", pdRecv, pdSummary}} {
		// Every firing is in the history once its messages are sent: the
		// messages are all there.
		bodies := r.recv.got()
		if len(bodies) == 0 || len(bodies) > 5 {
			t.Errorf("%s: %d messages for %d firings, want a handful", r.name, len(bodies), n)
		}
		if c := counted(t, bodies, r.summary); c != n {
			t.Errorf("%s: the messages stand for %d firings, want %d", r.name, c, n)
		}
		t.Logf("%s: %d messages for %d firings", r.name, len(bodies), n)
	}
}
