package action

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
	"github.com/fieldwatch/fieldwatch/rules"
)

// notifyRule is a rule with one action a.
func notifyRule(name string, a rules.Action) *rules.Rule {
	return &rules.Rule{Name: name, Actions: []rules.Action{a}}
}

// secretFile writes value to a file of its own and returns it as a Secret.
func secretFile(t testing.TB, value string) *rules.Secret {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	writeFile(t, p, value+"\n")
	return &rules.Secret{File: p}
}

// checkSlackMessage fails t unless body is a Block Kit message within
// Slack's documented limits (api.slack.com/reference/block-kit/blocks).
func checkSlackMessage(t testing.TB, body []byte) slackMessage {
	t.Helper()
	var m slackMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("slack body: %v", err)
	}
	if m.Text == "" || len(m.Blocks) == 0 || len(m.Blocks) > 50 {
		t.Errorf("slack message with text %q and %d blocks", m.Text, len(m.Blocks))
	}
	for i, b := range m.Blocks {
		switch b.Type {
		case "header":
			if b.Text == nil || b.Text.Type != "plain_text" || utf8.RuneCountInString(b.Text.Text) > 150 {
				t.Errorf("block %d: header %+v", i, b.Text)
			}
		case "section":
			if b.Text == nil || b.Text.Type != "mrkdwn" || utf8.RuneCountInString(b.Text.Text) > 3000 {
				t.Errorf("block %d: section of %d characters", i, utf8.RuneCountInString(b.Text.Text))
			}
		case "context":
			if len(b.Elements) == 0 || len(b.Elements) > 10 {
				t.Errorf("block %d: context with %d elements", i, len(b.Elements))
			}
			for _, e := range b.Elements {
				if utf8.RuneCountInString(e.Text) > 3000 {
					t.Errorf("block %d: context element of %d characters", i, len(e.Text))
				}
			}
		default:
			t.Errorf("block %d: type %q", i, b.Type)
		}
	}
	return m
}

// TestSlackGroupsABurst sends 300 firings of one rule within the window:
// one message lists the first ten and counts the rest, and each of the
// 300 is delivered, once.
func TestSlackGroupsABurst(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	rc := newReceiver(t, nil)
	h := newHarness(t, func(o *Options) { o.Clock = clk; o.ExternalURL = "https://fw.example.com/"; o.ClusterName = "prod-eu" })
	r := notifyRule("burst", rules.Action{Slack: &rules.SlackAction{WebhookURL: secretFile(t, rc.URL+"/services/T0/B0/SECRETPATH"),
		Notify: rules.Notify{Retry: fastRetry}}})
	dc := newDoneCounter(t)
	for range 300 {
		f := newFiring(r)
		h.deliver(t, f, dc.fn(f.ID))
	}
	grouped := h.metrics.grouped.WithLabelValues("burst", "slack", "0")
	testenv.Eventually(t, 10*time.Second, "300 firings waiting in a group", func() bool { return testutil.ToFloat64(grouped) == 300 })
	if rc.count() != 0 {
		t.Fatalf("%d messages before the window ended", rc.count())
	}
	clk.Step(rules.DefaultGroupWindow)
	testenv.Eventually(t, 10*time.Second, "300 firings done", func() bool { return dc.total.Load() == 300 })
	got := rc.got()
	if len(got) != 1 {
		t.Fatalf("%d messages, want 1", len(got))
	}
	m := checkSlackMessage(t, got[0].body)
	body := string(got[0].body)
	for _, want := range []string{"burst: 300 widgets in default updated", "and 290 more", "https://fw.example.com/history?rule=burst",
		"https://fw.example.com/history/object?uid=uid-", "/spec/size: 1 → 2", "cluster *prod-eu*"} {
		if !strings.Contains(body, want) {
			t.Errorf("message lacks %q:\n%s", want, body)
		}
	}
	if n := len(m.Blocks); n != 13 {
		t.Errorf("%d blocks, want header, context, 10 sections and the more line", n)
	}
	if d := h.metric(t, "delivered_total", "burst", "slack", 0); d != 300 {
		t.Errorf("delivered_total %v, want 300", d)
	}
	if n := testutil.ToFloat64(h.metrics.messages.WithLabelValues("burst", "slack", "0")); n != 1 {
		t.Errorf("messages_total %v, want 1", n)
	}
}

