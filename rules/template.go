package rules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"text/template"
	"text/template/parse"
	"time"

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

// Bounds of one rendering: a template is written by whoever edits the
// rules, and runs at delivery time on every firing, so a template that
// loops (a {{range}} over a huge number, templates that call themselves)
// or grows a value (a variable doubled in a loop) fails instead of
// stalling the action's queue or exhausting memory.
const (
	// MaxTemplateOutput bounds the bytes one rendering writes, and the
	// strings its functions build.
	MaxTemplateOutput = 4 << 20
	// MaxTemplateSteps bounds the {{range}} iterations and {{template}}
	// calls of one rendering.
	MaxTemplateSteps = 1_000_000
	// MaxTemplateTime bounds the time of one rendering.
	MaxTemplateTime = time.Second
)

// tickFunc is the function Render calls at each step (each iteration of a
// range, each template called): ParseTemplate puts a call to it there.
const tickFunc = "_fieldwatch_step"

// templateFuncs are available in every template. The functions of
// text/template that build strings are replaced by ones that refuse to
// build more than MaxTemplateOutput bytes.
var templateFuncs = template.FuncMap{
	// json renders a value as compact JSON, for embedding values in a JSON
	// body: {"text": {{json .name}}}.
	"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		if err == nil && len(b) > MaxTemplateOutput {
			return "", errTemplateTooLarge
		}
		return string(b), err
	},
	"join": func(sep string, v []any) (string, error) {
		parts := make([]string, len(v))
		n := 0
		for i, x := range v {
			parts[i] = fmt.Sprint(x)
			if n += len(parts[i]) + len(sep); n > MaxTemplateOutput {
				return "", errTemplateTooLarge
			}
		}
		return strings.Join(parts, sep), nil
	},
	"printf": func(format string, args ...any) (string, error) {
		if err := checkArgs(len(format), args); err != nil {
			return "", err
		}
		return checkResult(fmt.Sprintf(format, args...))
	},
	"print": func(args ...any) (string, error) {
		if err := checkArgs(0, args); err != nil {
			return "", err
		}
		return checkResult(fmt.Sprint(args...))
	},
	"println": func(args ...any) (string, error) {
		if err := checkArgs(0, args); err != nil {
			return "", err
		}
		return checkResult(fmt.Sprintln(args...))
	},
	// html, js and urlquery escape: at most 6 bytes for one.
	"html": func(args ...any) (string, error) {
		if err := checkArgs(0, args, 6); err != nil {
			return "", err
		}
		return checkResult(template.HTMLEscaper(args...))
	},
	"js": func(args ...any) (string, error) {
		if err := checkArgs(0, args, 6); err != nil {
			return "", err
		}
		return checkResult(template.JSEscaper(args...))
	},
	"urlquery": func(args ...any) (string, error) {
		if err := checkArgs(0, args, 3); err != nil {
			return "", err
		}
		return checkResult(template.URLQueryEscaper(args...))
	},
	tickFunc: func() string { return "" }, // replaced in each rendering
	// rangeFunc ends the pipeline of every range (addSteps).
	rangeFunc: rangeable,
}

// rangeFunc is the function addSteps appends to the pipeline of every
// {{range}}: it is named after the keyword, so that no template can call
// it, and so that its errors read "error calling range: ...".
const rangeFunc = "range"

// rangeable returns v when range can iterate over it, and otherwise an
// error naming its type: text/template's own error quotes the value
// ("range can't iterate over <the value>"), which may be anything of
// the object, a Secret's data included.
func rangeable(v any) (any, error) {
	switch reflect.ValueOf(v).Kind() {
	case reflect.Invalid, reflect.Array, reflect.Slice, reflect.Map, reflect.Chan, reflect.Func,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return v, nil
	}
	return nil, fmt.Errorf("can't iterate over a value of type %s", templateTypeName(v))
}

// templateTypeName names the type of a payload value as JSON does
// (string, number, bool), and of any other as Go does.
func templateTypeName(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "bool"
	}
	return fmt.Sprintf("%T", v)
}

var (
	errTemplateTooLarge = fmt.Errorf("output larger than %d bytes", MaxTemplateOutput)
	errTemplateTooLong  = fmt.Errorf("more than %d loop iterations and template calls", MaxTemplateSteps)
	errTemplateTooSlow  = fmt.Errorf("rendering took more than %s", MaxTemplateTime)
)

// checkArgs refuses to format args whose strings add up (times grow, the
// most one byte may become) to more than MaxTemplateOutput: the check
// comes before the string is built. Other values are the payload's, whose
// size is already bounded.
func checkArgs(n int, args []any, grow ...int) error {
	g := 1
	if len(grow) > 0 {
		g = grow[0]
	}
	for _, a := range args {
		switch x := a.(type) {
		case string:
			n += len(x) * g
		case []byte:
			n += len(x) * g
		}
		if n > MaxTemplateOutput {
			return errTemplateTooLarge
		}
	}
	return nil
}

