package rules

import "time"

// CloudEvents sends a payload as a CloudEvent 1.0. The event's attributes
// are: id the payload's id, type io.fieldwatch.<created|updated|deleted>
// (or the rule's name, with Type "rule"), source Source followed by the
// resource's API path (/apis/<group>/<version>/<resource>, /api/v1/<resource>
// for the core group), subject <namespace>/<name> (<name> for cluster-scoped
// objects), time the payload's time and datacontenttype application/json;
// data is the payload, unchanged.
type CloudEvents struct {
	// Mode is structured (the event as one application/cloudevents+json
	// document, data inside) or binary (the attributes as protocol headers,
	// ce-* for HTTP and NATS, ce_* for Kafka, and the payload as the body).
	// Default structured.
	Mode string `yaml:"mode,omitempty" json:"mode,omitempty"`
	// Type is change (io.fieldwatch.created, .updated, .deleted) or rule
	// (the rule's name). Default change.
	Type string `yaml:"type,omitempty" json:"type,omitempty"`
	// Source is a URI reference naming the cluster, prefixed to the
	// resource's API path in the event's source. Default /fieldwatch.
	Source string `yaml:"source,omitempty" json:"source,omitempty"`
}

// CloudEvents modes, types and defaults.
const (
	CloudEventsStructured    = "structured"
	CloudEventsBinary        = "binary"
	CloudEventsTypeChange    = "change"
	CloudEventsTypeRule      = "rule"
	DefaultCloudEventsSource = "/fieldwatch"
)

// WithDefaults returns c with its empty fields set to the defaults.
func (c CloudEvents) WithDefaults() CloudEvents {
	if c.Mode == "" {
		c.Mode = CloudEventsStructured
	}
	if c.Type == "" {
		c.Type = CloudEventsTypeChange
	}
	if c.Source == "" {
		c.Source = DefaultCloudEventsSource
	}
	return c
}

// NATSAction publishes the payload to a NATS JetStream subject and waits
// for the stream's acknowledgement. The payload's id is the message's
// Nats-Msg-Id, so the stream's duplicate window drops the copies that
// at-least-once delivery may send.
type NATSAction struct {
	// URL is the server, nats://host:port (tls:// for TLS), or several
	// separated by commas. Required.
	URL string `yaml:"url" json:"url"`
	// Subject is a Go text/template over the payload that renders the
	// subject, e.g. fieldwatch.{{.resource.resource}}.{{.type}}. The
	// rendered subject must be a valid subject without wildcards.
	// Required.
	Subject *Template `yaml:"subject" json:"-"`
	// Stream, when set, is the stream the subject must be stored in: a
	// publish that lands elsewhere (or nowhere) fails and is not retried.
	Stream string `yaml:"stream,omitempty" json:"stream,omitempty"`
	// Timeout bounds one publish, acknowledgement included. Default 10s.
	Timeout time.Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	// CredentialsFile is a NATS credentials file (user JWT and nkey seed).
	CredentialsFile string `yaml:"credentialsFile,omitempty" json:"credentialsFile,omitempty"`
	// NKeySeedFile is an nkey seed file, for nkey authentication.
	NKeySeedFile string `yaml:"nkeySeedFile,omitempty" json:"nkeySeedFile,omitempty"`
	// TokenFile and TokenEnv hold a token; at most one of them, and none
	// with CredentialsFile or NKeySeedFile.
	TokenFile string `yaml:"tokenFile,omitempty" json:"tokenFile,omitempty"`
	TokenEnv  string `yaml:"tokenEnv,omitempty" json:"tokenEnv,omitempty"`
	// CAFile is a PEM bundle trusted for the server's certificate;
	// CertFile and KeyFile a client certificate (both or neither).
	CAFile   string `yaml:"caFile,omitempty" json:"caFile,omitempty"`
	CertFile string `yaml:"certFile,omitempty" json:"certFile,omitempty"`
	KeyFile  string `yaml:"keyFile,omitempty" json:"keyFile,omitempty"`
	// CloudEvents, when set, sends the payload as a CloudEvent (NATS
	// protocol binding).
	CloudEvents *CloudEvents `yaml:"cloudEvents,omitempty" json:"cloudEvents,omitempty"`
	// Retry bounds retries of publishes that were not acknowledged.
	Retry Retry `yaml:"retry,omitempty" json:"retry,omitempty"`
}

// DefaultNATSTimeout is used when NATSAction.Timeout is zero.
const DefaultNATSTimeout = 10 * time.Second

// KafkaAction produces the payload as a record to a Kafka topic with an
// idempotent producer and acks from all in-sync replicas. The record's key
// is the object's uid, so that one object's changes stay in one partition,
// in order; the payload's id is in the record header fieldwatch-id.
type KafkaAction struct {
	// Brokers are the seed brokers, host:port. Required.
	Brokers []string `yaml:"brokers" json:"brokers"`
	// Topic is a Go text/template over the payload that renders the topic,
	// e.g. fieldwatch.{{.resource.resource}}. The rendered topic must be a
	// valid Kafka topic name. Required.
	Topic *Template `yaml:"topic" json:"-"`
	// Timeout bounds one produce, acknowledgement included. Default 10s.
	Timeout time.Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	// SASL authenticates to the brokers.
	SASL *KafkaSASL `yaml:"sasl,omitempty" json:"sasl,omitempty"`
	// TLS connects with TLS; CAFile, CertFile and KeyFile imply it.
	TLS bool `yaml:"tls,omitempty" json:"tls,omitempty"`
	// CAFile is a PEM bundle trusted for the brokers' certificates;
	// CertFile and KeyFile a client certificate (both or neither).
	CAFile   string `yaml:"caFile,omitempty" json:"caFile,omitempty"`
	CertFile string `yaml:"certFile,omitempty" json:"certFile,omitempty"`
	KeyFile  string `yaml:"keyFile,omitempty" json:"keyFile,omitempty"`
	// CloudEvents, when set, sends the payload as a CloudEvent (Kafka
	// protocol binding).
	CloudEvents *CloudEvents `yaml:"cloudEvents,omitempty" json:"cloudEvents,omitempty"`
	// Retry bounds retries of records that were not acknowledged.
	Retry Retry `yaml:"retry,omitempty" json:"retry,omitempty"`
}

// DefaultKafkaTimeout is used when KafkaAction.Timeout is zero.
const DefaultKafkaTimeout = 10 * time.Second

// KafkaSASL is a Kafka action's SASL authentication. The password comes
// from exactly one of PasswordFile and PasswordEnv, never from the rules
// file.
type KafkaSASL struct {
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512. Required.
	Mechanism string `yaml:"mechanism" json:"mechanism"`
	// Username is required.
	Username     string `yaml:"username" json:"username"`
	PasswordFile string `yaml:"passwordFile,omitempty" json:"passwordFile,omitempty"`
	PasswordEnv  string `yaml:"passwordEnv,omitempty" json:"passwordEnv,omitempty"`
}

// SASL mechanisms of the Kafka action.
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
)