// TestSlackGroupBy splits groups by namespace: one message each.
func TestSlackGroupBy(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	rc := newReceiver(t, nil)
	h := newHarness(t, func(o *Options) { o.Clock = clk })
	r := notifyRule("by-ns", rules.Action{Slack: &rules.SlackAction{WebhookURL: secretFile(t, rc.URL),
		Notify: rules.Notify{Group: &rules.Group{By: []string{rules.GroupByNamespace}}, Retry: fastRetry}}})
	dc := newDoneCounter(t)
	for i := range 30 {
		f := newFiring(r)
		f.Object.Namespace = fmt.Sprintf("ns-%d", i%3)
		h.deliver(t, f, dc.fn(f.ID))
	}
	grouped := h.metrics.grouped.WithLabelValues("by-ns", "slack", "0")
	testenv.Eventually(t, 10*time.Second, "30 firings grouped", func() bool { return testutil.ToFloat64(grouped) == 30 })
	clk.Step(rules.DefaultGroupWindow)
	testenv.Eventually(t, 10*time.Second, "30 firings done", func() bool { return dc.total.Load() == 30 })
	got := rc.got()
	if len(got) != 3 {
		t.Fatalf("%d messages, want 3", len(got))
	}
	for _, g := range got {
		m := checkSlackMessage(t, g.body)
		if !strings.Contains(m.Text, "10 widgets in ns-") {
			t.Errorf("message %q", m.Text)
		}
	}
}

// TestSlackAnswers checks what each of Slack's answers does: 429 with
// Retry-After and 5xx are retried, a 4xx is dead-lettered with its body
// and without the webhook's secret path.
func TestSlackAnswers(t *testing.T) {
	tests := []struct {
		name      string
		respond   func(n int, w http.ResponseWriter) int
		requests  int
		delivered bool
		err       string
	}{
		{"429 then ok", func(n int, w http.ResponseWriter) int {
			if n == 1 {
				w.Header().Set("Retry-After", "1")
				return http.StatusTooManyRequests
			}
			return http.StatusOK
		}, 2, true, ""},
		{"500 then ok", func(n int, w http.ResponseWriter) int {
			if n == 1 {
				return http.StatusInternalServerError
			}
			return http.StatusOK
		}, 2, true, ""},
		{"400 invalid_blocks", func(int, http.ResponseWriter) int { return http.StatusBadRequest }, 1, false, "400 Bad Request: answer Bad Request"},
		{"always 503", func(int, http.ResponseWriter) int { return http.StatusServiceUnavailable }, 3, false, "503 Service Unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) int { return tt.respond(n, w) })
			h := newHarness(t, nil)
			r := notifyRule("answers", rules.Action{Slack: &rules.SlackAction{WebhookURL: secretFile(t, rc.URL+"/services/T/B/SECRETPATH"),
				Notify: rules.Notify{Group: &rules.Group{Window: time.Millisecond}, Retry: fastRetry}}})
			dc := newDoneCounter(t)
			f := newFiring(r)
			h.deliver(t, f, dc.fn(f.ID))
			testenv.Eventually(t, 10*time.Second, "the firing done", func() bool { return dc.count(f.ID) == 1 })
			if rc.count() != tt.requests {
				t.Errorf("%d requests, want %d", rc.count(), tt.requests)
			}
			dls := h.deadLetters(t)
			if tt.delivered != (len(dls) == 0) {
				t.Fatalf("dead letters %+v", dls)
			}
			if !tt.delivered {
				if !strings.Contains(dls[0].Error, tt.err) || strings.Contains(dls[0].Error, "SECRETPATH") {
					t.Errorf("dead letter error %q, want %q without the URL's path", dls[0].Error, tt.err)
				}
				if dls[0].ID != f.ID || !json.Valid(dls[0].Payload) {
					t.Errorf("dead letter %+v", dls[0])
				}
			}
			if strings.Contains(h.logs.String(), "SECRETPATH") {
				t.Error("the logs show the webhook's secret path")
			}
		})
	}
}