func checkResult(s string) (string, error) {
	if len(s) > MaxTemplateOutput {
		return "", errTemplateTooLarge
	}
	return s, nil
}

// budget is what one rendering may still spend.
type budget struct {
	steps    int
	deadline time.Time
}

// step counts one step; every 1,024 steps it also checks the time.
func (b *budget) step() (string, error) {
	b.steps++
	switch {
	case b.steps > MaxTemplateSteps:
		return "", errTemplateTooLong
	case b.steps%1024 == 0 && time.Now().After(b.deadline):
		return "", errTemplateTooSlow
	}
	return "", nil
}

// limitedWriter is a bytes.Buffer that fails a write past
// MaxTemplateOutput, which stops the rendering.
type limitedWriter struct{ bytes.Buffer }

func (w *limitedWriter) Write(p []byte) (int, error) {
	if w.Len()+len(p) > MaxTemplateOutput {
		return 0, errTemplateTooLarge
	}
	return w.Buffer.Write(p)
}

// stepNode is {{_fieldwatch_step}}, the call ParseTemplate puts at the
// start of every range body and every template.
var stepNode = func() parse.Node {
	trees, err := parse.Parse("step", "{{"+tickFunc+"}}", "{{", "}}", templateFuncs)
	if err != nil {
		panic(err)
	}
	return trees["step"].Root.Nodes[0]
}()

// addSteps puts stepNode at the start of every range body under n (of
// tree tr), and a call of rangeFunc at the end of every range's pipeline.
func addSteps(tr *parse.Tree, n parse.Node) {
	switch x := n.(type) {
	case *parse.ListNode:
		if x == nil {
			return
		}
		for _, c := range x.Nodes {
			addSteps(tr, c)
		}
	case *parse.RangeNode:
		addSteps(tr, x.List)
		addSteps(tr, x.ElseList)
		if x.List != nil {
			x.List.Nodes = append([]parse.Node{stepNode}, x.List.Nodes...)
		}
		if x.Pipe != nil {
			pos := x.Pipe.Position()
			x.Pipe.Cmds = append(x.Pipe.Cmds, &parse.CommandNode{NodeType: parse.NodeCommand, Pos: pos,
				Args: []parse.Node{parse.NewIdentifier(rangeFunc).SetTree(tr).SetPos(pos)}})
		}
	case *parse.IfNode:
		addSteps(tr, x.List)
		addSteps(tr, x.ElseList)
	case *parse.WithNode:
		addSteps(tr, x.List)
		addSteps(tr, x.ElseList)
	}
}

// ParseTemplate compiles src. When isJSON is true, Render checks that the
// output is valid JSON.
func ParseTemplate(name, src string, isJSON bool) (*Template, error) {
	t, err := template.New(name).Funcs(templateFuncs).Option("missingkey=zero").Parse(src)
	if err != nil {
		return nil, err
	}
	for _, tt := range t.Templates() {
		if tt.Tree == nil || tt.Root == nil {
			continue
		}
		addSteps(tt.Tree, tt.Root)
		tt.Root.Nodes = append([]parse.Node{stepNode}, tt.Root.Nodes...)
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

// Render executes the template against payload (a JSON object), within
// MaxTemplateOutput bytes, MaxTemplateSteps steps and MaxTemplateTime.
func (t *Template) Render(payload []byte) ([]byte, error) {
	if t.t == nil {
		return nil, errors.New("template is not compiled (Compile, Load and ParseTemplate compile templates)")
	}
	var data map[string]any
	if err := json.Unmarshal(payload, &data); err != nil {
		return nil, fmt.Errorf("template %s: decode payload: %w", t.t.Name(), err)
	}
	b := &budget{deadline: time.Now().Add(MaxTemplateTime)}
	tmpl, err := t.t.Clone()
	if err != nil {
		return nil, fmt.Errorf("template %s: %w", t.t.Name(), err)
	}
	tmpl.Funcs(template.FuncMap{tickFunc: b.step})
	var buf limitedWriter
	if err := tmpl.Execute(&buf, data); err != nil {
		for _, limit := range []error{errTemplateTooLarge, errTemplateTooLong, errTemplateTooSlow} {
			if errors.Is(err, limit) {
				return nil, fmt.Errorf("template %s: stopped: %w", t.t.Name(), limit)
			}
		}
		return nil, fmt.Errorf("template %s: %w", t.t.Name(), err)
	}
	out := buf.Bytes()
	if t.json && !json.Valid(out) {
		// Say where, not what: the output holds the object's values.
		var v any
		var syntax *json.SyntaxError
		if err := json.Unmarshal(out, &v); errors.As(err, &syntax) {
			return nil, fmt.Errorf("template %s: output is not valid JSON: %d bytes, invalid from byte %d", t.t.Name(), len(out), syntax.Offset)
		}
		return nil, fmt.Errorf("template %s: output is not valid JSON: %d bytes, incomplete", t.t.Name(), len(out))
	}
	return out, nil
}
