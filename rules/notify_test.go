package rules

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
)

// TestNotifyActionErrors checks what validate says of notification
// actions written wrong: every error where it can be known before a
// message is sent, with its field path.
func TestNotifyActionErrors(t *testing.T) {
	const head = "rules:\n  - name: r\n    match: {resources: [{group: '', resource: configmaps}]}\n    actions:\n"
	tests := []struct {
		name, action string
		want         []string
	}{
		{"alertmanager without urls", "{alertmanager: {}}", []string{"alertmanager.urls: required"}},
		{"alertmanager bad url", "{alertmanager: {urls: ['ftp://am']}}", []string{`alertmanager.urls[0]: must be an absolute http or https URL, not scheme "ftp"`}},
		{"alertmanager credentials in url", "{alertmanager: {urls: ['http://u:secretpw@am:9093']}}", []string{"alertmanager.urls[0]: carries credentials (http://am:9093)"}},
		{"alertmanager severity", "{alertmanager: {urls: ['http://am'], severity: high}}", []string{`alertmanager.severity: "high" is not a severity`}},
		{"alertmanager own label", "{alertmanager: {urls: ['http://am'], labels: {namespace: x}}}", []string{`alertmanager.labels.namespace: "namespace" is set by the action itself`}},
		{"alertmanager bad label", "{alertmanager: {urls: ['http://am'], labels: {'a-b': x}}}", []string{`"a-b" is not a label name`}},
		{"alertmanager two auths", "{alertmanager: {urls: ['http://am'], bearerTokenFile: /t, basicAuth: {username: u, passwordFile: /p}}}", []string{"alertmanager.basicAuth: at most one of basicAuth and bearerTokenFile"}},
		{"alertmanager token of the service account", "{alertmanager: {urls: ['http://am'], bearerTokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token}}", []string{"alertmanager.bearerTokenFile: is in the service account's credentials"}},
		{"slack without url", "{slack: {}}", []string{"slack.webhookURL: required"}},
		{"slack url inline", "{slack: {webhookURL: 'https://hooks.slack.com/services/T/B/x'}}", []string{"slack.webhookURL: must be a mapping, not a scalar"}},
		{"slack token without channel", "{slack: {token: {env: SLACK_TOKEN}}}", []string{"slack.channel: required with token"}},
		{"slack both", "{slack: {token: {env: A}, webhookURL: {env: B}, channel: c}}", []string{"slack: exactly one of webhookURL (an incoming webhook) and token"}},
		{"slack secret two sources", "{slack: {webhookURL: {env: A, file: /f}}}", []string{"slack.webhookURL: exactly one of file and env"}},
		{"slack bad env", "{slack: {webhookURL: {env: 'A-B'}}}", []string{`slack.webhookURL.env: "A-B" is not an environment variable name`}},
		{"slack group by", "{slack: {webhookURL: {env: A}, group: {by: [team]}}}", []string{`slack.group.by[0]: "team" is not a group key`}},
		{"slack maxListed", "{slack: {webhookURL: {env: A}, group: {maxListed: 500}}}", []string{"slack.group.maxListed: must be between 0 and 50"}},
		{"teams without url", "{teams: {}}", []string{"teams.url: required: the workflow's webhook URL"}},
		{"pagerduty without key", "{pagerduty: {severity: warning}}", []string{"pagerduty.routingKey: required"}},
		{"pagerduty action", "{pagerduty: {routingKey: {env: K}, eventAction: acknowledge}}", []string{`pagerduty.eventAction: "acknowledge" is not an event action`}},
		{"pagerduty bad dedupKey", "{pagerduty: {routingKey: {env: K}, dedupKey: '{{.uid'}}", []string{"pagerduty.dedupKey: invalid template"}},
		{"email empty", "{email: {}}", []string{"email.smtp: required", "email.from: required", "email.to: required"}},
		{"email bad to", "{email: {smtp: 'mail:587', from: a@b.c, to: ['not an address']}}", []string{`email.to[0]: "not an address" is not an address`}},
		{"email cleartext remote", "{email: {smtp: 'mail.example.com:25', tls: none, from: a@b.c, to: [d@e.f]}}", []string{"email.tls: none is for a server on loopback only"}},
		{"email password without tls", "{email: {smtp: '127.0.0.1:25', tls: none, from: a@b.c, to: [d@e.f], username: u, password: {env: P}}}", []string{"email.password: never sent without TLS"}},
		{"email username alone", "{email: {smtp: 'mail:587', from: a@b.c, to: [d@e.f], username: u}}", []string{"email.username: username and password go together"}},
		{"when syntax", "{log: {}, when: 'meta.namespace =='}", []string{"actions[0].when: CEL: Syntax error"}},
		{"when not bool", "{log: {}, when: \"'a' + 'b'\"}", []string{"actions[0].when: CEL: must return a bool, not string"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(head+"      - "+tt.action+"\n"))
			if err == nil {
				t.Fatalf("Parse succeeded, want %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("errors\n%v\ndo not contain\n%s", err, w)
				}
			}
			if strings.Contains(err.Error(), "secretpw") {
				t.Errorf("an error quotes the URL's password:\n%v", err)
			}
		})
	}
}