// TestSlackChatPostMessage posts with a bot token: the token in the
// Authorization header, the channel in the body; Slack's {"ok": false}
// is an error that names Slack's reason.
func TestSlackChatPostMessage(t *testing.T) {
	var answer string
	rc := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) int {
		if r.Header.Get("Authorization") != "Bearer xoxb-test" {
			return http.StatusUnauthorized
		}
		w.Header().Set("Content-Type", "application/json")
		return http.StatusOK
	})
	rc.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc.serve(httptestDiscard{w}, r)
		_, _ = w.Write([]byte(answer))
	})
	h := newHarness(t, nil)
	r := notifyRule("api", rules.Action{Slack: &rules.SlackAction{Token: secretFile(t, "xoxb-test"), Channel: "#ops", APIURL: rc.URL,
		Notify: rules.Notify{Group: &rules.Group{Window: time.Millisecond}, Retry: fastRetry}}})
	for _, tt := range []struct {
		answer    string
		delivered bool
	}{{`{"ok":true,"ts":"1.2"}`, true}, {`{"ok":false,"error":"channel_not_found"}`, false}} {
		answer = tt.answer
		dc := newDoneCounter(t)
		f := newFiring(r)
		h.deliver(t, f, dc.fn(f.ID))
		testenv.Eventually(t, 10*time.Second, "the firing done", func() bool { return dc.count(f.ID) == 1 })
		got := rc.got()
		m := checkSlackMessage(t, got[len(got)-1].body)
		if m.Channel != "#ops" {
			t.Errorf("channel %q", m.Channel)
		}
		dls := h.deadLetters(t)
		if tt.delivered == (len(dls) > 0) || (!tt.delivered && !strings.Contains(dls[0].Error, "chat.postMessage: channel_not_found")) {
			t.Errorf("answer %s: dead letters %+v", tt.answer, dls)
		}
	}
}

// httptestDiscard is a ResponseWriter that lets a handler set the status
// once and drops what the receiver writes, so that the test writes its
// own body.
type httptestDiscard struct{ http.ResponseWriter }

func (d httptestDiscard) Write(b []byte) (int, error) { return len(b), nil }

// TestSlackLimits checks that a huge group of huge, non-ASCII payloads
// gives a message within Slack's limits, cut with a note.
func TestSlackLimits(t *testing.T) {
	r := &rules.Rule{Name: "huge"}
	var items []*item
	for range 80 {
		f := newFiring(r)
		var changes []any
		for i := range 20 {
			changes = append(changes, map[string]any{"op": "replace", "path": fmt.Sprintf("/data/ключ-%d", i), "value": strings.Repeat("значение ", 200), "oldValue": "x"})
		}
		var p map[string]any
		_ = json.Unmarshal(f.Payload, &p)
		p["changes"] = changes
		p["name"] = "виджет-" + strings.Repeat("я", 200)
		f.Object.Name = p["name"].(string)
		f.Payload, _ = json.Marshal(p)
		items = append(items, &item{f: f})
	}
	d := newDigest(items, rules.MaxListedLimit, "", "")
	body, err := json.Marshal(slackMessageOf(d))
	if err != nil {
		t.Fatal(err)
	}
	checkSlackMessage(t, body)
	if !strings.Contains(string(body), fmt.Sprintf("and %d more", 80-slackMaxEntries)) || !strings.Contains(string(body), "and 15 more changes") {
		t.Errorf("the message does not count what it leaves out")
	}
}

