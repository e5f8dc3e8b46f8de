package rules

import (
	"net/url"
	"regexp"
	"strings"

	"github.com/fieldwatch/fieldwatch/internal/fieldpath"
)

// cloudEvents checks a cloudEvents block at field path p; nil is fine.
func (c *compiler) cloudEvents(ce *CloudEvents, p string) {
	if ce == nil {
		return
	}
	if ce.Mode != "" && ce.Mode != CloudEventsStructured && ce.Mode != CloudEventsBinary {
		c.errorf(p+".mode", "%q is not a CloudEvents mode: use structured or binary", ce.Mode)
	}
	if ce.Type != "" && ce.Type != CloudEventsTypeChange && ce.Type != CloudEventsTypeRule {
		c.errorf(p+".type", "%q is not a CloudEvents type choice: use change (io.fieldwatch.created, .updated, .deleted) or rule (the rule's name)", ce.Type)
	}
	if ce.Source != "" {
		if _, err := url.Parse(ce.Source); err != nil || strings.ContainsAny(ce.Source, " \t\n") {
			c.errorf(p+".source", "%q is not a URI reference", ce.Source)
		}
	}
}

func (c *compiler) nats(n *NATSAction, p string) {
	if n.URL == "" {
		c.errorf(p+".url", "required: nats://host:4222, or several separated by commas")
	}
	for i, s := range strings.Split(n.URL, ",") {
		if n.URL == "" {
			break
		}
		// Neither the URL nor its user part is quoted: nats://TOKEN@host
		// is how a token is written into one, and this error reaches the
		// log of a failed reload.
		u, err := url.Parse(strings.TrimSpace(s))
		switch {
		case err != nil:
			c.errorf(p+".url", "server %d is not a valid URL", i+1)
		case (u.Scheme != "nats" && u.Scheme != "tls") || u.Host == "":
			c.errorf(p+".url", "server %d must be a nats:// or tls:// URL with a host, not scheme %q with host %q", i+1, u.Scheme, u.Host)
		case u.User != nil:
			c.errorf(p+".url", "server %d (%s://%s) carries credentials: put them in credentialsFile, nkeySeedFile, tokenFile or tokenEnv", i+1, u.Scheme, u.Host)
		}
	}
	if n.Subject == nil && !c.hasError(p+".subject") {
		c.errorf(p+".subject", "required: a subject template such as fieldwatch.{{.resource.resource}}.{{.type}}")
	}
	if n.Stream != "" && !natsName.MatchString(n.Stream) {
		c.errorf(p+".stream", "%q is not a stream name (no spaces, dots, * or >)", n.Stream)
	}
	auth := 0
	for _, set := range []bool{n.CredentialsFile != "", n.NKeySeedFile != "", n.TokenFile != "", n.TokenEnv != ""} {
		if set {
			auth++
		}
	}
	if auth > 1 {
		c.errorf(p, "at most one of credentialsFile, nkeySeedFile, tokenFile and tokenEnv")
	}
	if (n.CertFile == "") != (n.KeyFile == "") {
		c.errorf(p+".certFile", "certFile and keyFile go together: set both or neither")
	}
	c.notCredentials(n.CredentialsFile, p+".credentialsFile")
	c.notCredentials(n.NKeySeedFile, p+".nkeySeedFile")
	c.notCredentials(n.TokenFile, p+".tokenFile")
	c.notCredentials(n.CertFile, p+".certFile")
	c.notCredentials(n.KeyFile, p+".keyFile")
	c.cloudEvents(n.CloudEvents, p+".cloudEvents")
	c.retry(n.Retry, p+".retry")
}

// natsName is what a JetStream stream name may be.
var natsName = regexp.MustCompile(`^[^\s.*>/\\]+$`)

func (c *compiler) kafka(k *KafkaAction, p string) {
	if len(k.Brokers) == 0 {
		c.errorf(p+".brokers", "required: at least one host:port")
	}
	for i, b := range k.Brokers {
		if !validHostPort(b) {
			c.errorf(fieldpath.Item(p+".brokers", i), "%q is not host:port", b)
		}
	}
	if k.Topic == nil && !c.hasError(p+".topic") {
		c.errorf(p+".topic", "required: a topic template such as fieldwatch.{{.resource.resource}}")
	}
	if s := k.SASL; s != nil {
		switch s.Mechanism {
		case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		case "":
			c.errorf(p+".sasl.mechanism", "required: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
		default:
			c.errorf(p+".sasl.mechanism", "%q is not a SASL mechanism: use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", s.Mechanism)
		}
		if s.Username == "" {
			c.errorf(p+".sasl.username", "required")
		}
		if (s.PasswordFile == "") == (s.PasswordEnv == "") {
			c.errorf(p+".sasl", "exactly one of passwordFile and passwordEnv is required")
		}
		c.notCredentials(s.PasswordFile, p+".sasl.passwordFile")
	}
	if (k.CertFile == "") != (k.KeyFile == "") {
		c.errorf(p+".certFile", "certFile and keyFile go together: set both or neither")
	}
	c.notCredentials(k.CertFile, p+".certFile")
	c.notCredentials(k.KeyFile, p+".keyFile")
	c.cloudEvents(k.CloudEvents, p+".cloudEvents")
	c.retry(k.Retry, p+".retry")
}

// validHostPort reports whether s is host:port with a port number.
func validHostPort(s string) bool {
	i := strings.LastIndexByte(s, ':')
	if i <= 0 || i == len(s)-1 {
		return false
	}
	for _, r := range s[i+1:] {
		if r < '0' || r > '9' {
			return false
		}
	}
	return !strings.ContainsAny(s, " /\t")
}

// hasError reports whether an error was already recorded at field path p.
func (c *compiler) hasError(p string) bool {
	for _, e := range c.errs {
		if e.Path == p {
			return true
		}
	}
	return false
}
