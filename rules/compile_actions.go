package rules

import (
	"encoding/json"
	"net/url"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/fieldwatch/fieldwatch/internal/fieldpath"
)

// action checks one entry of a rule's actions, at field path p: exactly
// one kind, and that kind's fields complete and consistent. It returns the
// action with its templates compiled (a copy: a's own are left as they
// are). The action package can then trust a compiled Action.
func (c *compiler) action(a Action, p string) Action {
	if a.Webhook != nil {
		w := *a.Webhook
		w.Template = c.template(w.Template, p+".webhook.template", true)
		a.Webhook = &w
	}
	if a.Event != nil {
		e := *a.Event
		e.Note = c.template(e.Note, p+".event.note", false)
		a.Event = &e
	}
	if a.NATS != nil {
		n := *a.NATS
		n.Subject = c.template(n.Subject, p+".nats.subject", false)
		a.NATS = &n
	}
	if a.Kafka != nil {
		k := *a.Kafka
		k.Topic = c.template(k.Topic, p+".kafka.topic", false)
		a.Kafka = &k
	}
	if a.PagerDuty != nil {
		pd := *a.PagerDuty
		pd.DedupKey = c.template(pd.DedupKey, p+".pagerduty.dedupKey", false)
		a.PagerDuty = &pd
	}
	var kinds []string
	for _, k := range []struct {
		name string
		set  bool
	}{{"log", a.Log != nil}, {"webhook", a.Webhook != nil}, {"exec", a.Exec != nil}, {"event", a.Event != nil}, {"patch", a.Patch != nil}, {"nats", a.NATS != nil}, {"kafka", a.Kafka != nil},
		{"alertmanager", a.Alertmanager != nil}, {"slack", a.Slack != nil}, {"teams", a.Teams != nil}, {"pagerduty", a.PagerDuty != nil}, {"email", a.Email != nil}} {
		if k.set {
			kinds = append(kinds, k.name)
		}
	}
	switch len(kinds) {
	case 0:
		c.errorf(p, "an action has exactly one of log, webhook, exec, event, patch, nats, kafka, alertmanager, slack, teams, pagerduty, email")
		return a
	case 1:
	default:
		c.errorf(p, "an action has exactly one kind; this one has %s (write one list entry per action)", strings.Join(kinds, " and "))
		return a
	}
	switch {
	case a.Webhook != nil:
		c.webhook(a.Webhook, p+".webhook")
	case a.Exec != nil:
		c.exec(a.Exec, p+".exec")
	case a.Event != nil:
		c.event(a.Event, p+".event")
	case a.Patch != nil:
		c.patch(a.Patch, p+".patch")
	case a.NATS != nil:
		c.nats(a.NATS, p+".nats")
	case a.Kafka != nil:
		c.kafka(a.Kafka, p+".kafka")
	default:
		c.notifyAction(a, p)
	}
	return a
}

// CredentialDirs are where Kubernetes mounts a pod's service-account
// credentials (its token) and projected tokens. A rule may not make an
// action read them: a bearerTokenFile there would send fieldwatch's token
// to whatever URL the rule names, an exec could print it to the log.
// (caFile may name the cluster's CA there: it is public.)
var CredentialDirs = []string{"/var/run/secrets/kubernetes.io", "/run/secrets/kubernetes.io", "/var/run/secrets/tokens", "/run/secrets/tokens"}

// IsCredentialPath reports whether path (an absolute path, cleaned) is in
// one of CredentialDirs.
func IsCredentialPath(path string) bool {
	path = filepath.Clean(path)
	for _, d := range CredentialDirs {
		if path == d || strings.HasPrefix(path, d+"/") {
			return true
		}
	}
	return false
}

// mentionsCredentials reports whether s (an exec argument or environment
// value) names a path in CredentialDirs, anywhere in it (sh -c 'cat ...').
func mentionsCredentials(s string) bool {
	for _, d := range CredentialDirs {
		if strings.Contains(s, d) || strings.Contains(s, strings.TrimPrefix(d, "/var")) {
			return true
		}
	}
	return false
}

// notCredentials records an error when the file at field path p is in
// CredentialDirs.
func (c *compiler) notCredentials(path, p string) {
	if path != "" && (IsCredentialPath(path) || mentionsCredentials(path)) {
		c.errorf(p, "is in the service account's credentials (%s): a rule may not read them", strings.Join(CredentialDirs, ", "))
	}
}

// template compiles a template at field path p; nil stays nil.
func (c *compiler) template(t *Template, p string, isJSON bool) *Template {
	if t == nil {
		return nil
	}
	compiled, err := ParseTemplate(p, t.Source(), isJSON)
	if err != nil {
		c.errorf(p, "invalid template: %v", err)
		return nil
	}
	return compiled
}

