package action

import (
	"fmt"
	"os"
	"strings"

	"github.com/fieldwatch/fieldwatch/rules"
)

// secretValue reads a rules.Secret: the file (re-read when it changes) or
// the environment variable, trimmed. Its errors name the file or the
// variable, never the value.
type secretValue struct {
	file *fileCache
	env  string
}

func newSecret(s *rules.Secret) *secretValue {
	if s == nil {
		return &secretValue{}
	}
	sv := &secretValue{env: s.Env}
	if s.File != "" {
		sv.file = &fileCache{path: s.File}
	}
	return sv
}

func (s *secretValue) get() (string, error) {
	if s.file != nil {
		b, err := s.file.get()
		if err != nil {
			return "", err
		}
		return string(b), nil
	}
	if s.env == "" {
		return "", permanent(fmt.Errorf("no secret configured"))
	}
	v := strings.TrimSpace(os.Getenv(s.env))
	if v == "" {
		return "", fmt.Errorf("environment variable %s is empty", s.env)
	}
	return v, nil
}
