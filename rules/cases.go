package rules

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fieldwatch/fieldwatch/change"
)

// Case is one offline test case (`fieldwatch test`): a change and what
// the rules should do with it.
type Case struct {
	// Name names the case in results.
	Name string
	// Source is where the case is defined: FILE:LINE:COL.
	Source string
	// Change is what is evaluated.
	Change Change
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

// CaseResult is the outcome of one case.
type CaseResult struct {
	Name   string
	Source string
	// Pass is true when every expectation held.
	Pass bool
	// Diff says, one line per problem, what differs from the
	// expectation ("" when Pass).
	Diff string
	// Firings are the payloads of the rules that fired, in rule order.
	Firings []json.RawMessage
	// Errors are the evaluation errors.
	Errors []string
}

// CaseTime is the time of a case's change unless the case gives one, so
// that payloads are reproducible.
var CaseTime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// The cases file schema, as written.
type casesFileSpec struct {
	Cases []caseSpec `yaml:"cases"`
}

type caseSpec struct {
	Name      string        `yaml:"name"`
	Type      string        `yaml:"type"`
	Time      string        `yaml:"time"`
	Resource  *resourceSpec `yaml:"resource"`
	OldObject *yaml.Node    `yaml:"oldObject"`
	Object    *yaml.Node    `yaml:"object"`
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

// LoadCases reads a cases file. Errors are an ErrorList, as Load's.
func LoadCases(path string) ([]Case, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read cases: %w", err)
	}
	return ParseCases(path, data)
}

// ParseCases parses a cases file's content; name is used in error
// positions.
func ParseCases(name string, data []byte) ([]Case, error) {
	d := newYAMLDecoder(name)
	root := d.parseDocument(data)
	if root == nil {
		return nil, d.errs.err()
	}
	var f casesFileSpec
	d.decode(root, reflect.ValueOf(&f).Elem(), "")
	if len(f.Cases) == 0 {
		d.errorAt("cases", "at least one case is required")
	}
	cases := make([]Case, 0, len(f.Cases))
	names := map[string]bool{}
	for i := range f.Cases {
		c := compileCase(d, &f.Cases[i], indexPath("cases", i))
		if names[c.Name] {
			d.errorAt(indexPath("cases", i)+".name", "duplicate case name %q", c.Name)
		}
		names[c.Name] = true
		cases = append(cases, c)
	}
	if err := d.errs.err(); err != nil {
		return nil, err
	}
	return cases, nil
}

func compileCase(d *yamlDecoder, cs *caseSpec, p string) Case {
	at := d.at(p)
	c := Case{Name: cs.Name, Source: fmt.Sprintf("%s:%d:%d", d.file, at.line, at.col)}
	if cs.Name == "" {
		d.errorAt(p+".name", "required")
	}
	c.Change.Type = change.Type(cs.Type)
	switch c.Change.Type {
	case change.Created, change.Updated, change.Deleted:
	default:
		d.errorAt(p+".type", "%q is not a change type: use created, updated or deleted", cs.Type)
	}
	c.Change.Time = CaseTime
	if cs.Time != "" {
		t, err := time.Parse(time.RFC3339Nano, cs.Time)
		if err != nil {
			d.errorAt(p+".time", "not an RFC 3339 time: %v", err)
		}
		c.Change.Time = t
	}
	c.Change.Object = caseObject(d, cs.Object, p+".object", c.Change.Type != change.Deleted)
	c.Change.OldObject = caseObject(d, cs.OldObject, p+".oldObject", c.Change.Type != change.Created)
	c.Change.Resource = caseResource(d, cs.Resource, c.Change.meta(), p+".resource")
	if cs.Expect == nil {
		d.errorAt(p+".expect", "required: at least expect.fire (an empty list when nothing fires)")
		return c
	}
	if _, ok := d.pos[p+".expect.fire"]; !ok {
		d.errorAt(p+".expect.fire", "required (an empty list when nothing fires)")
	}
	c.Expect.Fire = cs.Expect.Fire
	c.Expect.Errors = cs.Expect.Errors
	if cs.Expect.Changes != nil {
		c.Expect.Changes = map[string][]any{}
		for rule, v := range cs.Expect.Changes {
			l, ok := v.([]any)
			if !ok {
				d.errorAt(joinPath(p+".expect.changes", rule), "must be a list of changes")
				continue
			}
			if !slices.Contains(c.Expect.Fire, rule) {
				d.errorAt(joinPath(p+".expect.changes", rule), "changes of rule %q, which is not in expect.fire", rule)
			}
			c.Expect.Changes[rule] = l
		}
	}
	return c
}

// caseObject decodes an object of a case; want says whether the change
// type needs it (and then it is required; otherwise it must be absent).
func caseObject(d *yamlDecoder, n *yaml.Node, p string, want bool) map[string]any {
	if n == nil || isNull(n) {
		if want {
			d.errorAt(p, "required for this change type")
		}
		return nil
	}
	if !want {
		d.errorf(n, p, "must be absent for this change type")
		return nil
	}
	m, ok := d.decodeAny(n, p).(map[string]any)
	if !ok {
		d.errorf(n, p, "must be a mapping (a Kubernetes object)")
	}
	return m
}

// caseResource decodes a case's resource. Group, version and kind default
// to the object's apiVersion and kind, namespaced to whether the object
// has a namespace.
func caseResource(d *yamlDecoder, rs *resourceSpec, obj map[string]any, p string) change.Resource {
	if rs == nil {
		d.errorAt(p, "required: at least {resource: <plural name>}")
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
	res.Namespaced = metaString(obj, "namespace") != ""
	if rs.Namespaced != nil {
		res.Namespaced = *rs.Namespaced
	}
	if res.Resource == "" {
		d.errorAt(p+".resource", "required: the plural resource name, such as widgets")
	}
	if res.Version == "" || res.Kind == "" {
		d.errorAt(p, "version and kind are required (here or as the object's apiVersion and kind)")
	}
	return res
}

// RunCases evaluates every case against set and checks its expectations.
func RunCases(set *Set, cases []Case) []CaseResult {
	out := make([]CaseResult, len(cases))
	for i := range cases {
		out[i] = runCase(set, &cases[i])
	}
	return out
}

func runCase(set *Set, c *Case) CaseResult {
	res := CaseResult{Name: c.Name, Source: c.Source}
	ch := c.Change
	firings, errs := set.Eval(&ch)
	var problems []string
	fired := make([]string, 0, len(firings))
	changes := map[string]any{}
	for _, f := range firings {
		fired = append(fired, f.Rule.Name)
		res.Firings = append(res.Firings, json.RawMessage(f.Payload))
		var p struct {
			Changes any `json:"changes"`
		}
		if err := json.Unmarshal(f.Payload, &p); err != nil {
			problems = append(problems, fmt.Sprintf("rule %s: payload is not JSON: %v", f.Rule.Name, err))
		}
		changes[f.Rule.Name] = p.Changes
	}
	for _, e := range errs {
		res.Errors = append(res.Errors, e.Error())
	}
	for _, name := range c.Expect.Fire {
		if set.Rule(name) == nil {
			problems = append(problems, fmt.Sprintf("expect.fire: no rule named %q", name))
		}
	}
	missing, unexpected := setDiff(c.Expect.Fire, fired), setDiff(fired, c.Expect.Fire)
	if len(missing) > 0 || len(unexpected) > 0 {
		line := fmt.Sprintf("fired %v, expected %v", fired, c.Expect.Fire)
		if len(missing) > 0 {
			line += fmt.Sprintf("; did not fire: %v", missing)
		}
		if len(unexpected) > 0 {
			line += fmt.Sprintf("; fired unexpectedly: %v", unexpected)
		}
		problems = append(problems, line)
	}
	rulesWithChanges := make([]string, 0, len(c.Expect.Changes))
	for name := range c.Expect.Changes {
		rulesWithChanges = append(rulesWithChanges, name)
	}
	slices.Sort(rulesWithChanges)
	for _, name := range rulesWithChanges {
		got, ok := changes[name]
		if !ok {
			continue // reported as did not fire
		}
		want, err := normaliseJSON(c.Expect.Changes[name])
		if err != nil {
			problems = append(problems, fmt.Sprintf("rule %s: expected changes: %v", name, err))
			continue
		}
		if !equal(want, got) {
			problems = append(problems, fmt.Sprintf("rule %s: changes differ (- expected, + got):\n%s", name, lineDiff(jsonLines(want), jsonLines(got))))
		}
	}
	problems = append(problems, checkErrors(c.Expect.Errors, res.Errors)...)
	res.Pass = len(problems) == 0
	res.Diff = strings.Join(problems, "\n")
	return res
}

// checkErrors matches evaluation errors against expected substrings.
func checkErrors(want, got []string) []string {
	var problems []string
	if want == nil {
		for _, e := range got {
			problems = append(problems, "evaluation error: "+e)
		}
		return problems
	}
	for _, e := range got {
		if !slices.ContainsFunc(want, func(w string) bool { return strings.Contains(e, w) }) {
			problems = append(problems, "unexpected evaluation error: "+e)
		}
	}
	for _, w := range want {
		if !slices.ContainsFunc(got, func(e string) bool { return strings.Contains(e, w) }) {
			problems = append(problems, fmt.Sprintf("no evaluation error contains %q", w))
		}
	}
	return problems
}

// setDiff returns the elements of a not in b.
func setDiff(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// normaliseJSON round-trips v through JSON, so that it compares with a
// decoded payload.
func normaliseJSON(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	err = json.Unmarshal(b, &out)
	return out, err
}

// jsonLines renders a list one compact JSON item per line (anything else
// on one line).
func jsonLines(v any) []string {
	l, ok := v.([]any)
	if !ok {
		return []string{compactJSON(v)}
	}
	out := make([]string, len(l))
	for i, x := range l {
		out[i] = compactJSON(x)
	}
	return out
}

func compactJSON(v any) string {
	b, err := appendJSON(nil, v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// lineDiff is a minimal line diff (longest common subsequence): common
// lines start with two spaces, removed with "- ", added with "+ ".
func lineDiff(a, b []string) string {
	n, m := len(a), len(b)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []string
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && a[i] == b[j]:
			out = append(out, "  "+a[i])
			i, j = i+1, j+1
		case i < n && (j == m || lcs[i+1][j] >= lcs[i][j+1]):
			out = append(out, "- "+a[i])
			i++
		default:
			out = append(out, "+ "+b[j])
			j++
		}
	}
	return strings.Join(out, "\n")
}