func (c *compiler) webhook(w *WebhookAction, p string) {
	if w.URL == "" {
		c.errorf(p+".url", "required")
	} else if u, err := url.Parse(w.URL); err != nil {
		// Not quoted: a URL's path or query may hold a token, and this
		// error reaches the log of a failed reload.
		c.errorf(p+".url", "is not a valid URL")
	} else if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		c.errorf(p+".url", "must be an absolute http or https URL, not scheme %q with host %q", u.Scheme, u.Host)
	}
	for k := range w.Headers {
		if !httpguts.ValidHeaderFieldName(k) {
			c.errorf(fieldpath.Child(p+".headers", k), "%q is not a valid header name", k)
		}
	}
	if (w.CertFile == "") != (w.KeyFile == "") {
		c.errorf(p+".certFile", "certFile and keyFile go together: set both or neither")
	}
	c.notCredentials(w.BearerTokenFile, p+".bearerTokenFile")
	c.notCredentials(w.CertFile, p+".certFile")
	c.notCredentials(w.KeyFile, p+".keyFile")
	if s := w.Signing; s != nil {
		if (s.SecretFile == "") == (s.SecretEnv == "") {
			c.errorf(p+".signing", "exactly one of secretFile and secretEnv is required")
		}
		c.notCredentials(s.SecretFile, p+".signing.secretFile")
		if s.Header != "" && !httpguts.ValidHeaderFieldName(s.Header) {
			c.errorf(p+".signing.header", "%q is not a valid header name", s.Header)
		}
	}
	c.cloudEvents(w.CloudEvents, p+".cloudEvents")
	c.retry(w.Retry, p+".retry")
}

func (c *compiler) exec(e *ExecAction, p string) {
	if len(e.Command) == 0 || e.Command[0] == "" {
		c.errorf(p+".command", "required: the program and its arguments, e.g. [/usr/local/bin/notify, --json]")
	}
	for i, arg := range e.Command {
		if mentionsCredentials(arg) {
			c.errorf(fieldpath.Item(p+".command", i), "names the service account's credentials (%s): a rule may not read them", strings.Join(CredentialDirs, ", "))
		}
	}
	for k, v := range e.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			c.errorf(fieldpath.Child(p+".env", k), "%q is not a valid environment variable name", k)
		}
		if mentionsCredentials(v) {
			c.errorf(fieldpath.Child(p+".env", k), "names the service account's credentials (%s): a rule may not read them", strings.Join(CredentialDirs, ", "))
		}
	}
	c.retry(e.Retry, p+".retry")
}

func (c *compiler) event(e *EventAction, p string) {
	if e.Reason == "" {
		c.errorf(p+".reason", "required: a short UpperCamelCase reason such as WidgetResized")
	} else if len(e.Reason) > 128 || strings.ContainsAny(e.Reason, " \t\n") {
		c.errorf(p+".reason", "%q is not a valid reason: UpperCamelCase, no spaces, at most 128 characters", e.Reason)
	}
	if e.Type != "" && e.Type != "Normal" && e.Type != "Warning" {
		c.errorf(p+".type", "%q is not an event type: use Normal or Warning", e.Type)
	}
	c.retry(e.Retry, p+".retry")
}

func (c *compiler) patch(a *PatchAction, p string) {
	if (a.Merge == nil) == (a.JSON == nil) {
		c.errorf(p, "exactly one of merge and json is required")
	}
	if a.Merge != nil {
		if _, err := json.Marshal(a.Merge); err != nil {
			c.errorf(p+".merge", "not representable as JSON: %v", err)
		}
	}
	if a.JSON != nil && len(a.JSON) == 0 {
		c.errorf(p+".json", "an empty JSON patch does nothing")
	}
	for i, op := range a.JSON {
		c.jsonPatchOp(op, fieldpath.Item(p+".json", i))
	}
	if a.Subresource != "" && a.Subresource != "status" {
		c.errorf(p+".subresource", "%q is not a patchable subresource: leave it out, or use status", a.Subresource)
	}
	c.retry(a.Retry, p+".retry")
}

// jsonPatchOp checks the shape of one RFC 6902 operation.
func (c *compiler) jsonPatchOp(op map[string]any, p string) {
	name, _ := op["op"].(string)
	allowed := map[string][]string{
		"add":     {"op", "path", "value"},
		"remove":  {"op", "path"},
		"replace": {"op", "path", "value"},
		"move":    {"op", "path", "from"},
		"copy":    {"op", "path", "from"},
		"test":    {"op", "path", "value"},
	}
	keys, ok := allowed[name]
	if !ok {
		c.errorf(p+".op", "op must be one of add, remove, replace, move, copy, test")
		return
	}
	for _, k := range keys {
		if _, ok := op[k]; !ok {
			c.errorf(p+"."+k, "required for %s", name)
		}
	}
	for k := range op {
		if !slices.Contains(keys, k) {
			c.errorf(p+"."+k, "unknown key %q for %s (known keys: %s)", k, name, strings.Join(keys, ", "))
		}
	}
	for _, k := range []string{"path", "from"} {
		v, ok := op[k]
		if !ok {
			continue
		}
		if s, isStr := v.(string); !isStr || (s != "" && !strings.HasPrefix(s, "/")) || !validPointerEscapes(s) {
			c.errorf(p+"."+k, "%v is not a JSON Pointer (\"/metadata/annotations/a~1b\")", v)
		}
	}
	if v, ok := op["value"]; ok {
		if _, err := json.Marshal(v); err != nil {
			c.errorf(p+".value", "not representable as JSON: %v", err)
		}
	}
}

// validPointerEscapes reports whether every ~ in a JSON Pointer is ~0 or
// ~1.
func validPointerEscapes(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '~' && (i+1 >= len(s) || (s[i+1] != '0' && s[i+1] != '1')) {
			return false
		}
	}
	return true
}

func (c *compiler) retry(r Retry, p string) {
	if r.Attempts < 0 {
		c.errorf(p+".attempts", "must not be negative")
	}
	if r.InitialBackoff > 0 && r.MaxBackoff > 0 && r.MaxBackoff < r.InitialBackoff {
		c.errorf(p+".maxBackoff", "%s is less than initialBackoff %s", r.MaxBackoff, r.InitialBackoff)
	}
}
