package cases

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/yamlstrict"
	"github.com/fieldwatch/fieldwatch/rules"
)

// Case is one offline test case: a change and what the rules should do
// with it.
type Case struct {
	// Name names the case in results.
	Name string
	// Source is where the case is defined: FILE:LINE:COL.
	Source string
	// Change is what is evaluated.
	Change rules.Change
	// Expect is what must happen.
	Expect Expectation
}

// Expectation is what a case expects of an evaluation.
type Expectation struct {
	// Fire lists the rules that must fire, and no others (order does
	// not matter). Empty: nothing fires.
	Fire []string
	// Changes optionally gives the exact changes of some firing rules,
	// as in the payload ({op, path, value, oldValue}).
	Changes map[string][]any
	// Errors, when not nil, lists text that the evaluation errors must
	// contain: each error must contain one of them and each must be
	// found. When nil, any evaluation error fails the case.
	Errors []string
}

// The cases file schema, as written.
type fileSpec struct {
	Cases []caseSpec `yaml:"cases"`
}

type caseSpec struct {
	Name      string        `yaml:"name"`
	Type      string        `yaml:"type"`
	Time      string        `yaml:"time"`
	Resource  *resourceSpec `yaml:"resource"`
	OldObject *any          `yaml:"oldObject"`
	Object    *any          `yaml:"object"`
	Expect    *expectSpec   `yaml:"expect"`
}

type resourceSpec struct {
	Group      *string `yaml:"group"`
	Version    string  `yaml:"version"`
	Resource   string  `yaml:"resource"`
	Kind       string  `yaml:"kind"`
	Namespaced *bool   `yaml:"namespaced"`
	Custom     bool    `yaml:"custom"`
}

type expectSpec struct {
	Fire    []string       `yaml:"fire"`
	Changes map[string]any `yaml:"changes"`
	Errors  []string       `yaml:"errors"`
}

// Load reads a cases file. A case without a time gets at, so that its
// payloads are reproducible. Errors are a rules.ErrorList, as rules.Load's.
func Load(path string, at time.Time) ([]Case, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read cases: %w", err)
	}
	return Parse(path, data, at)
}

// Parse parses a cases file's content; name is used in error positions,
// at is the time of the cases that give none.
func Parse(name string, data []byte, at time.Time) ([]Case, error) {
	var f fileSpec
	pos, derrs := yamlstrict.Unmarshal(data, &f)
	l := &loader{file: name, pos: pos, at: at}
	for _, e := range derrs {
		l.errs = append(l.errs, &rules.Error{File: name, Line: e.Line, Col: e.Col, Path: e.Path, Msg: e.Msg})
	}
	if pos.Node("") == nil {
		return nil, l.errs.Err()
	}
	if len(f.Cases) == 0 {
		l.errorf("cases", "at least one case is required")
	}
	cases := make([]Case, 0, len(f.Cases))
	names := map[string]bool{}
	for i := range f.Cases {
		p := yamlstrict.IndexPath("cases", i)
		c := l.compile(&f.Cases[i], p)
		if names[c.Name] {
			l.errorf(p+".name", "duplicate case name %q", c.Name)
		}
		names[c.Name] = true
		cases = append(cases, c)
	}
	if err := l.errs.Err(); err != nil {
		return nil, err
	}
	return cases, nil
}

// loader turns a decoded cases file into Cases, collecting errors.
type loader struct {
	file string
	pos  *yamlstrict.Positions
	at   time.Time
	errs rules.ErrorList
}

// errorf records an error about the field at path, located where that
// field (or, when it is missing, its closest present parent) was written.
func (l *loader) errorf(path, format string, args ...any) {
	line, col := l.pos.At(path)
	l.errs = append(l.errs, &rules.Error{File: l.file, Line: line, Col: col, Path: path, Msg: fmt.Sprintf(format, args...)})
}

