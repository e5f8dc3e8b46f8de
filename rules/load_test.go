package rules

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/fileerr"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// rule wraps one rule's YAML body (indented by four spaces) into a file.
func rule(body string) string {
	return "rules:\n  - name: r\n" + body
}

const match = "    match: {resources: [{group: example.com, kind: Widget}]}\n"
const logAction = "    actions: [{log: {}}]\n"

func TestParseValid(t *testing.T) {
	src := `
rules:
  - name: everything
    description: all the keys
    match:
      resources:
        - {group: example.com, kind: Widget, version: v1}
        - {group: "", resource: configmaps}
        - {group: "*", kind: "*"}
      custom: true
      namespaces: [a, b]
      excludeNamespaces: [kube-system]
      labelSelector: "app=shop,tier in (web, api),!legacy"
      names: ["web-*", "api-?"]
      users: [alice, "group:dev"]
      excludeUsers: ["system:serviceaccount:*"]
    on: [update, create]
    fields:
      - path: spec.size
        from: 1
        to: 2
      - spec.color
      - {path: 'metadata.labels["app.kubernetes.io/name"]', added: true}
      - {path: spec.owner, removed: true}
      - {path: 'spec.tags[*]', to: [a, b]}
    ignoreFields: [status, 'metadata.annotations["kubectl.kubernetes.io/last-applied-configuration"]']
    when: object.spec.size > oldObject.spec.size
    includeObject: true
    redact: [spec.password]
    actions:
      - log:
      - log: {file: /tmp/x.jsonl}
      - webhook:
          url: https://hooks.example.com/x?a=b
          timeout: 1m30s
          headers: {X-Team: shop, X-Retries: 3}
          bearerTokenFile: /var/run/token
          caFile: ca.pem
          certFile: c.pem
          keyFile: k.pem
          signing: {secretEnv: HMAC, header: X-Sig}
          retry: {attempts: 3, initialBackoff: 100ms, maxBackoff: 2s}
          template: '{"text": {{json .rule}}}'
      - exec: {command: [/bin/notify, --json], env: {A: "1"}, timeout: 5s}
      - event: {reason: WidgetResized, type: Warning, note: "{{.rule}} fired"}
      - patch: {merge: {metadata: {annotations: {audited: "yes"}}}}
      - patch:
          json:
            - {op: add, path: /metadata/labels/x, value: y}
            - {op: move, from: /a, path: /b}
            - {op: remove, path: /metadata/labels/a~1b}
          subresource: status
`
	set, err := Parse("all.yaml", []byte(src))
	if err != nil {
		t.Fatalf("Parse:\n%v", err)
	}
	r := set.Rule("everything")
	if r == nil || len(set.Rules()) != 1 {
		t.Fatalf("rules = %v", set.Rules())
	}
	if r.Source != "all.yaml:3:5" || r.Description != "all the keys" || !r.IncludeObject {
		t.Errorf("rule = %+v", r)
	}
	wantSel := []change.Selector{
		{Group: "example.com", Version: "v1", Kind: "Widget", Custom: true},
		{Group: "", Resource: "configmaps", Custom: true},
		{Group: "*", Kind: "*", Custom: true},
	}
	if !reflect.DeepEqual(r.Selectors, wantSel) {
		t.Errorf("selectors = %+v", r.Selectors)
	}
	if !reflect.DeepEqual(r.On, []change.Type{change.Updated, change.Created}) {
		t.Errorf("on = %v", r.On)
	}
	if len(r.fields) != 5 || !r.fields[0].hasFrom || !equal(r.fields[0].to, 2) || !r.fields[2].added || !r.fields[3].removed {
		t.Errorf("fields = %+v", r.fields)
	}
	if len(r.Actions) != 7 {
		t.Fatalf("actions = %+v", r.Actions)
	}
	w := r.Actions[2].Webhook
	if w.Timeout != 90*time.Second || w.Headers["X-Retries"] != "3" || w.Signing.SecretEnv != "HMAC" ||
		w.Retry != (Retry{Attempts: 3, InitialBackoff: 100 * time.Millisecond, MaxBackoff: 2 * time.Second}) {
		t.Errorf("webhook = %+v", w)
	}
	if out, err := w.Template.Render([]byte(`{"rule":"r<1>"}`)); err != nil || string(out) != `{"text": "r\u003c1\u003e"}` {
		t.Errorf("template renders %s, %v", out, err)
	}
	if r.Actions[0].Log == nil || r.Actions[1].Log.File != "/tmp/x.jsonl" {
		t.Errorf("log actions = %+v %+v", r.Actions[0], r.Actions[1])
	}
	if e := r.Actions[4].Event; e.Reason != "WidgetResized" || e.Type != "Warning" || e.Note.Source() != "{{.rule}} fired" {
		t.Errorf("event = %+v", e)
	}
	if p := r.Actions[6].Patch; len(p.JSON) != 3 || p.Subresource != "status" {
		t.Errorf("patch = %+v", p)
	}
}

