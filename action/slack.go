package action

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/fieldwatch/fieldwatch/rules"
)

// slack posts a Block Kit message for each group: to an incoming webhook,
// or with chat.postMessage (a bot token and a channel).
type slack struct {
	spec    *rules.SlackAction
	clients *httpClients
	tls     tlsFiles
	hook    *secretValue // the webhook URL, or
	token   *secretValue // the bot token
	api     string
	timeout time.Duration
}

var _ notifier = &slack{}

// Slack's limits (api.slack.com/reference/block-kit): 50 blocks a
// message, 150 characters of a header's text, 3,000 of a section's or a
// context element's; the top-level text is the notification's.
const (
	slackMaxBlocks  = 50
	slackHeaderMax  = 150
	slackTextMax    = 3000
	slackCutNote    = "\n… (cut: the history has it all)"
	slackMaxEntries = slackMaxBlocks - 3 // header, context, the "more" line
)

func newSlack(spec *rules.SlackAction, clients *httpClients) *slack {
	s := &slack{spec: spec, clients: clients, tls: tlsFiles{ca: spec.CAFile}, timeout: spec.Timeout, api: spec.APIURL}
	if s.timeout <= 0 {
		s.timeout = rules.DefaultWebhookTimeout
	}
	if s.api == "" {
		s.api = rules.DefaultSlackAPIURL
	}
	if spec.Token != nil {
		s.token = newSecret(spec.Token)
	} else {
		s.hook = newSecret(spec.WebhookURL)
	}
	return s
}

// slackMessage is a chat.postMessage (or incoming webhook) body.
type slackMessage struct {
	Channel string       `json:"channel,omitempty"`
	Text    string       `json:"text"`
	Blocks  []slackBlock `json:"blocks"`
}

type slackBlock struct {
	Type     string      `json:"type"`
	Text     *slackText  `json:"text,omitempty"`
	Elements []slackText `json:"elements,omitempty"`
}

type slackText struct {
	Type  string `json:"type"`
	Text  string `json:"text"`
	Emoji bool   `json:"emoji,omitempty"`
}

// slackEscape escapes what mrkdwn reads as markup: &, < and >.
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// slackLink is a mrkdwn link, or the text alone without a URL.
func slackLink(url, text string) string {
	if url == "" {
		return text
	}
	return "<" + url + "|" + text + ">"
}

// cutText cuts mrkdwn text to Slack's section limit, saying so.
func cutText(s string) string {
	if len(s) <= slackTextMax {
		return s
	}
	return truncateBytes(s, slackTextMax-len(slackCutNote)) + slackCutNote
}

// slackMessageOf renders d as Block Kit within Slack's limits: entries
// past the block limit are counted in the "more" line, texts past their
// limits cut with a note.
func slackMessageOf(d *digest) slackMessage {
	d.drop(slackMaxEntries)
	m := slackMessage{Text: truncateBytes(d.Summary, slackTextMax)}
	m.Blocks = append(m.Blocks, slackBlock{Type: "header", Text: &slackText{Type: "plain_text", Text: truncateRunes(d.Summary, slackHeaderMax), Emoji: true}})
	ctx := "rule *" + slackEscape(d.Rule) + "*"
	if d.Cluster != "" {
		ctx += " · cluster *" + slackEscape(d.Cluster) + "*"
	}
	if d.Total > 1 {
		ctx += fmt.Sprintf(" · %d changes", d.Total)
	}
	if d.Link != "" {
		ctx += " · " + slackLink(d.Link, "history")
	}
	m.Blocks = append(m.Blocks, slackBlock{Type: "context", Elements: []slackText{{Type: "mrkdwn", Text: cutText(ctx)}}})
	for _, e := range d.Entries {
		var b strings.Builder
		b.WriteString("*" + slackLink(e.Link, slackEscape(e.Kind+" "+objectName(e.Namespace, e.Name))) + "* " + string(e.Type))
		if e.Who != "" {
			b.WriteString(" by " + slackEscape(e.Who))
		}
		for _, c := range e.Changes {
			b.WriteString("\n• " + slackEscape(c.text()))
		}
		if e.MoreChanges > 0 {
			fmt.Fprintf(&b, "\n• and %d more changes", e.MoreChanges)
		}
		if e.CRD != "" {
			b.WriteString("\n" + slackEscape(e.CRD))
		}
		m.Blocks = append(m.Blocks, slackBlock{Type: "section", Text: &slackText{Type: "mrkdwn", Text: cutText(b.String())}})
	}
	if more := d.MoreLine(); more != "" {
		if d.Link != "" {
			more = slackLink(d.Link, more)
		}
		m.Blocks = append(m.Blocks, slackBlock{Type: "context", Elements: []slackText{{Type: "mrkdwn", Text: more}}})
	}
	return m
}

func (s *slack) send(ctx context.Context, d *digest) error {
	m := slackMessageOf(d)
	client, err := s.clients.get(s.tls)
	if err != nil {
		return err
	}
	header := http.Header{}
	target := s.api
	if s.hook != nil {
		if target, err = s.hook.get(); err != nil {
			return fmt.Errorf("slack webhook URL: %w", err)
		}
	} else {
		tok, err := s.token.get()
		if err != nil {
			return fmt.Errorf("slack token: %w", err)
		}
		header.Set("Authorization", "Bearer "+tok)
		m.Channel = s.spec.Channel
	}
	body, err := json.Marshal(m)
	if err != nil {
		return permanent(fmt.Errorf("slack message: %w", err))
	}
	answer, err := postJSON(ctx, client, target, s.timeout, body, header)
	if err != nil || s.hook != nil {
		return err // a webhook answers "ok"
	}
	return slackAPIError(answer)
}

// slackAPIError reads chat.postMessage's answer: {"ok": true}, or
// {"ok": false, "error": "..."}, permanent but for Slack's own trouble.
func slackAPIError(answer []byte) error {
	var r struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(answer, &r); err != nil {
		return fmt.Errorf("chat.postMessage: unreadable answer: %w", err)
	}
	if r.OK {
		return nil
	}
	err := fmt.Errorf("chat.postMessage: %s", r.Error)
	switch r.Error {
	case "ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout":
		return err
	}
	return permanent(err)
}
