package rules

import (
	"net"
	"net/mail"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/fieldwatch/fieldwatch/internal/fieldpath"
)

// notifyAction checks the notification action of a (alertmanager, slack,
// teams, pagerduty or email) at field path p; other kinds are left alone.
func (c *compiler) notifyAction(a Action, p string) {
	switch {
	case a.Alertmanager != nil:
		c.alertmanager(a.Alertmanager, p+".alertmanager")
	case a.Slack != nil:
		c.slack(a.Slack, p+".slack")
	case a.Teams != nil:
		c.teams(a.Teams, p+".teams")
	case a.PagerDuty != nil:
		c.pagerduty(a.PagerDuty, p+".pagerduty")
	case a.Email != nil:
		c.email(a.Email, p+".email")
	}
}

// AlertLabels are the labels the alertmanager action sets itself; an
// action's labels may not name them.
var AlertLabels = []string{"alertname", "rule", "cluster", "namespace", "kind", "name", "user", "severity", "id"}

var labelNameRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

func (c *compiler) alertmanager(am *AlertmanagerAction, p string) {
	if len(am.URLs) == 0 {
		c.errorf(p+".urls", "required: one or more Alertmanager URLs, such as http://alertmanager:9093")
	}
	for i, u := range am.URLs {
		c.httpURL(u, fieldpath.Item(p+".urls", i), "put credentials in basicAuth or bearerTokenFile")
	}
	c.severity(am.Severity, p+".severity")
	for k, v := range am.Labels {
		lp := fieldpath.Child(p+".labels", k)
		switch {
		case !labelNameRE.MatchString(k):
			c.errorf(lp, "%q is not a label name: letters, digits and _, not starting with a digit", k)
		case slices.Contains(AlertLabels, k):
			c.errorf(lp, "%q is set by the action itself (%s)", k, strings.Join(AlertLabels, ", "))
		case v == "":
			c.errorf(lp, "an empty value is no label: leave it out")
		}
	}
	if am.BearerTokenFile != "" && am.BasicAuth != nil {
		c.errorf(p+".basicAuth", "at most one of basicAuth and bearerTokenFile")
	}
	if b := am.BasicAuth; b != nil {
		if b.Username == "" {
			c.errorf(p+".basicAuth.username", "required")
		}
		if b.PasswordFile == "" {
			c.errorf(p+".basicAuth.passwordFile", "required: the file that holds the password")
		}
		c.notCredentials(b.PasswordFile, p+".basicAuth.passwordFile")
	}
	if (am.CertFile == "") != (am.KeyFile == "") {
		c.errorf(p+".certFile", "certFile and keyFile go together: set both or neither")
	}
	c.notCredentials(am.BearerTokenFile, p+".bearerTokenFile")
	c.notCredentials(am.CertFile, p+".certFile")
	c.notCredentials(am.KeyFile, p+".keyFile")
	c.retry(am.Retry, p+".retry")
}