// TestParseOnKey keeps the unquoted on: key working (YAML 1.1 parsers
// read it as the boolean true).
func TestParseOnKey(t *testing.T) {
	set, err := Parse("on.yaml", []byte(rule(match+"    on: [delete]\n"+logAction)))
	if err != nil {
		t.Fatal(err)
	}
	if got := set.Rules()[0].On; !reflect.DeepEqual(got, []change.Type{change.Deleted}) {
		t.Errorf("on = %v, want [deleted]", got)
	}
	set, err = Parse("on.yaml", []byte(rule(match+logAction)))
	if err != nil {
		t.Fatal(err)
	}
	if got := set.Rules()[0].On; !reflect.DeepEqual(got, []change.Type{change.Created, change.Updated, change.Deleted}) {
		t.Errorf("default on = %v", got)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string // each a full error line or, without a position, a substring
	}{
		{"empty file", "", []string{"f.yaml:1:1: empty file"}},
		{"comment only", "# nothing\n", []string{"f.yaml:1:1: empty file"}},
		{"not yaml", "rules: [", []string{"f.yaml:1:1: invalid YAML"}},
		{"two documents", "rules: []\n---\nrules: []\n", []string{"f.yaml:2:1: a file holds one YAML document"}},
		{"not a mapping", "- a\n", []string{"f.yaml:1:1: must be a mapping, not a list"}},
		{"no rules key", "rule: []\n", []string{`f.yaml:1:1: rule: unknown key "rule" (known keys: metrics, rules)`, "f.yaml:1:1: rules: required"}},
		{"unknown rule key", rule(match + logAction + "    fieldz: [a]\n"), []string{`f.yaml:5:5: rules[0].fieldz: unknown key "fieldz"`}},
		{"duplicate key", rule(match + logAction + "    on: [create]\n    on: [update]\n"), []string{`f.yaml:6:5: rules[0].on: duplicate key "on"`}},
		{"no name", "rules:\n  - match: {resources: [{group: a, kind: B}]}\n" + logAction, []string{"f.yaml:2:5: rules[0].name: required"}},
		{"two without name", "rules:\n  - {match: {resources: [{group: a, kind: B}]}, actions: [{log: {}}]}\n  - {match: {resources: [{group: a, kind: B}]}, actions: [{log: {}}]}\n",
			[]string{"f.yaml:2:5: rules[0].name: required\nf.yaml:3:5: rules[1].name: required"}},
		{"bad name", "rules:\n  - name: a/b\n" + match + logAction, []string{`f.yaml:2:11: rules[0].name: "a/b" is not a valid rule name`}},
		{"duplicate names", "rules:\n  - name: a\n" + match + logAction + "  - name: a\n" + match + logAction,
			[]string{`f.yaml:5:11: rules[1].name: duplicate rule name "a" (first defined at f.yaml:2:5)`}},
		{"no match", "rules:\n  - name: a\n" + logAction, []string{"f.yaml:2:5: rules[0].match: required"}},
		{"no resources", rule("    match: {namespaces: [a]}\n" + logAction), []string{"rules[0].match.resources: at least one resource selector is required"}},
		{"no group", rule("    match: {resources: [{kind: Widget}]}\n" + logAction), []string{"f.yaml:3:25: rules[0].match.resources[0].group: required"}},
		{"no kind nor resource", rule("    match: {resources: [{group: a}]}\n" + logAction), []string{"rules[0].match.resources[0]: one of kind and resource is required"}},
		{"partial wildcard", rule("    match: {resources: [{group: a, kind: 'Wid*'}]}\n" + logAction), []string{`rules[0].match.resources[0].kind: "Wid*" is not a valid kind`}},
		{"bad label selector", rule("    match: {resources: [{group: a, kind: B}], labelSelector: 'a in (b'}\n" + logAction), []string{"rules[0].match.labelSelector: invalid label selector"}},
		{"bad glob", rule("    match: {resources: [{group: a, kind: B}], names: ['[a']}\n" + logAction), []string{`rules[0].match.names[0]: "[a" is not a valid name glob`}},
		{"empty namespace", rule("    match: {resources: [{group: a, kind: B}], namespaces: ['']}\n" + logAction), []string{"rules[0].match.namespaces[0]: empty namespace name"}},
		{"bad on", rule(match + logAction + "    on: [created]\n"), []string{`f.yaml:5:10: rules[0].on[0]: "created" is not a change type: use create, update or delete`}},
		{"empty on", rule(match + logAction + "    on: []\n"), []string{"rules[0].on: must not be empty"}},
		{"on twice", rule(match + logAction + "    on: [update, update]\n"), []string{`rules[0].on[1]: "update" listed twice`}},
		{"on not a list", rule(match + logAction + "    on: update\n"), []string{"f.yaml:5:9: rules[0].on: must be a list, not a scalar"}},
		{"bad path", rule(match + logAction + "    fields: [spec..size]\n"), []string{`f.yaml:5:14: rules[0].fields[0].path: invalid path "spec..size"`}},
		{"no path", rule(match + logAction + "    fields: [{to: 1}]\n"), []string{"rules[0].fields[0].path: required"}},
		{"added and removed", rule(match + logAction + "    fields: [{path: a, added: true, removed: true}]\n"), []string{"rules[0].fields[0].removed: added and removed exclude each other"}},
		{"added with from", rule(match + logAction + "    fields: [{path: a, added: true, from: 1}]\n"), []string{"rules[0].fields[0].from: an added field has no old value"}},
		{"removed with to", rule(match + logAction + "    fields: [{path: a, removed: true, to: 1}]\n"), []string{"rules[0].fields[0].to: a removed field has no new value"}},
		{"from equals to", rule(match + logAction + "    fields: [{path: a, from: 1, to: 1.0}]\n"), []string{"rules[0].fields[0].to: equals from"}},
		{"added not a bool", rule(match + logAction + "    fields: [{path: a, added: yes}]\n"), []string{`rules[0].fields[0].added: must be true or false, not "yes"`}},
		{"bad ignoreFields", rule(match + logAction + "    ignoreFields: ['a[']\n"), []string{"rules[0].ignoreFields[0]: invalid path"}},
		{"bad redact", rule(match + logAction + "    redact: ['.a']\n"), []string{"rules[0].redact[0]: invalid path"}},
		{"CEL syntax", rule(match + logAction + "    when: object.spec.size >\n"), []string{"f.yaml:5:29: rules[0].when: CEL: Syntax error"}},
		{"CEL quoted", rule(match + logAction + "    when: \"object.x + \"\n"), []string{"f.yaml:5:23: rules[0].when: CEL: Syntax error"}},
		{"CEL undeclared", rule(match + logAction + "    when: obj.spec.size > 1\n"), []string{"f.yaml:5:11: rules[0].when: CEL: undeclared reference to 'obj'"}},
		{"CEL not bool", rule(match + logAction + "    when: \"'a' + 'b'\"\n"), []string{"rules[0].when: CEL: must return a bool, not string"}},
		{"CEL sum of strings", rule(match + logAction + "    when: \"['a'].sum() == 'a'\"\n"), []string{"f.yaml:5:21: rules[0].when: CEL: found no matching overload for 'sum' applied to 'list(string).()'"}},
		{"CEL block", rule(match + logAction + "    when: |\n      object.a &&\n      nope\n"), []string{"f.yaml:5:11: rules[0].when: CEL: undeclared reference to 'nope' (at line 2, column 1 of the expression)"}},
		{"CEL not a string", rule(match + logAction + "    when: [a]\n"), []string{"rules[0].when: must be a CEL expression string, not a list"}},
		{"CEL empty", rule(match + logAction + "    when: ''\n"), []string{"rules[0].when: empty expression"}},
		{"no actions", rule(match), []string{"rules[0].actions: at least one action is required"}},
		{"empty actions", rule(match + "    actions: []\n"), []string{"rules[0].actions: at least one action is required"}},
		{"action without kind", rule(match + "    actions: [{}]\n"), []string{"rules[0].actions[0]: an action has exactly one of log, webhook, exec, event, patch, nats, kafka"}},
		{"action with two kinds", rule(match + "    actions: [{log: {}, exec: {command: [a]}}]\n"), []string{"rules[0].actions[0]: an action has exactly one kind; this one has log and exec"}},
		{"unknown action", rule(match + "    actions: [{sms: {}}]\n"), []string{`rules[0].actions[0].sms: unknown key "sms" (known keys: alertmanager, email, event, exec, kafka, log, nats, pagerduty, patch, slack, teams, webhook, when)`}},
		{"slack without a URL", rule(match + "    actions: [{slack: {channel: '#a'}}]\n"), []string{"rules[0].actions[0].slack.webhookURL: required: the incoming webhook's URL"}},
		{"webhook no url", rule(match + "    actions: [{webhook: {timeout: 1s}}]\n"), []string{"rules[0].actions[0].webhook.url: required"}},
		{"bearer token of the service account", rule(match + "    actions: [{webhook: {url: 'http://x', bearerTokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token}}]\n"),
			[]string{"rules[0].actions[0].webhook.bearerTokenFile: is in the service account's credentials"}},
		{"signing secret in a projected token", rule(match + "    actions: [{webhook: {url: 'http://x', signing: {secretFile: /run/secrets/tokens/vault}}}]\n"),
			[]string{"rules[0].actions[0].webhook.signing.secretFile: is in the service account's credentials"}},
		{"client key of the service account, dotted", rule(match + "    actions: [{webhook: {url: 'http://x', certFile: /tmp/c, keyFile: /var/run/secrets/kubernetes.io/../kubernetes.io/serviceaccount/token}}]\n"),
			[]string{"rules[0].actions[0].webhook.keyFile: is in the service account's credentials"}},
		{"exec reading the token", rule(match + "    actions: [{exec: {command: [sh, -c, 'cat /var/run/secrets/kubernetes.io/serviceaccount/token']}}]\n"),
			[]string{"rules[0].actions[0].exec.command[2]: names the service account's credentials"}},
		{"exec given the token's path", rule(match + "    actions: [{exec: {command: [/bin/notify], env: {TOKEN: ../run/secrets/kubernetes.io/serviceaccount/token}}}]\n"),
			[]string{"rules[0].actions[0].exec.env.TOKEN: names the service account's credentials"}},
		{"webhook relative url", rule(match + "    actions: [{webhook: {url: /hook}}]\n"), []string{`rules[0].actions[0].webhook.url: must be an absolute http or https URL, not scheme "" with host ""`}},
		{"webhook ftp url", rule(match + "    actions: [{webhook: {url: 'ftp://x/y'}}]\n"), []string{`must be an absolute http or https URL, not scheme "ftp" with host "x"`}},
		{"webhook bad duration", rule(match + "    actions: [{webhook: {url: 'http://x', timeout: 5}}]\n"), []string{`rules[0].actions[0].webhook.timeout: must be a duration such as 5s or 1m30s, not "5"`}},
		{"webhook negative duration", rule(match + "    actions: [{webhook: {url: 'http://x', timeout: -1s}}]\n"), []string{"rules[0].actions[0].webhook.timeout: must not be negative"}},
		{"webhook bad header", rule(match + "    actions: [{webhook: {url: 'http://x', headers: {'X Y': a}}}]\n"), []string{`"X Y" is not a valid header name`}},
		{"webhook header with =", rule(match + "    actions: [{webhook: {url: 'http://x', headers: {'X=Y': a}}}]\n"), []string{`f.yaml:4:60: rules[0].actions[0].webhook.headers["X=Y"]: "X=Y" is not a valid header name`}},
		{"webhook header not a string", rule(match + "    actions: [{webhook: {url: 'http://x', headers: {X: [a]}}}]\n"), []string{"rules[0].actions[0].webhook.headers.X: must be a string, not a list"}},
		{"webhook cert without key", rule(match + "    actions: [{webhook: {url: 'http://x', certFile: c}}]\n"), []string{"certFile and keyFile go together"}},
		{"webhook two secrets", rule(match + "    actions: [{webhook: {url: 'http://x', signing: {secretEnv: A, secretFile: b}}}]\n"), []string{"rules[0].actions[0].webhook.signing: exactly one of secretFile and secretEnv"}},
		{"webhook no secret", rule(match + "    actions: [{webhook: {url: 'http://x', signing: {header: X}}}]\n"), []string{"exactly one of secretFile and secretEnv"}},
		{"webhook bad template", rule(match + "    actions: [{webhook: {url: 'http://x', template: '{{.rule'}}]\n"), []string{"rules[0].actions[0].webhook.template: invalid template"}},
		{"negative attempts", rule(match + "    actions: [{webhook: {url: 'http://x', retry: {attempts: -1}}}]\n"), []string{"rules[0].actions[0].webhook.retry.attempts: must not be negative"}},
		{"backoffs reversed", rule(match + "    actions: [{exec: {command: [a], retry: {initialBackoff: 2s, maxBackoff: 1s}}}]\n"), []string{"rules[0].actions[0].exec.retry.maxBackoff: 1s is less than initialBackoff 2s"}},
		{"attempts not an int", rule(match + "    actions: [{exec: {command: [a], retry: {attempts: many}}}]\n"), []string{`must be an integer, not "many"`}},
		{"exec no command", rule(match + "    actions: [{exec: {command: []}}]\n"), []string{"rules[0].actions[0].exec.command: required"}},
		{"exec command string", rule(match + "    actions: [{exec: {command: /bin/x}}]\n"), []string{"rules[0].actions[0].exec.command: must be a list, not a scalar"}},
		{"event no reason", rule(match + "    actions: [{event: {type: Normal}}]\n"), []string{"rules[0].actions[0].event.reason: required"}},
		{"event bad type", rule(match + "    actions: [{event: {reason: R, type: Error}}]\n"), []string{`rules[0].actions[0].event.type: "Error" is not an event type: use Normal or Warning`}},
		{"event bad note", rule(match + "    actions: [{event: {reason: R, note: '{{end}}'}}]\n"), []string{"rules[0].actions[0].event.note: invalid template"}},
		{"patch neither", rule(match + "    actions: [{patch: {subresource: status}}]\n"), []string{"rules[0].actions[0].patch: exactly one of merge and json is required"}},
		{"patch both", rule(match + "    actions: [{patch: {merge: {a: 1}, json: [{op: remove, path: /a}]}}]\n"), []string{"exactly one of merge and json"}},
		{"patch bad op", rule(match + "    actions: [{patch: {json: [{op: delete, path: /a}]}}]\n"), []string{"rules[0].actions[0].patch.json[0].op: op must be one of add, remove, replace, move, copy, test"}},
		{"patch missing value", rule(match + "    actions: [{patch: {json: [{op: replace, path: /a}]}}]\n"), []string{"rules[0].actions[0].patch.json[0].value: required for replace"}},
		{"patch missing from", rule(match + "    actions: [{patch: {json: [{op: copy, path: /a}]}}]\n"), []string{"rules[0].actions[0].patch.json[0].from: required for copy"}},
		{"patch bad pointer", rule(match + "    actions: [{patch: {json: [{op: remove, path: a/b}]}}]\n"), []string{"rules[0].actions[0].patch.json[0].path: a/b is not a JSON Pointer"}},
		{"patch bad escape", rule(match + "    actions: [{patch: {json: [{op: remove, path: /a~2}]}}]\n"), []string{"is not a JSON Pointer"}},
		{"patch extra key", rule(match + "    actions: [{patch: {json: [{op: remove, path: /a, value: 1}]}}]\n"), []string{`rules[0].actions[0].patch.json[0].value: unknown key "value" for remove`}},
		{"patch bad subresource", rule(match + "    actions: [{patch: {merge: {a: 1}, subresource: scale}}]\n"), []string{`"scale" is not a patchable subresource`}},
		{"nats no url", rule(match + "    actions: [{nats: {subject: fw.x}}]\n"), []string{"f.yaml:4:22: rules[0].actions[0].nats.url: required"}},
		{"nats http url", rule(match + "    actions: [{nats: {url: 'http://n:4222', subject: fw.x}}]\n"), []string{`f.yaml:4:28: rules[0].actions[0].nats.url: server 1 must be a nats:// or tls:// URL with a host, not scheme "http" with host "n:4222"`}},
		{"nats user in url", rule(match + "    actions: [{nats: {url: 'nats://TOKEN@n:4222', subject: fw.x}}]\n"), []string{"rules[0].actions[0].nats.url: server 1 (nats://n:4222) carries credentials"}},
		{"nats credentials of the pod", rule(match + "    actions: [{nats: {url: 'nats://n:4222', subject: fw.x, tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token}}]\n"), []string{"rules[0].actions[0].nats.tokenFile: is in the service account's credentials"}},
		{"kafka password of the pod", rule(match + "    actions: [{kafka: {brokers: ['k:9092'], topic: fw, sasl: {mechanism: PLAIN, username: u, passwordFile: /run/secrets/tokens/t}}}]\n"), []string{"rules[0].actions[0].kafka.sasl.passwordFile: is in the service account's credentials"}},
		{"nats no subject", rule(match + "    actions: [{nats: {url: 'nats://n:4222'}}]\n"), []string{"rules[0].actions[0].nats.subject: required"}},
		{"nats bad subject template", rule(match + "    actions: [{nats: {url: 'nats://n:4222', subject: 'fw.{{.type'}}]\n"), []string{"f.yaml:4:54: rules[0].actions[0].nats.subject: invalid template"}},
		{"nats bad stream", rule(match + "    actions: [{nats: {url: 'nats://n:4222', subject: fw.x, stream: a.b}}]\n"), []string{`rules[0].actions[0].nats.stream: "a.b" is not a stream name`}},
		{"nats two auths", rule(match + "    actions: [{nats: {url: 'nats://n:4222', subject: fw.x, tokenEnv: T, credentialsFile: c}}]\n"), []string{"f.yaml:4:22: rules[0].actions[0].nats: at most one of credentialsFile"}},
		{"nats inline token", rule(match + "    actions: [{nats: {url: 'nats://n:4222', subject: fw.x, token: abc}}]\n"), []string{`rules[0].actions[0].nats.token: unknown key "token"`}},
		{"nats cert without key", rule(match + "    actions: [{nats: {url: 'nats://n:4222', subject: fw.x, certFile: c}}]\n"), []string{"rules[0].actions[0].nats.certFile: certFile and keyFile go together"}},
		{"nats bad cloudEvents mode", rule(match + "    actions: [{nats: {url: 'nats://n:4222', subject: fw.x, cloudEvents: {mode: batch}}}]\n"), []string{`rules[0].actions[0].nats.cloudEvents.mode: "batch" is not a CloudEvents mode`}},
		{"kafka no brokers", rule(match + "    actions: [{kafka: {topic: fw}}]\n"), []string{"f.yaml:4:23: rules[0].actions[0].kafka.brokers: required"}},
		{"kafka bad broker", rule(match + "    actions: [{kafka: {brokers: [k1, 'k2:x'], topic: fw}}]\n"), []string{`f.yaml:4:34: rules[0].actions[0].kafka.brokers[0]: "k1" is not host:port`, `f.yaml:4:38: rules[0].actions[0].kafka.brokers[1]: "k2:x" is not host:port`}},
		{"kafka no topic", rule(match + "    actions: [{kafka: {brokers: ['k:9092']}}]\n"), []string{"rules[0].actions[0].kafka.topic: required"}},
		{"kafka bad sasl", rule(match + "    actions: [{kafka: {brokers: ['k:9092'], topic: fw, sasl: {mechanism: GSSAPI, username: u}}}]\n"), []string{`rules[0].actions[0].kafka.sasl.mechanism: "GSSAPI" is not a SASL mechanism`, "rules[0].actions[0].kafka.sasl: exactly one of passwordFile and passwordEnv"}},
		{"kafka inline password", rule(match + "    actions: [{kafka: {brokers: ['k:9092'], topic: fw, sasl: {mechanism: PLAIN, username: u, password: p}}}]\n"), []string{`rules[0].actions[0].kafka.sasl.password: unknown key "password"`}},
		{"kafka bad retry", rule(match + "    actions: [{kafka: {brokers: ['k:9092'], topic: fw, retry: {attempts: -2}}}]\n"), []string{"rules[0].actions[0].kafka.retry.attempts: must not be negative"}},
		{"webhook bad cloudEvents type", rule(match + "    actions: [{webhook: {url: 'http://x', cloudEvents: {type: kind}}}]\n"), []string{`rules[0].actions[0].webhook.cloudEvents.type: "kind" is not a CloudEvents type choice`}},
		{"patch infinity", rule(match + "    actions: [{patch: {merge: {a: .inf}}}]\n"), []string{"rules[0].actions[0].patch.merge.a: .inf cannot be represented in JSON"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := Parse("f.yaml", []byte(tt.src))
			if err == nil {
				t.Fatalf("Parse succeeded, want errors %q", tt.want)
			}
			if set != nil {
				t.Error("Parse returned a Set with an error")
			}
			var list fileerr.List
			if !errors.As(err, &list) {
				t.Fatalf("error is %T, not a fileerr.List", err)
			}
			got := err.Error()
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("errors\n%s\ndo not contain\n%s", got, w)
				}
			}
			for _, line := range strings.Split(got, "\n") {
				if !strings.HasPrefix(line, "f.yaml:") {
					t.Errorf("error line %q does not start with FILE:LINE:COL", line)
				}
			}
		})
	}
}

