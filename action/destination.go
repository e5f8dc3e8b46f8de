package action

import (
	"fmt"
	"strings"

	"github.com/fieldwatch/fieldwatch/rules"
)

// subjectTemplate renders where a payload goes (a NATS subject, a Kafka
// topic) from the payload, and checks the result.
type subjectTemplate struct {
	t      *rules.Template
	static string // the source, when it has no template actions
	valid  func(string) error
}

func newSubjectTemplate(t *rules.Template, valid func(string) error) *subjectTemplate {
	st := &subjectTemplate{t: t, valid: valid}
	if t != nil && !strings.Contains(t.Source(), "{{") {
		st.static = t.Source()
	}
	return st
}

// render returns the destination of payload. A template without actions
// costs nothing per payload; one with actions decodes the payload.
func (s *subjectTemplate) render(payload []byte) (string, error) {
	if s.t == nil {
		return "", fmt.Errorf("no template")
	}
	out := s.static
	if out == "" {
		b, err := s.t.Render(payload)
		if err != nil {
			return "", err
		}
		out = strings.TrimSpace(string(b))
	}
	if err := s.valid(out); err != nil {
		return "", err
	}
	return out, nil
}
