package action

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/fieldwatch/fieldwatch/payload"
	"github.com/fieldwatch/fieldwatch/rules"
)

// pagerduty sends an event to PagerDuty's Events API v2 for each group
// (each firing, unless the action groups).
type pagerduty struct {
	spec    *rules.PagerDutyAction
	clients *httpClients
	tls     tlsFiles
	key     *secretValue
	url     string
	sev     string
	action  string
	source  string
	timeout time.Duration
}

var _ notifier = &pagerduty{}

// PagerDuty's limits: a summary of 1,024 characters, an event of 512 KB.
const (
	pdSummaryMax = 1024
	pdMaxBytes   = 256 << 10
)

func newPagerDuty(spec *rules.PagerDutyAction, clients *httpClients, cluster string) *pagerduty {
	p := &pagerduty{
		spec: spec, clients: clients, tls: tlsFiles{ca: spec.CAFile}, key: newSecret(spec.RoutingKey),
		url: spec.URL, sev: spec.Severity, action: spec.EventAction, source: cluster, timeout: spec.Timeout,
	}
	if p.url == "" {
		p.url = rules.DefaultPagerDutyURL
	}
	if p.sev == "" {
		p.sev = rules.DefaultSeverity
	}
	if p.action == "" {
		p.action = rules.PagerDutyTrigger
	}
	if p.source == "" {
		p.source = "fieldwatch"
	}
	if p.timeout <= 0 {
		p.timeout = rules.DefaultWebhookTimeout
	}
	return p
}

// pdEvent is an Events API v2 event.
type pdEvent struct {
	RoutingKey  string     `json:"routing_key"`
	EventAction string     `json:"event_action"`
	DedupKey    string     `json:"dedup_key"`
	Payload     *pdPayload `json:"payload,omitempty"`
	Links       []pdLink   `json:"links,omitempty"`
	Client      string     `json:"client,omitempty"`
	ClientURL   string     `json:"client_url,omitempty"`
}

type pdPayload struct {
	Summary       string         `json:"summary"`
	Source        string         `json:"source"`
	Severity      string         `json:"severity"`
	Timestamp     string         `json:"timestamp,omitempty"`
	Component     string         `json:"component,omitempty"`
	Group         string         `json:"group,omitempty"`
	Class         string         `json:"class,omitempty"`
	CustomDetails map[string]any `json:"custom_details,omitempty"`
}

type pdLink struct {
	Href string `json:"href"`
	Text string `json:"text"`
}

// pdEventOf builds the event of d; key is the routing key. The dedup_key
// is the DedupKey template's rendering of the group's first payload, or
// that payload's id.
func (p *pagerduty) eventOf(d *digest, key string) ([]byte, error) {
	first := d.Items[0]
	dedup := first.f.ID
	if p.spec.DedupKey != nil {
		out, err := p.spec.DedupKey.Render(first.f.Payload)
		if err != nil {
			return nil, permanent(fmt.Errorf("render dedupKey: %w", err))
		}
		dedup = string(out)
	}
	ev := pdEvent{RoutingKey: key, EventAction: p.action, DedupKey: truncateBytes(dedup, 255)}
	if p.action == rules.PagerDutyResolve {
		return json.Marshal(ev)
	}
	ev.Client = "fieldwatch"
	ev.ClientURL = d.Link
	pl := &pdPayload{
		Summary: truncateRunes(d.Summary, pdSummaryMax), Source: p.source, Severity: p.sev,
		Timestamp: d.Time.UTC().Format(payload.TimeFormat), Class: d.Rule,
		Component: first.f.Object.Kind, Group: first.f.Object.Namespace,
	}
	ev.Payload = pl
	if d.Link != "" {
		ev.Links = append(ev.Links, pdLink{Href: d.Link, Text: "fieldwatch history"})
	}
	for {
		objects := make([]map[string]any, 0, len(d.Entries))
		for _, e := range d.Entries {
			o := map[string]any{"object": e.Title, "id": e.ID}
			var changes []string
			for _, c := range e.Changes {
				changes = append(changes, c.text())
			}
			if len(changes) > 0 {
				o["changes"] = changes
			}
			if e.MoreChanges > 0 {
				o["moreChanges"] = e.MoreChanges
			}
			if e.CRD != "" {
				o["crd"] = e.CRD
			}
			if e.Link != "" {
				o["history"] = e.Link
			}
			objects = append(objects, o)
		}
		pl.CustomDetails = map[string]any{"rule": d.Rule, "count": d.Total, "objects": objects}
		if d.More > 0 {
			pl.CustomDetails["more"] = d.MoreLine()
		}
		b, err := json.Marshal(ev)
		if err != nil || len(b) <= pdMaxBytes || len(d.Entries) == 0 {
			return b, err
		}
		d.drop(len(d.Entries) - 1)
	}
}

func (p *pagerduty) send(ctx context.Context, d *digest) error {
	key, err := p.key.get()
	if err != nil {
		return fmt.Errorf("pagerduty routing key: %w", err)
	}
	body, err := p.eventOf(d, key)
	if err != nil {
		return err
	}
	client, err := p.clients.get(p.tls)
	if err != nil {
		return err
	}
	_, err = postJSON(ctx, client, p.url, p.timeout, body, nil)
	return err
}