// TestParseReportsAllErrors checks that one run reports every error of a
// file, in position order, not only the first.
func TestParseReportsAllErrors(t *testing.T) {
	src := `rules:
  - name: a
    match: {resources: [{kind: Widget}]}
    fields: [spec..size]
    when: nope
    actions: [{webhook: {url: x}}]
  - name: b
    match: {resources: [{group: a, kind: B}], labelSelector: "=="}
    actions: [{event: {}}]
`
	_, err := Parse("f.yaml", []byte(src))
	want := []string{
		"f.yaml:3:25: rules[0].match.resources[0].group: required",
		"f.yaml:4:14: rules[0].fields[0].path: invalid path",
		"f.yaml:5:11: rules[0].when: CEL: undeclared reference to 'nope'",
		"f.yaml:6:31: rules[0].actions[0].webhook.url: must be an absolute http or https URL, not scheme \"\" with host \"\"",
		"f.yaml:8:62: rules[1].match.labelSelector: invalid label selector",
		"f.yaml:9:23: rules[1].actions[0].event.reason: required",
	}
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(lines), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("error %d = %q, want prefix %q", i, lines[i], w)
		}
	}
}

func TestLoadFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("a.yaml", "rules:\n  - name: one\n"+match+logAction)
	b := write("b.yaml", "rules:\n  - name: two\n"+match+logAction+"  - name: one\n"+match+logAction)
	c := write("c.yaml", "rules:\n  - name: three\n"+match+logAction)

	set, err := Load(a, c)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range set.Rules() {
		names = append(names, r.Name)
	}
	if !reflect.DeepEqual(names, []string{"one", "three"}) {
		t.Errorf("rules = %v", names)
	}

	_, err = Load(a, b)
	want := b + `:5:11: rules[1].name: duplicate rule name "one" (first defined at ` + a + ":2:5)"
	if err == nil || err.Error() != want {
		t.Errorf("Load(a, b) = %v, want %s", err, want)
	}
	if err := Validate(a, b); err == nil {
		t.Error("Validate accepted duplicate names")
	}
	if err := Validate(a, c); err != nil {
		t.Errorf("Validate: %v", err)
	}

	missing := filepath.Join(dir, "missing.yaml")
	_, err = Load(a, missing)
	if err == nil || err.Error() != missing+": read: no such file or directory" {
		t.Errorf("Load(missing) = %v", err)
	}
	if _, err := Load(); err == nil {
		t.Error("Load() with no file succeeded")
	}
}

