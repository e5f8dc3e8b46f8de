package rules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/template"

	"gopkg.in/yaml.v3"

	"github.com/fieldwatch/fieldwatch/internal/yamlstrict"
)

// Template is a Go text/template rendered against a payload decoded from
// JSON (so fields are the payload's JSON names: .rule, .type,
// .resource.kind, .changes, ...). A JSON template must render valid JSON.
//
// In a rules file (and in a File) a template is its source text; Compile
// compiles it, and the actions of a compiled Rule carry compiled ones.
type Template struct {
	src  string
	json bool
	t    *template.Template
}

// templateFuncs are available in every template.
var templateFuncs = template.FuncMap{
	// json renders a value as compact JSON, for embedding values in a JSON
	// body: {"text": {{json .name}}}.
	"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
	"join": func(sep string, v []any) string {
		parts := make([]string, len(v))
		for i, x := range v {
			parts[i] = fmt.Sprint(x)
		}
		return strings.Join(parts, sep)
	},
}

// ParseTemplate compiles src. When isJSON is true, Render checks that the
// output is valid JSON.
func ParseTemplate(name, src string, isJSON bool) (*Template, error) {
	t, err := template.New(name).Funcs(templateFuncs).Option("missingkey=zero").Parse(src)
	if err != nil {
		return nil, err
	}
	return &Template{src: src, json: isJSON, t: t}, nil
}

// Source returns the template text.
func (t *Template) Source() string { return t.src }

// UnmarshalText implements encoding.TextUnmarshaler: it keeps src for
// Compile to compile.
func (t *Template) UnmarshalText(src []byte) error {
	*t = Template{src: string(src)}
	return nil
}

// UnmarshalYAML implements yaml.Unmarshaler: a template is a scalar.
func (t *Template) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return errors.New("must be a template string, not " + yamlstrict.KindName(n))
	}
	return t.UnmarshalText([]byte(n.Value))
}

// MarshalText implements encoding.TextMarshaler: the source text.
func (t *Template) MarshalText() ([]byte, error) { return []byte(t.src), nil }

// Render executes the template against payload (a JSON object).
func (t *Template) Render(payload []byte) ([]byte, error) {
	if t.t == nil {
		return nil, errors.New("template is not compiled (Compile, Load and ParseTemplate compile templates)")
	}
	var data map[string]any
	if err := json.Unmarshal(payload, &data); err != nil {
		return nil, fmt.Errorf("template %s: decode payload: %w", t.t.Name(), err)
	}
	var buf bytes.Buffer
	if err := t.t.Execute(&buf, data); err != nil {
		return nil, fmt.Errorf("template %s: %w", t.t.Name(), err)
	}
	out := buf.Bytes()
	if t.json && !json.Valid(out) {
		return nil, fmt.Errorf("template %s: output is not valid JSON: %.200q", t.t.Name(), out)
	}
	return out, nil
}
