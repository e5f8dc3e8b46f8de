package rules

import (
	"encoding/json"
	"net/url"
	"strings"
)

// validateAction checks one entry of a rule's actions: exactly one kind,
// and that kind's fields complete and consistent. The action package can
// then trust a loaded Action.
func validateAction(d *yamlDecoder, a *Action, p string) {
	var kinds []string
	for _, k := range []struct {
		name string
		set  bool
	}{{"log", a.Log != nil}, {"webhook", a.Webhook != nil}, {"exec", a.Exec != nil}, {"event", a.Event != nil}, {"patch", a.Patch != nil}} {
		if k.set {
			kinds = append(kinds, k.name)
		}
	}
	switch len(kinds) {
	case 0:
		d.errorAt(p, "an action has exactly one of log, webhook, exec, event, patch")
		return
	case 1:
	default:
		d.errorAt(p, "an action has exactly one kind; this one has %s (write one list entry per action)", strings.Join(kinds, " and "))
		return
	}
	switch {
	case a.Webhook != nil:
		validateWebhook(d, a.Webhook, p+".webhook")
	case a.Exec != nil:
		validateExec(d, a.Exec, p+".exec")
	case a.Event != nil:
		validateEvent(d, a.Event, p+".event")
	case a.Patch != nil:
		validatePatch(d, a.Patch, p+".patch")
	}
}

func validateWebhook(d *yamlDecoder, w *WebhookAction, p string) {
	if w.URL == "" {
		d.errorAt(p+".url", "required")
	} else if u, err := url.Parse(w.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		d.errorAt(p+".url", "%q is not an absolute http or https URL", w.URL)
	}
	for k := range w.Headers {
		if !isHeaderName(k) {
			d.errorAt(joinPath(p+".headers", k), "%q is not a valid header name", k)
		}
	}
	if (w.CertFile == "") != (w.KeyFile == "") {
		d.errorAt(p+".certFile", "certFile and keyFile go together: set both or neither")
	}
	if s := w.Signing; s != nil {
		if (s.SecretFile == "") == (s.SecretEnv == "") {
			d.errorAt(p+".signing", "exactly one of secretFile and secretEnv is required")
		}
		if s.Header != "" && !isHeaderName(s.Header) {
			d.errorAt(p+".signing.header", "%q is not a valid header name", s.Header)
		}
	}
	validateRetry(d, w.Retry, p+".retry")
}

// isHeaderName reports whether s is an HTTP header field name (RFC 9110
// token).
func isHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

func validateExec(d *yamlDecoder, e *ExecAction, p string) {
	if len(e.Command) == 0 || e.Command[0] == "" {
		d.errorAt(p+".command", "required: the program and its arguments, e.g. [/usr/local/bin/notify, --json]")
	}
	for k := range e.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			d.errorAt(joinPath(p+".env", k), "%q is not a valid environment variable name", k)
		}
	}
	validateRetry(d, e.Retry, p+".retry")
}

func validateEvent(d *yamlDecoder, e *EventAction, p string) {
	if e.Reason == "" {
		d.errorAt(p+".reason", "required: a short UpperCamelCase reason such as WidgetResized")
	} else if len(e.Reason) > 128 || strings.ContainsAny(e.Reason, " \t\n") {
		d.errorAt(p+".reason", "%q is not a valid reason: UpperCamelCase, no spaces, at most 128 characters", e.Reason)
	}
	if e.Type != "" && e.Type != "Normal" && e.Type != "Warning" {
		d.errorAt(p+".type", "%q is not an event type: use Normal or Warning", e.Type)
	}
	validateRetry(d, e.Retry, p+".retry")
}

func validatePatch(d *yamlDecoder, a *PatchAction, p string) {
	if (a.Merge == nil) == (a.JSON == nil) {
		d.errorAt(p, "exactly one of merge and json is required")
	}
	if a.Merge != nil {
		if _, err := json.Marshal(a.Merge); err != nil {
			d.errorAt(p+".merge", "not representable as JSON: %v", err)
		}
	}
	if a.JSON != nil && len(a.JSON) == 0 {
		d.errorAt(p+".json", "an empty JSON patch does nothing")
	}
	for i, op := range a.JSON {
		validateJSONPatchOp(d, op, indexPath(p+".json", i))
	}
	if a.Subresource != "" && a.Subresource != "status" {
		d.errorAt(p+".subresource", "%q is not a patchable subresource: leave it out, or use status", a.Subresource)
	}
	validateRetry(d, a.Retry, p+".retry")
}

// validateJSONPatchOp checks the shape of one RFC 6902 operation.
func validateJSONPatchOp(d *yamlDecoder, op map[string]any, p string) {
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
		d.errorAt(p+".op", "op must be one of add, remove, replace, move, copy, test")
		return
	}
	for _, k := range keys {
		if _, ok := op[k]; !ok {
			d.errorAt(p+"."+k, "required for %s", name)
		}
	}
	for k := range op {
		if !contains(keys, k) {
			d.errorAt(p+"."+k, "unknown key %q for %s (known keys: %s)", k, name, strings.Join(keys, ", "))
		}
	}
	for _, k := range []string{"path", "from"} {
		v, ok := op[k]
		if !ok {
			continue
		}
		if s, isStr := v.(string); !isStr || (s != "" && !strings.HasPrefix(s, "/")) || !validPointerEscapes(s) {
			d.errorAt(p+"."+k, "%v is not a JSON Pointer (\"/metadata/annotations/a~1b\")", v)
		}
	}
	if v, ok := op["value"]; ok {
		if _, err := json.Marshal(v); err != nil {
			d.errorAt(p+".value", "not representable as JSON: %v", err)
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

func validateRetry(d *yamlDecoder, r Retry, p string) {
	if r.Attempts < 0 {
		d.errorAt(p+".attempts", "must not be negative")
	}
	if r.InitialBackoff > 0 && r.MaxBackoff > 0 && r.MaxBackoff < r.InitialBackoff {
		d.errorAt(p+".maxBackoff", "%s is less than initialBackoff %s", r.MaxBackoff, r.InitialBackoff)
	}
}