// TestNotifyActionsLoad checks that complete notification actions load,
// with their kinds.
func TestNotifyActionsLoad(t *testing.T) {
	src := `rules:
  - name: r
    match: {resources: [{group: '', resource: configmaps}]}
    actions:
      - alertmanager: {urls: ['http://am-0:9093', 'http://am-1:9093'], severity: critical, labels: {team: shop}, basicAuth: {username: fw, passwordFile: /etc/am/pw}}
      - slack: {webhookURL: {file: /etc/slack/url}, group: {window: 10s, by: [namespace, user], maxListed: 5}, rateLimit: {every: 2s, burst: 1}}
      - slack: {token: {env: SLACK_TOKEN}, channel: C0123}
      - teams: {url: {env: TEAMS_URL}}
      - pagerduty: {routingKey: {env: PD_KEY}, severity: error, eventAction: resolve, dedupKey: '{{.uid}}/down'}
      - email: {smtp: 'smtp.example.com:587', from: 'fieldwatch <fw@example.com>', to: [ops@example.com], username: fw, password: {file: /etc/smtp/pw}}
`
	set, err := Parse("f.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, a := range set.Rule("r").Actions {
		kinds = append(kinds, a.Kind())
	}
	want := []string{"alertmanager", "slack", "slack", "teams", "pagerduty", "email"}
	if !slices.Equal(kinds, want) {
		t.Errorf("kinds %v, want %v", kinds, want)
	}
	if w := set.Rule("r").Actions[1].Slack.Group.Window; w != 10*time.Second {
		t.Errorf("slack group window %v, want 10s", w)
	}
}

// TestRoute checks actions' when: each firing lists the actions whose
// expression is false as Skipped, by namespace, label and user; a runtime
// error skips the action and is reported.
func TestRoute(t *testing.T) {
	src := `rules:
  - name: r
    match: {resources: [{group: '', resource: configmaps}]}
    actions:
      - log: {}
      - log: {}
        when: meta.namespace in ['shop', 'cart']
      - log: {}
        when: meta.labels.?team.orValue('') == 'payments'
      - log: {}
        when: user.startsWith('system:serviceaccount:')
      - log: {}
        when: object.data.missing == 'x'
`
	set, err := Parse("f.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if !set.Rule("r").UsesAttribution() {
		t.Error("a when reading user does not make the rule use attribution")
	}
	cm := func(ns string, labels map[string]any) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{
			"namespace": ns, "name": "c", "uid": "u1", "resourceVersion": "2", "labels": labels,
		}, "data": map[string]any{"a": "1"}}
	}
	res := change.Resource{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespaced: true, Preferred: true}
	tests := []struct {
		name   string
		ns     string
		labels map[string]any
		user   string
		want   []int
	}{
		{"shop, no label, a person", "shop", nil, "alice", []int{2, 3, 4}},
		{"payments label", "other", map[string]any{"team": "payments"}, "alice", []int{1, 3, 4}},
		{"a controller", "cart", nil, "system:serviceaccount:kube-system:x", []int{2, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := cm(tt.ns, tt.labels)
			nw := cm(tt.ns, tt.labels)
			nw["data"] = map[string]any{"a": "2"}
			c := &Change{Type: change.Updated, Resource: res, Old: old, New: nw, Time: time.Unix(1, 0),
				Attribution: &change.Attribution{User: &change.UserInfo{Username: tt.user}, Match: change.MatchExact}}
			fs, errs := set.Eval(c)
			if len(fs) != 1 {
				t.Fatalf("%d firings, errors %v", len(fs), errs)
			}
			if !slices.Equal(fs[0].Skipped, tt.want) {
				t.Errorf("skipped %v, want %v", fs[0].Skipped, tt.want)
			}
			if len(errs) != 1 || !strings.Contains(errs[0].Error(), "actions[4].when: no such key") {
				t.Errorf("errors %v, want the one of actions[4].when", errs)
			}
		})
	}
}
