package rules

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"text/template"
)

// Template is a compiled Go text/template rendered against a payload
// decoded from JSON (so fields are the payload's JSON names: .rule, .type,
// .resource.kind, .changes, ...). A JSON template must render valid JSON.
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

// Render executes the template against payload (a JSON object).
func (t *Template) Render(payload []byte) ([]byte, error) {
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