func (l *loader) compile(cs *caseSpec, p string) Case {
	line, col := l.pos.At(p)
	c := Case{Name: cs.Name, Source: fmt.Sprintf("%s:%d:%d", l.file, line, col)}
	if cs.Name == "" {
		l.errorf(p+".name", "required")
	}
	c.Change.Type = change.Type(cs.Type)
	switch c.Change.Type {
	case change.Created, change.Updated, change.Deleted:
	default:
		l.errorf(p+".type", "%q is not a change type: use created, updated or deleted", cs.Type)
	}
	c.Change.Time = l.at
	if cs.Time != "" {
		t, err := time.Parse(time.RFC3339Nano, cs.Time)
		if err != nil {
			l.errorf(p+".time", "not an RFC 3339 time: %v", err)
		}
		c.Change.Time = t
	}
	c.Change.Object = l.object(cs.Object, p+".object", c.Change.Type != change.Deleted)
	c.Change.OldObject = l.object(cs.OldObject, p+".oldObject", c.Change.Type != change.Created)
	obj := c.Change.Object
	if c.Change.Type == change.Deleted || obj == nil {
		obj = c.Change.OldObject
	}
	c.Change.Resource = l.resource(cs.Resource, obj, p+".resource")
	if cs.Expect == nil {
		l.errorf(p+".expect", "required: at least expect.fire (an empty list when nothing fires)")
		return c
	}
	if !l.pos.Has(p + ".expect.fire") {
		l.errorf(p+".expect.fire", "required (an empty list when nothing fires)")
	}
	c.Expect.Fire = cs.Expect.Fire
	c.Expect.Errors = cs.Expect.Errors
	if cs.Expect.Changes != nil {
		c.Expect.Changes = map[string][]any{}
		for rule, v := range cs.Expect.Changes {
			list, ok := v.([]any)
			if !ok {
				l.errorf(yamlstrict.JoinPath(p+".expect.changes", rule), "must be a list of changes")
				continue
			}
			if !slices.Contains(c.Expect.Fire, rule) {
				l.errorf(yamlstrict.JoinPath(p+".expect.changes", rule), "changes of rule %q, which is not in expect.fire", rule)
			}
			c.Expect.Changes[rule] = list
		}
	}
	return c
}

// object checks an object of a case; want says whether the change type
// needs it (and then it is required; otherwise it must be absent).
func (l *loader) object(v *any, p string, want bool) map[string]any {
	if v == nil || *v == nil {
		if want {
			l.errorf(p, "required for this change type")
		}
		return nil
	}
	if !want {
		l.errorf(p, "must be absent for this change type")
		return nil
	}
	m, ok := (*v).(map[string]any)
	if !ok {
		l.errorf(p, "must be a mapping (a Kubernetes object)")
	}
	return m
}

// resource reads a case's resource. Group, version and kind default to
// the object's apiVersion and kind, namespaced to whether the object has
// a namespace.
func (l *loader) resource(rs *resourceSpec, obj map[string]any, p string) change.Resource {
	if rs == nil {
		l.errorf(p, "required: at least {resource: <plural name>}")
		return change.Resource{}
	}
	apiVersion, _ := obj["apiVersion"].(string)
	group, version, ok := strings.Cut(apiVersion, "/")
	if !ok {
		group, version = "", apiVersion
	}
	kind, _ := obj["kind"].(string)
	res := change.Resource{Group: group, Version: version, Resource: rs.Resource, Kind: kind, Custom: rs.Custom, Preferred: true}
	if rs.Group != nil {
		res.Group = *rs.Group
	}
	if rs.Version != "" {
		res.Version = rs.Version
	}
	if rs.Kind != "" {
		res.Kind = rs.Kind
	}
	meta, _ := obj["metadata"].(map[string]any)
	ns, _ := meta["namespace"].(string)
	res.Namespaced = ns != ""
	if rs.Namespaced != nil {
		res.Namespaced = *rs.Namespaced
	}
	if res.Resource == "" {
		l.errorf(p+".resource", "required: the plural resource name, such as widgets")
	}
	if res.Version == "" || res.Kind == "" {
		l.errorf(p, "version and kind are required (here or as the object's apiVersion and kind)")
	}
	return res
}