// TestTeamsCard checks the Workflows request: one Adaptive Card
// attachment, within Teams' 28 KB, and a 5xx retried.
func TestTeamsCard(t *testing.T) {
	rc := newReceiver(t, func(n int, _ http.ResponseWriter, _ *http.Request) int {
		if n == 1 {
			return http.StatusBadGateway
		}
		return http.StatusAccepted
	})
	clk := clocktesting.NewFakeClock(time.Now())
	h := newHarness(t, func(o *Options) { o.Clock = clk; o.ExternalURL = "https://fw.example.com" })
	r := notifyRule("teams", rules.Action{Teams: &rules.TeamsAction{URL: secretFile(t, rc.URL+"/workflows/SECRET"),
		Notify: rules.Notify{Group: &rules.Group{MaxListed: 50}, Retry: fastRetry}}})
	dc := newDoneCounter(t)
	for range 50 {
		f := newFiring(r)
		var changes []string
		for i := range maxChangesListed {
			changes = append(changes, fmt.Sprintf(`{"op":"replace","path":"/data/k%d","value":"%s","oldValue":"x"}`, i, strings.Repeat("x", 2000)))
		}
		f.Payload = []byte(strings.Replace(string(f.Payload), `{"oldValue":1,"op":"replace","path":"/spec/size","value":2}`, strings.Join(changes, ","), 1))
		h.deliver(t, f, dc.fn(f.ID))
	}
	grouped := h.metrics.grouped.WithLabelValues("teams", "teams", "0")
	testenv.Eventually(t, 10*time.Second, "50 firings grouped", func() bool { return testutil.ToFloat64(grouped) == 50 })
	clk.Step(rules.DefaultGroupWindow)
	testenv.Eventually(t, 10*time.Second, "50 firings done", func() bool { return dc.total.Load() == 50 })
	got := rc.got()
	if len(got) != 2 {
		t.Fatalf("%d requests, want 2 (a 502, then the card)", len(got))
	}
	body := got[1].body
	if len(body) > 28<<10 {
		t.Errorf("card of %d bytes, over Teams' 28 KB", len(body))
	}
	var m struct {
		Type        string `json:"type"`
		Attachments []struct {
			ContentType string `json:"contentType"`
			Content     struct {
				Type    string            `json:"type"`
				Version string            `json:"version"`
				Body    []json.RawMessage `json:"body"`
				Actions []struct{ Type, URL string }
			} `json:"content"`
		} `json:"attachments"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	if m.Type != "message" || len(m.Attachments) != 1 || m.Attachments[0].ContentType != "application/vnd.microsoft.card.adaptive" {
		t.Fatalf("message %s", body)
	}
	c := m.Attachments[0].Content
	if c.Type != "AdaptiveCard" || c.Version != "1.4" || len(c.Actions) != 1 || c.Actions[0].Type != "Action.OpenUrl" {
		t.Errorf("card %+v", c)
	}
	if !strings.Contains(string(body), "more (all of them in the history)") {
		t.Error("a card cut to size does not count the rest")
	}
}

// TestPagerDutyEvents checks the Events API v2 requests: routing key,
// dedup_key from the payload's id, severity, a trigger's payload, a
// resolve's shape, and a 429 retried.
func TestPagerDutyEvents(t *testing.T) {
	rc := newReceiver(t, func(n int, _ http.ResponseWriter, _ *http.Request) int {
		if n == 1 {
			return http.StatusTooManyRequests
		}
		return http.StatusAccepted
	})
	h := newHarness(t, func(o *Options) { o.ClusterName = "prod" })
	key := strings.Repeat("k", 32)
	dedup, err := rules.ParseTemplate("dedupKey", "{{.uid}}/down", false)
	if err != nil {
		t.Fatal(err)
	}
	trigger := notifyRule("pd", rules.Action{PagerDuty: &rules.PagerDutyAction{RoutingKey: secretFile(t, key), URL: rc.URL, Severity: rules.SeverityCritical,
		Notify: rules.Notify{Retry: fastRetry}}})
	resolve := notifyRule("pd-resolve", rules.Action{PagerDuty: &rules.PagerDutyAction{RoutingKey: secretFile(t, key), URL: rc.URL, EventAction: rules.PagerDutyResolve, DedupKey: dedup,
		Notify: rules.Notify{Retry: fastRetry}}})
	dc := newDoneCounter(t)
	ft, fr := newFiring(trigger), newFiring(resolve)
	h.deliver(t, ft, dc.fn(ft.ID))
	testenv.Eventually(t, 10*time.Second, "the trigger done", func() bool { return dc.count(ft.ID) == 1 })
	h.deliver(t, fr, dc.fn(fr.ID))
	testenv.Eventually(t, 10*time.Second, "the resolve done", func() bool { return dc.count(fr.ID) == 1 })
	got := rc.got()
	if len(got) != 3 {
		t.Fatalf("%d requests, want 3", len(got))
	}
	var ev, res map[string]any
	if err := json.Unmarshal(got[1].body, &ev); err != nil {
		t.Fatal(err)
	}
	pl, _ := ev["payload"].(map[string]any)
	if ev["routing_key"] != key || ev["event_action"] != "trigger" || ev["dedup_key"] != ft.ID || pl == nil ||
		pl["severity"] != "critical" || pl["source"] != "prod" || pl["summary"] == "" || pl["class"] != "pd" {
		t.Errorf("trigger %s", got[1].body)
	}
	if err := json.Unmarshal(got[2].body, &res); err != nil {
		t.Fatal(err)
	}
	if res["event_action"] != "resolve" || res["dedup_key"] != fr.Object.UID+"/down" || res["payload"] != nil {
		t.Errorf("resolve %s", got[2].body)
	}
	if len(h.deadLetters(t)) != 0 {
		t.Error("dead letters")
	}
}

// TestNotifyUnreachable dead-letters, after the retries, what an
// unreachable receiver cannot take; a missing secret file is retried as
// the file may be mounted later, then dead-lettered.
func TestNotifyUnreachable(t *testing.T) {
	h := newHarness(t, nil)
	r := &rules.Rule{Name: "down", Actions: []rules.Action{
		{Slack: &rules.SlackAction{WebhookURL: secretFile(t, "http://127.0.0.1:1/x"), Notify: rules.Notify{Group: &rules.Group{Window: time.Millisecond}, Retry: fastRetry}}},
		{Teams: &rules.TeamsAction{URL: &rules.Secret{File: filepath.Join(t.TempDir(), "missing")}, Notify: rules.Notify{Group: &rules.Group{Window: time.Millisecond}, Retry: fastRetry}}},
		{PagerDuty: &rules.PagerDutyAction{RoutingKey: &rules.Secret{Env: "FIELDWATCH_TEST_UNSET_KEY"}, Notify: rules.Notify{Retry: fastRetry}}},
	}}
	t.Setenv("FIELDWATCH_TEST_UNSET_KEY", "")
	dc := newDoneCounter(t)
	f := newFiring(r)
	h.deliver(t, f, dc.fn(f.ID))
	testenv.Eventually(t, 10*time.Second, "the firing done", func() bool { return dc.count(f.ID) == 1 })
	dls := h.deadLetters(t)
	if len(dls) != 3 {
		t.Fatalf("%d dead letters, want 3: %+v", len(dls), dls)
	}
	for _, dl := range dls {
		if dl.Attempts != fastRetry.Attempts {
			t.Errorf("%s: %d attempts, want %d (%s)", dl.Action, dl.Attempts, fastRetry.Attempts, dl.Error)
		}
	}
}

// TestDeliverSkipped checks routing: the actions a firing's Skipped lists
// never get it, done still comes once, and a firing every action skips
// is done at once.
func TestDeliverSkipped(t *testing.T) {
	a, b := newReceiver(t, nil), newReceiver(t, nil)
	h := newHarness(t, nil)
	r := &rules.Rule{Name: "routed", Actions: []rules.Action{
		{Webhook: &rules.WebhookAction{URL: a.URL, Retry: fastRetry}},
		{Webhook: &rules.WebhookAction{URL: b.URL, Retry: fastRetry}},
	}}
	dc := newDoneCounter(t)
	f := newFiring(r)
	f.Skipped = []int{0}
	h.deliver(t, f, dc.fn(f.ID))
	none := newFiring(r)
	none.Skipped = []int{0, 1}
	h.deliver(t, none, dc.fn(none.ID))
	testenv.Eventually(t, 10*time.Second, "both firings done", func() bool { return dc.total.Load() == 2 })
	if a.count() != 0 || b.count() != 1 {
		t.Errorf("requests %d and %d, want 0 and 1", a.count(), b.count())
	}
	if n := h.metric(t, "fired_total", "routed", "webhook", 0); n != 0 {
		t.Errorf("the skipped action counted %v firings", n)
	}
}

// TestRateLimit paces messages: with one message every 10s and no burst,
// three groups due at once go out one per 10s of the (fake) clock.
func TestRateLimit(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	rc := newReceiver(t, nil)
	h := newHarness(t, func(o *Options) { o.Clock = clk })
	r := notifyRule("paced", rules.Action{Slack: &rules.SlackAction{WebhookURL: secretFile(t, rc.URL),
		Notify: rules.Notify{Group: &rules.Group{Window: time.Second, By: []string{rules.GroupByNamespace}},
			RateLimit: &rules.RateLimit{Every: 10 * time.Second, Burst: 1}, Retry: fastRetry}}})
	dc := newDoneCounter(t)
	for i := range 3 {
		f := newFiring(r)
		f.Object.Namespace = fmt.Sprintf("ns-%d", i)
		h.deliver(t, f, dc.fn(f.ID))
	}
	grouped := h.metrics.grouped.WithLabelValues("paced", "slack", "0")
	testenv.Eventually(t, 10*time.Second, "3 groups", func() bool { return testutil.ToFloat64(grouped) == 3 })
	clk.Step(time.Second)
	testenv.Eventually(t, 10*time.Second, "the first message", func() bool { return rc.count() == 1 })
	for want := 2; want <= 3; want++ {
		// The sender waits on the clock for the next token.
		testenv.Eventually(t, 10*time.Second, "the sender waiting", func() bool { return clk.HasWaiters() })
		if rc.count() != want-1 {
			t.Fatalf("%d messages before the rate allowed message %d", rc.count(), want)
		}
		clk.Step(10 * time.Second)
		testenv.Eventually(t, 10*time.Second, fmt.Sprintf("message %d", want), func() bool { return rc.count() == want })
	}
	testenv.Eventually(t, 10*time.Second, "3 firings done", func() bool { return dc.total.Load() == 3 })
}

// TestGroupBound sends the oldest group at once when the firings waiting
// reach Options.GroupMaxWaiting, before its window ends.
func TestGroupBound(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	rc := newReceiver(t, nil)
	h := newHarness(t, func(o *Options) { o.Clock = clk; o.GroupMaxWaiting = 10 })
	r := notifyRule("bounded", rules.Action{Slack: &rules.SlackAction{WebhookURL: secretFile(t, rc.URL),
		Notify: rules.Notify{RateLimit: &rules.RateLimit{Every: time.Nanosecond}, Retry: fastRetry}}})
	dc := newDoneCounter(t)
	for range 25 {
		f := newFiring(r)
		h.deliver(t, f, dc.fn(f.ID))
	}
	testenv.Eventually(t, 10*time.Second, "20 firings sent without the window ending", func() bool { return dc.total.Load() == 20 })
	grouped := h.metrics.grouped.WithLabelValues("bounded", "slack", "0")
	testenv.Eventually(t, 10*time.Second, "5 waiting", func() bool { return testutil.ToFloat64(grouped) == 5 })
	if rc.count() != 2 {
		t.Errorf("%d messages at the bound, want 2 of 10", rc.count())
	}
	clk.Step(rules.DefaultGroupWindow)
	testenv.Eventually(t, 10*time.Second, "25 firings done", func() bool { return dc.total.Load() == 25 })
	if rc.count() != 3 {
		t.Errorf("%d messages, want 3", rc.count())
	}
}

// TestCRDChangeMessages: a CRD change with its impact (checks, objects
// hit, long messages) gives each receiver a message within its limits
// that names the breaking checks and the objects hit.
func TestCRDChangeMessages(t *testing.T) {
	r := &rules.Rule{Name: "crd-breaking"}
	f := newFiring(r)
	var p map[string]any
	if err := json.Unmarshal(f.Payload, &p); err != nil {
		t.Fatal(err)
	}
	var objects []any
	for i := range 10 {
		objects = append(objects, map[string]any{"namespace": "shop", "name": fmt.Sprintf("w%d", i), "error": strings.Repeat("spec.color: Unsupported value ", 10)})
	}
	p["crd"] = map[string]any{"crd": "widgets.example.com", "breaking": 2, "unknown": 0, "safe": 1, "scanned": 50000,
		"checks":  []any{map[string]any{"path": "/properties/spec", "check": "enum-values-removed", "severity": "breaking", "message": strings.Repeat("x", 5000)}},
		"impact":  []any{map[string]any{"check": "enum-values-removed", "effect": "rejected", "count": 12000, "objects": objects, "message": "rejected"}},
		"changes": nil}
	delete(p["crd"].(map[string]any), "changes")
	f.Payload, _ = json.Marshal(p)
	d := newDigest([]*item{{f: f}}, 10, "", "")
	if e := d.Entries[0]; e.CRD != "CRD widgets.example.com: 2 breaking, 1 safe checks; 12000 objects hit" {
		t.Errorf("CRD line %q", e.CRD)
	}
	body, _ := json.Marshal(slackMessageOf(d))
	checkSlackMessage(t, body)
	card, err := teamsMessageOf(newDigest([]*item{{f: f}}, 10, "", ""))
	if err != nil || len(card) > teamsMaxBytes || !strings.Contains(string(card), "12000 objects hit") {
		t.Errorf("teams card of %d bytes: %v", len(card), err)
	}
	am := newAlertmanager(&rules.AlertmanagerAction{URLs: []string{"http://am"}}, nil, Options{}.withDefaults())
	if a := am.alert(&item{f: f}); !strings.Contains(a.Annotations["changes"], "12000 objects hit") || len(a.Annotations["changes"]) > rules.MaxAnnotationBytes {
		t.Errorf("alert annotations %v", a.Annotations)
	}
}
