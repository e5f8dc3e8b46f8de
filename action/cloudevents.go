package action

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/fieldwatch/fieldwatch/rules"
)

// CloudEvents 1.0 (https://github.com/cloudevents/spec, v1.0.2): the
// attributes fieldwatch sets and how they travel. The spec is small enough
// to write out, which keeps the SDK (and its dependencies) out of the
// binary; the tests decode what this file produces with the SDK.
const (
	// CloudEventsSpecVersion is the specversion attribute.
	CloudEventsSpecVersion = "1.0"
	// CloudEventsContentType is the media type of a structured-mode event.
	CloudEventsContentType = "application/cloudevents+json"
	// CloudEventsTypePrefix prefixes the change type in the type
	// attribute: io.fieldwatch.created, .updated, .deleted.
	CloudEventsTypePrefix = "io.fieldwatch."
	// PayloadContentType is the datacontenttype of every event: the
	// payload is JSON.
	PayloadContentType = "application/json"
)

// cloudEvents turns firings into CloudEvents as one action's options say.
type cloudEvents struct {
	mode   string
	byRule bool   // type is the rule's name
	source string // the cluster's URI reference, without a trailing slash
}

// newCloudEvents returns nil for nil options (the action sends the plain
// payload).
func newCloudEvents(spec *rules.CloudEvents) *cloudEvents {
	if spec == nil {
		return nil
	}
	s := spec.WithDefaults()
	return &cloudEvents{
		mode:   s.Mode,
		byRule: s.Type == rules.CloudEventsTypeRule,
		source: strings.TrimSuffix(s.Source, "/"),
	}
}

// binary reports whether the attributes go into protocol headers.
func (c *cloudEvents) binary() bool { return c.mode == rules.CloudEventsBinary }

// ceAttrs are the attributes of one event, in the order of the spec.
type ceAttrs struct {
	id, source, typ, subject, time string
}

// attrs computes the attributes of f's event. The change type and the
// time are the firing's, which are the payload's (rules.Firing): the
// payload is not read. A firing without a time (none that rules.Eval
// builds) gets no time attribute, which is optional.
func (c *cloudEvents) attrs(f *rules.Firing) ceAttrs {
	a := ceAttrs{id: f.ID, source: c.source + resourcePath(f.Object)}
	if !f.Time.IsZero() {
		a.time = f.Time.UTC().Format(rules.TimeFormat)
	}
	if c.byRule && f.Rule != nil {
		a.typ = f.Rule.Name
	} else {
		a.typ = CloudEventsTypePrefix + string(f.Type)
	}
	a.subject = f.Object.Name
	if f.Object.Namespace != "" {
		a.subject = f.Object.Namespace + "/" + f.Object.Name
	}
	return a
}

// resourcePath is the resource's API path, as the apiserver serves it:
// /api/v1/<resource> for the core group, /apis/<group>/<version>/<resource>
// otherwise.
func resourcePath(o rules.ObjectRef) string {
	if o.Group == "" {
		return "/api/" + o.Version + "/" + o.Resource
	}
	return "/apis/" + o.Group + "/" + o.Version + "/" + o.Resource
}

// envelope is a structured-mode event (JSON event format); data is the
// payload as it is.
type envelope struct {
	SpecVersion     string          `json:"specversion"`
	ID              string          `json:"id"`
	Source          string          `json:"source"`
	Type            string          `json:"type"`
	Subject         string          `json:"subject,omitempty"`
	Time            string          `json:"time,omitempty"`
	DataContentType string          `json:"datacontenttype"`
	Data            json.RawMessage `json:"data"`
}

// structured returns the event of f as one JSON document with data as its
// data (the payload, or the body a template rendered from it).
func (c *cloudEvents) structured(f *rules.Firing, data []byte) ([]byte, error) {
	a := c.attrs(f)
	b, err := json.Marshal(envelope{
		SpecVersion: CloudEventsSpecVersion, ID: a.id, Source: a.source, Type: a.typ,
		Subject: a.subject, Time: a.time, DataContentType: PayloadContentType, Data: data,
	})
	if err != nil {
		return nil, fmt.Errorf("cloudevent: %w", err)
	}
	return b, nil
}

// headers calls set with each attribute of f's event as a binary-mode
// header: prefix (ce- for HTTP and NATS, ce_ for Kafka) and the attribute's
// name, the value percent-encoded where the protocol bindings ask for it;
// datacontenttype travels as the content-type header.
func (c *cloudEvents) headers(f *rules.Firing, prefix string, set func(k, v string)) {
	a := c.attrs(f)
	set(prefix+"specversion", CloudEventsSpecVersion)
	set(prefix+"id", headerValue(a.id))
	set(prefix+"source", headerValue(a.source))
	set(prefix+"type", headerValue(a.typ))
	if a.subject != "" {
		set(prefix+"subject", headerValue(a.subject))
	}
	if a.time != "" {
		set(prefix+"time", a.time)
	}
}

// headerValue percent-encodes what the HTTP protocol binding (3.1.3.2)
// says must be: space, ", % and anything outside printable ASCII.
func headerValue(s string) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if b := s[i]; b <= ' ' || b >= 0x7f || b == '"' || b == '%' {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		if b := s[i]; b <= ' ' || b >= 0x7f || b == '"' || b == '%' {
			fmt.Fprintf(&sb, "%%%02X", b)
			continue
		}
		sb.WriteByte(s[i])
	}
	return sb.String()
}
