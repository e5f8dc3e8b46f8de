package rules

import "time"

// The notification actions: alertmanager hands firings to Prometheus
// Alertmanager, which groups, silences and routes them; slack, teams,
// pagerduty and email send messages themselves, grouped and rate-limited
// per action (Group, RateLimit). docs/notify.md shows each message.
// Secrets (webhook URLs, tokens, routing keys, passwords) come from files
// or environment variables, never from the rules file: they would land in
// every copy of it.

// Severity levels of alertmanager and pagerduty actions (PagerDuty's
// four; Alertmanager takes any string, these are what its routes
// usually match).
const (
	SeverityCritical = "critical"
	SeverityError    = "error"
	SeverityWarning  = "warning"
	SeverityInfo     = "info"
	// DefaultSeverity is the severity of an action that names none.
	DefaultSeverity = SeverityWarning
)

// Secret is a value read from a file (re-read when it changes) or an
// environment variable, surrounding white space trimmed: exactly one of
// File and Env.
type Secret struct {
	File string `yaml:"file,omitempty" json:"file,omitempty"`
	Env  string `yaml:"env,omitempty" json:"env,omitempty"`
}

// Set reports whether s names a source.
func (s *Secret) Set() bool { return s != nil && (s.File != "" || s.Env != "") }

// BasicAuth is HTTP basic authentication with the password from a file.
type BasicAuth struct {
	// Username is required.
	Username string `yaml:"username" json:"username"`
	// PasswordFile holds the password. Required.
	PasswordFile string `yaml:"passwordFile" json:"passwordFile"`
}

// AlertmanagerAction posts each firing as an alert to Alertmanager's API
// v2 (POST /api/v2/alerts) of every URL: an HA pair gets every alert, as
// Prometheus sends them, and a firing is delivered when one of them
// accepted it. The alert's labels are alertname and rule (the rule's
// name), cluster (--cluster-name), namespace, kind, name, user (who made
// the change, when known), severity and id (the payload's id), with
// Labels added; its annotations a one-line summary, the changes (at most
// MaxAnnotationBytes) and, with --external-url, a link to the object's
// history. startsAt is the change's time and endsAt ResolveAfter later
// (from when it is sent, if that is later): a change is a one-shot event,
// its alert resolves by itself.
type AlertmanagerAction struct {
	// URLs are Alertmanager's base URLs (http or https, e.g.
	// http://alertmanager:9093); /api/v2/alerts is appended to the
	// path. Required: one or more.
	URLs []string `yaml:"urls" json:"urls"`
	// Severity is the severity label: critical, error, warning or info.
	// Default warning.
	Severity string `yaml:"severity,omitempty" json:"severity,omitempty"`
	// Labels are added to every alert (they cannot replace the labels
	// above). Names must be valid Prometheus label names.
	Labels map[string]string `yaml:"labels,omitempty" json:"labels,omitempty"`
	// ResolveAfter is how long an alert fires before it resolves by
	// itself. Default 5m.
	ResolveAfter time.Duration `yaml:"resolveAfter,omitempty" json:"resolveAfter,omitempty"`
	// Timeout bounds one request to one Alertmanager. Default 10s.
	Timeout time.Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	// BearerTokenFile holds a token sent as "Authorization: Bearer";
	// BasicAuth basic authentication instead (at most one of the two).
	BearerTokenFile string     `yaml:"bearerTokenFile,omitempty" json:"bearerTokenFile,omitempty"`
	BasicAuth       *BasicAuth `yaml:"basicAuth,omitempty" json:"basicAuth,omitempty"`
	// CAFile, CertFile and KeyFile are as the webhook's.
	CAFile   string `yaml:"caFile,omitempty" json:"caFile,omitempty"`
	CertFile string `yaml:"certFile,omitempty" json:"certFile,omitempty"`
	KeyFile  string `yaml:"keyFile,omitempty" json:"keyFile,omitempty"`
	// Retry bounds retries when no Alertmanager accepted an alert.
	Retry Retry `yaml:"retry,omitempty" json:"retry,omitempty"`
}

// Alertmanager action defaults.
const (
	DefaultResolveAfter = 5 * time.Minute
	// MaxAnnotationBytes bounds the changes annotation of an alert.
	MaxAnnotationBytes = 4096
)

// Group sends the firings of one action that come within Window of the
// first as one message: firings of the same rule (one action belongs to
// one rule), and, with By, of the same namespace, kind or user. A message
// lists MaxListed firings and counts the rest ("and 12 more"). Every
// firing of a group is delivered when its message is, and each is in the
// history.
type Group struct {
	// Window is how long a group collects firings after its first.
	// Default 30s for slack, teams and email; a pagerduty action groups
	// only when it is set.
	Window time.Duration `yaml:"window,omitempty" json:"window,omitempty"`
	// By splits groups further: any of namespace, kind and user.
	By []string `yaml:"by,omitempty" json:"by,omitempty"`
	// MaxListed is how many firings a message lists; the others are
	// counted. Default 10.
	MaxListed int `yaml:"maxListed,omitempty" json:"maxListed,omitempty"`
}

// Group defaults and keys.
const (
	DefaultGroupWindow = 30 * time.Second
	DefaultMaxListed   = 10
	GroupByNamespace   = "namespace"
	GroupByKind        = "kind"
	GroupByUser        = "user"
)

