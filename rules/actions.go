package rules

import (
	"time"

	"github.com/fieldwatch/fieldwatch/change"
)

// Action is one entry of a rule's actions list. Exactly one kind field is
// set. The loader validates every field at load time, so a compiled Action
// is complete: package action never has to second-guess it.
type Action struct {
	Log          *LogAction          `yaml:"log,omitempty" json:"log,omitempty"`
	Webhook      *WebhookAction      `yaml:"webhook,omitempty" json:"webhook,omitempty"`
	Exec         *ExecAction         `yaml:"exec,omitempty" json:"exec,omitempty"`
	Event        *EventAction        `yaml:"event,omitempty" json:"event,omitempty"`
	Patch        *PatchAction        `yaml:"patch,omitempty" json:"patch,omitempty"`
	NATS         *NATSAction         `yaml:"nats,omitempty" json:"nats,omitempty"`
	Kafka        *KafkaAction        `yaml:"kafka,omitempty" json:"kafka,omitempty"`
	Alertmanager *AlertmanagerAction `yaml:"alertmanager,omitempty" json:"alertmanager,omitempty"`
	Slack        *SlackAction        `yaml:"slack,omitempty" json:"slack,omitempty"`
	Teams        *TeamsAction        `yaml:"teams,omitempty" json:"teams,omitempty"`
	PagerDuty    *PagerDutyAction    `yaml:"pagerduty,omitempty" json:"pagerduty,omitempty"`
	Email        *EmailAction        `yaml:"email,omitempty" json:"email,omitempty"`
	// When routes: a CEL expression over the change (route.go) that must
	// be true for this action to get the firing; "" means always.
	When Expression `yaml:"when,omitempty" json:"when,omitempty"`

	when *celExpr // When, compiled
}

// Kind returns the name of the action's kind: log, webhook, exec, event,
// patch, nats, kafka, alertmanager, slack, teams, pagerduty or email (""
// for an empty Action).
func (a Action) Kind() string {
	switch {
	case a.Log != nil:
		return "log"
	case a.Webhook != nil:
		return "webhook"
	case a.Exec != nil:
		return "exec"
	case a.Event != nil:
		return "event"
	case a.Patch != nil:
		return "patch"
	case a.NATS != nil:
		return "nats"
	case a.Kafka != nil:
		return "kafka"
	case a.Alertmanager != nil:
		return "alertmanager"
	case a.Slack != nil:
		return "slack"
	case a.Teams != nil:
		return "teams"
	case a.PagerDuty != nil:
		return "pagerduty"
	case a.Email != nil:
		return "email"
	}
	return ""
}

// Retry bounds how a failed delivery is retried. Zero fields take the
// defaults below; the loader rejects negative values.
type Retry struct {
	// Attempts is the total number of tries, the first included. Default 8.
	Attempts int `yaml:"attempts,omitempty" json:"attempts,omitempty"`
	// InitialBackoff is the wait after the first failure; it doubles with
	// jitter after each further one. Default 500ms.
	InitialBackoff time.Duration `yaml:"initialBackoff,omitempty" json:"initialBackoff,omitempty"`
	// MaxBackoff caps one wait (a Retry-After header is honoured up to it).
	// Default 1m.
	MaxBackoff time.Duration `yaml:"maxBackoff,omitempty" json:"maxBackoff,omitempty"`
}

// Retry defaults.
const (
	DefaultAttempts       = 8
	DefaultInitialBackoff = 500 * time.Millisecond
	DefaultMaxBackoff     = time.Minute
)

// WithDefaults returns r with its zero fields set to the defaults.
func (r Retry) WithDefaults() Retry {
	if r.Attempts == 0 {
		r.Attempts = DefaultAttempts
	}
	if r.InitialBackoff == 0 {
		r.InitialBackoff = DefaultInitialBackoff
	}
	if r.MaxBackoff == 0 {
		r.MaxBackoff = DefaultMaxBackoff
	}
	return r
}

// LogAction writes the payload as one JSON line on stdout, or appended to
// File (reopened on SIGHUP, so log rotation works).
type LogAction struct {
	File string `yaml:"file,omitempty" json:"file,omitempty"`
}