func TestParseAnchorsAndMerge(t *testing.T) {
	src := `
base: &base
  match: {resources: [{group: example.com, kind: Widget}]}
  actions: [{log: {}}]
rules:
  - <<: *base
    name: a
  - <<: *base
    name: b
    on: [create]
`
	// base is not a key of a rules file: the anchor must live elsewhere.
	if _, err := Parse("f.yaml", []byte(src)); err == nil || !strings.Contains(err.Error(), `unknown key "base"`) {
		t.Fatalf("want an unknown key error, got %v", err)
	}
	src = `
rules:
  - &a
    name: a
    match: {resources: [{group: example.com, kind: Widget}]}
    actions: [{log: {}}]
  - <<: *a
    name: b
    on: [create]
`
	set, err := Parse("f.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if r := set.Rule("b"); r == nil || !reflect.DeepEqual(r.On, []change.Type{change.Created}) || len(r.Selectors) != 1 {
		t.Errorf("merged rule b = %+v", r)
	}
}

func TestParseAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 9; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [*a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d]\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	// Anchors are defined before use: here inside a field's from value.
	src := "rules:\n  - name: a\n" + match + logAction + "    fields:\n      - path: a\n        from:\n" + indent(b.String(), "          ") + "        to: *a8\n"
	var err error
	cpu := testenv.SpentCPU(t, func() { _, err = Parse("f.yaml", []byte(src)) })
	if err == nil || !strings.Contains(err.Error(), "too many values") {
		t.Errorf("want a too many values error, got %v", err)
	}
	if cpu > 10*time.Second {
		t.Errorf("took %s of CPU", cpu)
	}
}