// RateLimit bounds the messages one action sends: at most Burst at once,
// then one every Every. A message over the limit waits, collecting more
// firings into its group meanwhile; none is dropped.
type RateLimit struct {
	// Every is the sustained interval between messages. Default per
	// kind: 1s for slack and teams, 500ms for pagerduty (its Events API
	// takes 120 a minute), 10s for email.
	Every time.Duration `yaml:"every,omitempty" json:"every,omitempty"`
	// Burst is how many messages may go at once. Default 3.
	Burst int `yaml:"burst,omitempty" json:"burst,omitempty"`
}

// DefaultRateBurst is RateLimit.Burst's default.
const DefaultRateBurst = 3

// Notify is what the direct receivers (slack, teams, pagerduty, email)
// share: grouping, the rate limit, the timeout of one send and retries.
type Notify struct {
	// Group groups firings into messages (see Group).
	Group *Group `yaml:"group,omitempty" json:"group,omitempty"`
	// RateLimit bounds the messages sent (see RateLimit).
	RateLimit *RateLimit `yaml:"rateLimit,omitempty" json:"rateLimit,omitempty"`
	// Timeout bounds one send. Default 10s (30s for email).
	Timeout time.Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	// Retry bounds retries of a message that failed; a 429's
	// Retry-After is honoured.
	Retry Retry `yaml:"retry,omitempty" json:"retry,omitempty"`
}

// SlackAction posts a Block Kit message to Slack: through an incoming
// webhook (WebhookURL), or with chat.postMessage (Token and Channel).
type SlackAction struct {
	// WebhookURL is an incoming webhook's URL, from a file or an
	// environment variable. Exactly one of WebhookURL and Token.
	WebhookURL *Secret `yaml:"webhookURL,omitempty" json:"webhookURL,omitempty"`
	// Token is a bot token (xoxb-...) for chat.postMessage; Channel is
	// then required.
	Token   *Secret `yaml:"token,omitempty" json:"token,omitempty"`
	Channel string  `yaml:"channel,omitempty" json:"channel,omitempty"`
	// APIURL is chat.postMessage's URL. Default
	// https://slack.com/api/chat.postMessage.
	APIURL string `yaml:"apiURL,omitempty" json:"apiURL,omitempty"`
	// CAFile is as the webhook's.
	CAFile string `yaml:"caFile,omitempty" json:"caFile,omitempty"`
	Notify `yaml:",inline"`
}

// DefaultSlackAPIURL is SlackAction.APIURL's default.
const DefaultSlackAPIURL = "https://slack.com/api/chat.postMessage"

// TeamsAction posts an Adaptive Card to a Microsoft Teams Workflows
// webhook (the "Post to a channel when a webhook request is received"
// template).
type TeamsAction struct {
	// URL is the workflow's URL, from a file or an environment variable.
	// Required.
	URL *Secret `yaml:"url" json:"url"`
	// CAFile is as the webhook's.
	CAFile string `yaml:"caFile,omitempty" json:"caFile,omitempty"`
	Notify `yaml:",inline"`
}

// PagerDutyAction sends events to PagerDuty's Events API v2.
type PagerDutyAction struct {
	// RoutingKey is the integration's key, from a file or an
	// environment variable. Required.
	RoutingKey *Secret `yaml:"routingKey" json:"routingKey"`
	// Severity is critical, error, warning or info. Default warning.
	Severity string `yaml:"severity,omitempty" json:"severity,omitempty"`
	// EventAction is trigger (default) or resolve: a rule that sees a
	// problem go away resolves the alert a rule that saw it come
	// triggered, when both render the same DedupKey.
	EventAction string `yaml:"eventAction,omitempty" json:"eventAction,omitempty"`
	// DedupKey is a template over the payload rendering the event's
	// dedup_key. Default the payload's id (the first of a group's).
	DedupKey *Template `yaml:"dedupKey,omitempty" json:"-"`
	// URL is the Events API's URL. Default
	// https://events.pagerduty.com/v2/enqueue.
	URL string `yaml:"url,omitempty" json:"url,omitempty"`
	// CAFile is as the webhook's.
	CAFile string `yaml:"caFile,omitempty" json:"caFile,omitempty"`
	Notify `yaml:",inline"`
}

// PagerDuty action values and defaults.
const (
	PagerDutyTrigger    = "trigger"
	PagerDutyResolve    = "resolve"
	DefaultPagerDutyURL = "https://events.pagerduty.com/v2/enqueue"
)

// EmailAction sends one email per group through an SMTP server, with a
// plain-text and an HTML part.
type EmailAction struct {
	// SMTP is the server, host:port. Required.
	SMTP string `yaml:"smtp" json:"smtp"`
	// TLS is starttls (default: the server must offer STARTTLS), tls
	// (implicit TLS, port 465) or none (loopback servers only).
	TLS string `yaml:"tls,omitempty" json:"tls,omitempty"`
	// From is the sender address. Required.
	From string `yaml:"from" json:"from"`
	// To are the recipients. Required: one or more.
	To []string `yaml:"to" json:"to"`
	// Subject prefixes the subject line. Default "[fieldwatch]".
	Subject string `yaml:"subject,omitempty" json:"subject,omitempty"`
	// Username and Password authenticate (AUTH PLAIN), over TLS only.
	Username string  `yaml:"username,omitempty" json:"username,omitempty"`
	Password *Secret `yaml:"password,omitempty" json:"password,omitempty"`
	// CAFile is a PEM bundle trusted for the server's certificate.
	CAFile string `yaml:"caFile,omitempty" json:"caFile,omitempty"`
	Notify `yaml:",inline"`
}

// Email TLS modes.
const (
	EmailSTARTTLS = "starttls"
	EmailTLS      = "tls"
	EmailNoTLS    = "none"
)
