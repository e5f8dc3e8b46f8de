package action

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/fieldwatch/fieldwatch/rules"
)

// teams posts an Adaptive Card for each group to a Microsoft Teams
// Workflows webhook.
type teams struct {
	clients *httpClients
	tls     tlsFiles
	url     *secretValue
	timeout time.Duration
}

var _ notifier = &teams{}

// teamsMaxBytes bounds a card's message: Teams takes about 28 KB, the
// envelope and the encoding of the request included.
const teamsMaxBytes = 24 << 10

func newTeams(spec *rules.TeamsAction, clients *httpClients) *teams {
	t := &teams{clients: clients, tls: tlsFiles{ca: spec.CAFile}, url: newSecret(spec.URL), timeout: spec.Timeout}
	if t.timeout <= 0 {
		t.timeout = rules.DefaultWebhookTimeout
	}
	return t
}

// teamsMessage is what a Workflows webhook takes: a message with one
// Adaptive Card attachment.
type teamsMessage struct {
	Type        string            `json:"type"`
	Attachments []teamsAttachment `json:"attachments"`
}

type teamsAttachment struct {
	ContentType string       `json:"contentType"`
	ContentURL  *string      `json:"contentUrl"`
	Content     adaptiveCard `json:"content"`
}

type adaptiveCard struct {
	Schema  string     `json:"$schema"`
	Type    string     `json:"type"`
	Version string     `json:"version"`
	Body    []cardItem `json:"body"`
	Actions []cardItem `json:"actions,omitempty"`
	MSTeams struct {
		Width string `json:"width"`
	} `json:"msteams"`
}

// cardItem is a TextBlock, a FactSet, a Container or an Action.OpenUrl:
// the fields each uses.
type cardItem struct {
	Type      string     `json:"type"`
	Text      string     `json:"text,omitempty"`
	Weight    string     `json:"weight,omitempty"`
	Size      string     `json:"size,omitempty"`
	IsSubtle  bool       `json:"isSubtle,omitempty"`
	Wrap      bool       `json:"wrap,omitempty"`
	Spacing   string     `json:"spacing,omitempty"`
	Separator bool       `json:"separator,omitempty"`
	Facts     []cardFact `json:"facts,omitempty"`
	Items     []cardItem `json:"items,omitempty"`
	Title     string     `json:"title,omitempty"`
	URL       string     `json:"url,omitempty"`
}

type cardFact struct {
	Title string `json:"title"`
	Value string `json:"value"`
}

// teamsMessageOf renders d as an Adaptive Card of at most teamsMaxBytes:
// entries that do not fit are counted in the "more" line.
func teamsMessageOf(d *digest) ([]byte, error) {
	for {
		b, err := json.Marshal(teamsCard(d))
		if err != nil || len(b) <= teamsMaxBytes || len(d.Entries) == 0 {
			return b, err
		}
		d.drop(len(d.Entries) - 1)
	}
}

func teamsCard(d *digest) teamsMessage {
	c := adaptiveCard{Schema: "http://adaptivecards.io/schemas/adaptive-card.json", Type: "AdaptiveCard", Version: "1.4"}
	c.MSTeams.Width = "Full"
	c.Body = append(c.Body, cardItem{Type: "TextBlock", Text: truncateBytes(d.Summary, 1000), Weight: "Bolder", Size: "Medium", Wrap: true})
	facts := []cardFact{{"Rule", d.Rule}}
	if d.Cluster != "" {
		facts = append(facts, cardFact{"Cluster", d.Cluster})
	}
	if d.Total > 1 {
		facts = append(facts, cardFact{"Changes", fmt.Sprint(d.Total)})
	}
	c.Body = append(c.Body, cardItem{Type: "FactSet", Facts: facts})
	for _, e := range d.Entries {
		title := e.Kind + " " + objectName(e.Namespace, e.Name)
		if e.Link != "" {
			title = "[" + title + "](" + e.Link + ")"
		}
		title = "**" + title + "** " + string(e.Type)
		if e.Who != "" {
			title += " by " + e.Who
		}
		items := []cardItem{{Type: "TextBlock", Text: title, Wrap: true}}
		var lines []string
		for _, ch := range e.Changes {
			lines = append(lines, "- "+ch.text())
		}
		if e.MoreChanges > 0 {
			lines = append(lines, fmt.Sprintf("- and %d more changes", e.MoreChanges))
		}
		if e.CRD != "" {
			lines = append(lines, e.CRD)
		}
		if len(lines) > 0 {
			items = append(items, cardItem{Type: "TextBlock", Text: truncateBytes(strings.Join(lines, "\n"), 2000), Wrap: true, Spacing: "None", IsSubtle: true})
		}
		c.Body = append(c.Body, cardItem{Type: "Container", Separator: true, Items: items})
	}
	if more := d.MoreLine(); more != "" {
		c.Body = append(c.Body, cardItem{Type: "TextBlock", Text: more, IsSubtle: true, Wrap: true, Separator: true})
	}
	if d.Link != "" {
		c.Actions = append(c.Actions, cardItem{Type: "Action.OpenUrl", Title: "Open the history", URL: d.Link})
	}
	return teamsMessage{Type: "message", Attachments: []teamsAttachment{{ContentType: "application/vnd.microsoft.card.adaptive", Content: c}}}
}

func (t *teams) send(ctx context.Context, d *digest) error {
	body, err := teamsMessageOf(d)
	if err != nil {
		return permanent(fmt.Errorf("teams card: %w", err))
	}
	client, err := t.clients.get(t.tls)
	if err != nil {
		return err
	}
	target, err := t.url.get()
	if err != nil {
		return fmt.Errorf("teams workflow URL: %w", err)
	}
	_, err = postJSON(ctx, client, target, t.timeout, body, nil)
	return err
}