func indent(s, prefix string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = prefix + l
		}
	}
	return strings.Join(lines, "")
}

// FuzzLoad checks that the loader never panics on any input, and that it
// returns exactly one of a Set and an error.
func FuzzLoad(f *testing.F) {
	files, _ := filepath.Glob("../examples/*/rules.yaml")
	for _, file := range files {
		if data, err := os.ReadFile(file); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte(rule(match + logAction)))
	f.Add([]byte(rule(match + "    fields: [{path: 'a[k=v].b', from: {x: [1]}, to: null}]\n    when: object.a > 1\n" + logAction)))
	f.Add([]byte("rules:\n  - &a {name: a}\n  - *a\n  - <<: [*a, *a]\n"))
	f.Add([]byte("rules: [{name: x, actions: [{patch: {json: [{op: add}]}}, {webhook: {url: 'http://x', template: '{{.x}}'}}]}]"))
	f.Add([]byte(rule(match + "    crd: {impact: true}\n    when: crd.breaking > 0\n" + logAction)))
	f.Add([]byte(rule(match + "    actions: [{nats: {url: 'nats://a:1,tls://b:2', subject: 'fw.{{.type}}', stream: S, tokenEnv: T, cloudEvents: {mode: binary, type: rule, source: //c}}}]\n")))
	f.Add([]byte(rule(match + "    actions: [{kafka: {brokers: ['k:9092'], topic: 'fw.{{.name}}', sasl: {mechanism: PLAIN, username: u, passwordFile: p}, tls: true}}]\n")))
	f.Fuzz(func(t *testing.T, data []byte) {
		set, err := Parse("fuzz.yaml", data)
		if (set == nil) == (err == nil) {
			t.Fatalf("Parse returned set %v and error %v", set, err)
		}
		if err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "fuzz.yaml:") {
					t.Fatalf("error line %q has no position", line)
				}
			}
		}
	})
}

// TestLoadRefusesLargeFiles: a rules path pointed at a device or a huge
// file is read no further than the size limit.
func TestLoadRefusesLargeFiles(t *testing.T) {
	_, err := Load("/dev/zero")
	if err == nil || !strings.Contains(err.Error(), "/dev/zero: read: larger than the 4194304 bytes a rules file may have") {
		t.Errorf("Load(/dev/zero) = %v", err)
	}
}

// TestParseClusterCAAllowed: the cluster's CA, beside the token, is
// public: a webhook may trust it.
func TestParseClusterCAAllowed(t *testing.T) {
	_, err := Parse("f.yaml", []byte(rule(match+"    actions: [{webhook: {url: 'https://x', caFile: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt}}]\n")))
	if err != nil {
		t.Errorf("caFile of the cluster's CA: %v", err)
	}
}