// httpURL checks an absolute http or https URL without user info at field
// path p. The URL is never quoted: its path or query may hold a token.
func (c *compiler) httpURL(raw, p, credentials string) {
	u, err := url.Parse(raw)
	switch {
	case raw == "":
		c.errorf(p, "required")
	case err != nil:
		c.errorf(p, "is not a valid URL")
	case (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		c.errorf(p, "must be an absolute http or https URL, not scheme %q with host %q", u.Scheme, u.Host)
	case u.User != nil:
		c.errorf(p, "carries credentials (%s://%s): %s", u.Scheme, u.Host, credentials)
	}
}

func (c *compiler) severity(s, p string) {
	switch s {
	case "", SeverityCritical, SeverityError, SeverityWarning, SeverityInfo:
	default:
		c.errorf(p, "%q is not a severity: use critical, error, warning or info", s)
	}
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// secret checks a secret source at field path p; what names the value in
// errors (a webhook URL, a token).
func (c *compiler) secret(s *Secret, p, what string) {
	if !s.Set() {
		c.errorf(p, "required: %s, from a file ({file: /etc/fieldwatch/...}) or an environment variable ({env: NAME}), never written in the rules file", what)
		return
	}
	if s.File != "" && s.Env != "" {
		c.errorf(p, "exactly one of file and env")
	}
	if s.Env != "" && !envNameRE.MatchString(s.Env) {
		c.errorf(p+".env", "%q is not an environment variable name", s.Env)
	}
	c.notCredentials(s.File, p+".file")
}

func (c *compiler) notify(n *Notify, p string) {
	if g := n.Group; g != nil {
		seen := map[string]bool{}
		for i, by := range g.By {
			switch by {
			case GroupByNamespace, GroupByKind, GroupByUser:
			default:
				c.errorf(fieldpath.Item(p+".group.by", i), "%q is not a group key: use namespace, kind or user (a group is always of one rule)", by)
			}
			if seen[by] {
				c.errorf(fieldpath.Item(p+".group.by", i), "%q is listed twice", by)
			}
			seen[by] = true
		}
		if g.MaxListed < 0 || g.MaxListed > MaxListedLimit {
			c.errorf(p+".group.maxListed", "must be between 0 and %d", MaxListedLimit)
		}
	}
	if r := n.RateLimit; r != nil && r.Burst < 0 {
		c.errorf(p+".rateLimit.burst", "must not be negative")
	}
	c.retry(n.Retry, p+".retry")
}

// MaxListedLimit bounds Group.MaxListed: a message that lists more would
// pass every receiver's size limits.
const MaxListedLimit = 50

func (c *compiler) slack(s *SlackAction, p string) {
	switch {
	case s.WebhookURL != nil && s.Token != nil:
		c.errorf(p, "exactly one of webhookURL (an incoming webhook) and token (chat.postMessage with channel)")
	case s.Token != nil:
		c.secret(s.Token, p+".token", "a bot token (xoxb-...)")
		if s.Channel == "" {
			c.errorf(p+".channel", "required with token: the channel's ID or name, such as C0123456789 or #alerts")
		}
	default:
		c.secret(s.WebhookURL, p+".webhookURL", "the incoming webhook's URL (or token and channel for chat.postMessage)")
		if s.Channel != "" {
			c.errorf(p+".channel", "only with token: an incoming webhook posts to the channel it was made for")
		}
	}
	if s.APIURL != "" {
		c.httpURL(s.APIURL, p+".apiURL", "leave them out")
	}
	c.notCredentials(s.CAFile, p+".caFile")
	c.notify(&s.Notify, p)
}

func (c *compiler) teams(t *TeamsAction, p string) {
	c.secret(t.URL, p+".url", "the workflow's webhook URL")
	c.notCredentials(t.CAFile, p+".caFile")
	c.notify(&t.Notify, p)
}

func (c *compiler) pagerduty(pd *PagerDutyAction, p string) {
	c.secret(pd.RoutingKey, p+".routingKey", "the integration's routing key")
	c.severity(pd.Severity, p+".severity")
	switch pd.EventAction {
	case "", PagerDutyTrigger, PagerDutyResolve:
	default:
		c.errorf(p+".eventAction", "%q is not an event action: use trigger or resolve", pd.EventAction)
	}
	if pd.URL != "" {
		c.httpURL(pd.URL, p+".url", "leave them out")
	}
	c.notCredentials(pd.CAFile, p+".caFile")
	c.notify(&pd.Notify, p)
}

func (c *compiler) email(e *EmailAction, p string) {
	host := ""
	if e.SMTP == "" {
		c.errorf(p+".smtp", "required: the server, host:port (587 for STARTTLS, 465 for TLS)")
	} else if h, _, err := net.SplitHostPort(e.SMTP); err != nil || h == "" || !validHostPort(e.SMTP) {
		c.errorf(p+".smtp", "%q is not host:port", e.SMTP)
	} else {
		host = h
	}
	switch e.TLS {
	case "", EmailSTARTTLS, EmailTLS:
	case EmailNoTLS:
		if ip := net.ParseIP(host); host != "" && host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			c.errorf(p+".tls", "none is for a server on loopback only: %s would see the messages (and a password) in clear", host)
		}
		if e.Password != nil {
			c.errorf(p+".password", "never sent without TLS: use tls: starttls or tls")
		}
	default:
		c.errorf(p+".tls", "%q is not a TLS mode: use starttls, tls or none", e.TLS)
	}
	if _, err := mail.ParseAddress(e.From); err != nil {
		c.errorf(p+".from", "required: a sender address such as fieldwatch@example.com (%v)", err)
	}
	if len(e.To) == 0 {
		c.errorf(p+".to", "required: one or more recipients")
	}
	for i, to := range e.To {
		if _, err := mail.ParseAddress(to); err != nil {
			c.errorf(fieldpath.Item(p+".to", i), "%q is not an address: %v", to, err)
		}
	}
	if strings.ContainsAny(e.Subject, "\r\n") {
		c.errorf(p+".subject", "must be one line")
	}
	if (e.Username == "") != (e.Password == nil) {
		c.errorf(p+".username", "username and password go together: set both or neither")
	}
	if e.Password != nil {
		c.secret(e.Password, p+".password", "the SMTP password")
	}
	c.notCredentials(e.CAFile, p+".caFile")
	c.notify(&e.Notify, p)
}