// WebhookAction POSTs the payload (Content-Type: application/json) to URL.
type WebhookAction struct {
	// URL is an absolute http or https URL. Required.
	URL string `yaml:"url" json:"url"`
	// Timeout bounds one request. Default 10s.
	Timeout time.Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	// Headers are added to every request.
	Headers map[string]string `yaml:"headers,omitempty" json:"headers,omitempty"`
	// BearerTokenFile holds a token sent as "Authorization: Bearer <token>".
	// It is re-read when it changes (service-account tokens rotate).
	BearerTokenFile string `yaml:"bearerTokenFile,omitempty" json:"bearerTokenFile,omitempty"`
	// CAFile is a PEM bundle trusted for the receiver's certificate, in
	// addition to the system roots. It is re-read when it changes.
	CAFile string `yaml:"caFile,omitempty" json:"caFile,omitempty"`
	// CertFile and KeyFile are a client certificate; both or neither.
	// They are re-read when they change.
	CertFile string `yaml:"certFile,omitempty" json:"certFile,omitempty"`
	KeyFile  string `yaml:"keyFile,omitempty" json:"keyFile,omitempty"`
	// Signing adds an HMAC-SHA256 signature of the body.
	Signing *Signing `yaml:"signing,omitempty" json:"signing,omitempty"`
	// Retry bounds retries of failed requests.
	Retry Retry `yaml:"retry,omitempty" json:"retry,omitempty"`
	// Template, when set, renders the request body from the payload (Go
	// text/template over the payload decoded as JSON); the result must be
	// valid JSON. Compiled at load time.
	Template *Template `yaml:"template,omitempty" json:"-"`
	// CloudEvents, when set, sends the payload as a CloudEvent (HTTP
	// protocol binding): in structured mode as the data of an
	// application/cloudevents+json envelope, in binary mode as the body
	// with the attributes in ce-* headers.
	CloudEvents *CloudEvents `yaml:"cloudEvents,omitempty" json:"cloudEvents,omitempty"`
}

// DefaultWebhookTimeout is used when WebhookAction.Timeout is zero.
const DefaultWebhookTimeout = 10 * time.Second

// Signing configures the webhook signature header. The secret comes from
// exactly one of SecretFile and SecretEnv.
type Signing struct {
	SecretFile string `yaml:"secretFile,omitempty" json:"secretFile,omitempty"`
	SecretEnv  string `yaml:"secretEnv,omitempty" json:"secretEnv,omitempty"`
	// Header names the signature header. Default X-Fieldwatch-Signature.
	Header string `yaml:"header,omitempty" json:"header,omitempty"`
}

// DefaultSignatureHeader is used when Signing.Header is empty.
const DefaultSignatureHeader = "X-Fieldwatch-Signature"

// ExecAction runs Command (argv, no shell) with the payload on stdin.
type ExecAction struct {
	// Command is the program and its arguments. Required, non-empty.
	Command []string `yaml:"command" json:"command"`
	// Env adds variables to the process environment.
	Env map[string]string `yaml:"env,omitempty" json:"env,omitempty"`
	// Timeout kills the process group after this long. Default 30s.
	Timeout time.Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	// Retry bounds retries of failed runs (non-zero exit, timeout).
	Retry Retry `yaml:"retry,omitempty" json:"retry,omitempty"`
}

// DefaultExecTimeout is used when ExecAction.Timeout is zero.
const DefaultExecTimeout = 30 * time.Second

// EventAction records an events.k8s.io/v1 Event regarding the object.
type EventAction struct {
	// Reason is a short UpperCamelCase reason. Required.
	Reason string `yaml:"reason" json:"reason"`
	// Type is Normal or Warning. Default Normal.
	Type string `yaml:"type,omitempty" json:"type,omitempty"`
	// Note is the human-readable message; a Go text/template over the
	// payload. Default: "<rule>: <type> <path>: <old> -> <new>, ...".
	Note *Template `yaml:"note,omitempty" json:"-"`
	// Retry bounds retries of failed writes.
	Retry Retry `yaml:"retry,omitempty" json:"retry,omitempty"`
}

// PatchAction patches the object the change is about, guarded by its UID.
// Exactly one of Merge and JSON is set.
type PatchAction struct {
	// Merge is an RFC 7386 JSON merge patch.
	Merge map[string]any `yaml:"merge,omitempty" json:"merge,omitempty"`
	// JSON is an RFC 6902 JSON patch.
	JSON []map[string]any `yaml:"json,omitempty" json:"json,omitempty"`
	// Subresource is "" or "status".
	Subresource string `yaml:"subresource,omitempty" json:"subresource,omitempty"`
	// Retry bounds retries of failed patches (conflicts are always retried
	// within the budget).
	Retry Retry `yaml:"retry,omitempty" json:"retry,omitempty"`
}

// Firing is one rule firing on one change: the payload every action of the
// rule receives, and what the event and patch actions need to address the
// object without parsing the payload.
type Firing struct {
	// ID is the payload's id, "<uid>/<resourceVersion>/<rule>": stable for
	// the same change, so receivers can drop duplicates.
	ID string
	// Rule is the compiled rule that fired; its Actions are what to run.
	Rule *Rule
	// Payload is the JSON payload (docs/payload.md).
	Payload []byte
	// Skipped are the indices of Rule.Actions whose when is false (or
	// failed) for this firing, in order: they do not get it. nil: every
	// action does.
	Skipped []int
	// Object addresses the object the change is about.
	Object ObjectRef
	// Time, Type, User, Impersonated, Manager and Cluster are the
	// payload's "time" (as written: UTC, to the microsecond), "type", the
	// actor's user and impersonated user's usernames and manager, and
	// "cluster" ("" when the payload has none), for those that would read
	// them back from the payload (the history).
	Time                        time.Time
	Type                        change.Type
	User, Impersonated, Manager string
	Cluster                     string
}

// ObjectRef addresses one object of one resource.
type ObjectRef struct {
	Group           string
	Version         string
	Resource        string
	Kind            string
	Namespace       string
	Name            string
	UID             string
	ResourceVersion string
}
