package cases

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/fileerr"
	"github.com/fieldwatch/fieldwatch/internal/fieldpath"
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
	// Objects are, for an update of a CustomResourceDefinition, the
	// custom resources the impact scan reads (as they were before the
	// change) for the rules that ask for it (crd: {impact: true}).
	Objects []map[string]any
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
	// Series, when not nil, lists the series of the metrics from fields
	// the change's object gives (none for a deletion), and OldSeries
	// those of its old object: each a line of the text exposition format
	// (`name{label="value",...} value`, labels sorted by name), exactly.
	Series, OldSeries []string
	// CRD optionally gives, per firing rule, what the payload's crd field
	// must hold: every key given must be there with the value given
	// (maps may leave keys out; lists must have the items given, in
	// order, each compared the same way).
	CRD map[string]any
	// Actions optionally gives, per firing rule, the indices of its
	// actions that get the firing: those whose when (routing) is true.
	Actions map[string][]int
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
	Objects   *any          `yaml:"objects"`
	Actor     *actorSpec    `yaml:"actor"`
	Observed  string        `yaml:"observed"`
	Expect    *expectSpec   `yaml:"expect"`
}

// actorSpec is who made a case's change, as the audit stream would tell
// (rules.Change.Attribution).
type actorSpec struct {
	User             *userSpec `yaml:"user"`
	ImpersonatedUser *userSpec `yaml:"impersonatedUser"`
	Verb             string    `yaml:"verb"`
	UserAgent        string    `yaml:"userAgent"`
	SourceIPs        []string  `yaml:"sourceIPs"`
	AuditID          string    `yaml:"auditID"`
	Match            string    `yaml:"match"`
	Candidates       []string  `yaml:"candidates"`
}

type userSpec struct {
	Username string   `yaml:"username"`
	UID      string   `yaml:"uid"`
	Groups   []string `yaml:"groups"`
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
	Fire      []string         `yaml:"fire"`
	Series    *[]string        `yaml:"series"`
	OldSeries *[]string        `yaml:"oldSeries"`
	Changes   map[string]any   `yaml:"changes"`
	Errors    []string         `yaml:"errors"`
	CRD       map[string]any   `yaml:"crd"`
	Actions   map[string][]int `yaml:"actions"`
}

// Load reads a cases file. A case without a time gets at, so that its
// payloads are reproducible. Errors are a fileerr.List, as rules.Load's.
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
		e.File = name
	}
	l.errs = derrs
	if pos.Node("") == nil {
		return nil, l.errs.Err()
	}
	if len(f.Cases) == 0 {
		l.errorf("cases", "at least one case is required")
	}
	cases := make([]Case, 0, len(f.Cases))
	names := map[string]bool{}
	for i := range f.Cases {
		p := fieldpath.Item("cases", i)
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
	errs fileerr.List
}

// errorf records an error about the field at path, located where that
// field (or, when it is missing, its closest present parent) was written.
func (l *loader) errorf(path, format string, args ...any) {
	line, col := l.pos.At(path)
	l.errs = append(l.errs, &fileerr.Error{File: l.file, Line: line, Col: col, Path: path, Msg: fmt.Sprintf(format, args...)})
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
	c.Change.New = l.object(cs.Object, p+".object", c.Change.Type != change.Deleted)
	c.Change.Old = l.object(cs.OldObject, p+".oldObject", c.Change.Type != change.Created)
	obj := c.Change.New
	if c.Change.Type == change.Deleted || obj == nil {
		obj = c.Change.Old
	}
	c.Change.Resource = l.resource(cs.Resource, obj, p+".resource")
	c.Objects = l.objects(cs.Objects, c.Change, p+".objects")
	if cs.Actor != nil {
		c.Change.Attribution = l.actor(cs.Actor, p+".actor")
	}
	switch o := change.Observed(cs.Observed); o {
	case "", change.ObservedWatch, change.ObservedRelist, change.ObservedRestart, change.ObservedTakeover:
		c.Change.Observed = o
	default:
		l.errorf(p+".observed", "%q is not a way a change is observed: use watch, relist, restart or takeover", cs.Observed)
	}
	if cs.Expect == nil {
		l.errorf(p+".expect", "required: at least expect.fire (an empty list when nothing fires)")
		return c
	}
	if !l.pos.Has(p + ".expect.fire") {
		l.errorf(p+".expect.fire", "required (an empty list when nothing fires)")
	}
	c.Expect.Fire = cs.Expect.Fire
	c.Expect.Errors = cs.Expect.Errors
	if cs.Expect.Series != nil {
		c.Expect.Series = append([]string{}, *cs.Expect.Series...)
	}
	if cs.Expect.OldSeries != nil {
		c.Expect.OldSeries = append([]string{}, *cs.Expect.OldSeries...)
	}
	if cs.Expect.Changes != nil {
		c.Expect.Changes = map[string][]any{}
		for rule, v := range cs.Expect.Changes {
			list, ok := v.([]any)
			if !ok {
				l.errorf(fieldpath.Child(p+".expect.changes", rule), "must be a list of changes")
				continue
			}
			if !slices.Contains(c.Expect.Fire, rule) {
				l.errorf(fieldpath.Child(p+".expect.changes", rule), "changes of rule %q, which is not in expect.fire", rule)
			}
			c.Expect.Changes[rule] = list
		}
	}
	for rule := range cs.Expect.Actions {
		if !slices.Contains(c.Expect.Fire, rule) {
			l.errorf(fieldpath.Child(p+".expect.actions", rule), "actions of rule %q, which is not in expect.fire", rule)
		}
	}
	c.Expect.Actions = cs.Expect.Actions
	if cs.Expect.CRD != nil {
		c.Expect.CRD = map[string]any{}
		for rule, v := range cs.Expect.CRD {
			rp := fieldpath.Child(p+".expect.crd", rule)
			if _, ok := v.(map[string]any); !ok {
				l.errorf(rp, "must be a mapping: the keys of the payload's crd to check")
				continue
			}
			if !slices.Contains(c.Expect.Fire, rule) {
				l.errorf(rp, "crd of rule %q, which is not in expect.fire", rule)
			}
			c.Expect.CRD[rule] = v
		}
	}
	return c
}

// objects checks the custom resources of a case: a list of mappings, for
// an update of a CustomResourceDefinition only.
func (l *loader) objects(v *any, ch rules.Change, p string) []map[string]any {
	if v == nil {
		return nil
	}
	if ch.Type != change.Updated || ch.Resource.Group != "apiextensions.k8s.io" || ch.Resource.Resource != "customresourcedefinitions" {
		l.errorf(p, "objects are the custom resources for the impact of a CRD change: only for type updated of customresourcedefinitions (group apiextensions.k8s.io)")
		return nil
	}
	list, ok := (*v).([]any)
	if !ok {
		l.errorf(p, "must be a list of objects")
		return nil
	}
	out := make([]map[string]any, 0, len(list))
	for i, item := range list {
		m, ok := item.(map[string]any)
		if !ok {
			l.errorf(fieldpath.Item(p, i), "must be a mapping (a custom resource)")
			continue
		}
		out = append(out, m)
	}
	return out
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

// actor reads a case's actor: who made the change, as attribution from the
// audit stream would say. match defaults to exact when a user is given and
// to none otherwise; exact and window need a user, ambiguous needs
// candidates and no user.
func (l *loader) actor(as *actorSpec, p string) *change.Attribution {
	a := &change.Attribution{
		Verb: as.Verb, UserAgent: as.UserAgent, SourceIPs: as.SourceIPs,
		AuditID: as.AuditID, Candidates: as.Candidates,
	}
	for _, u := range []struct {
		spec *userSpec
		dst  **change.UserInfo
		key  string
	}{{as.User, &a.User, "user"}, {as.ImpersonatedUser, &a.ImpersonatedUser, "impersonatedUser"}} {
		if u.spec == nil {
			continue
		}
		if u.spec.Username == "" {
			l.errorf(p+"."+u.key+".username", "required")
		}
		*u.dst = &change.UserInfo{Username: u.spec.Username, UID: u.spec.UID, Groups: u.spec.Groups}
	}
	a.Match = change.Match(as.Match)
	if as.Match == "" {
		a.Match = change.MatchNone
		if a.User != nil {
			a.Match = change.MatchExact
		}
	}
	switch a.Match {
	case change.MatchExact, change.MatchWindow:
		if a.User == nil {
			l.errorf(p+".user", "required when match is %s", a.Match)
		}
		if len(a.Candidates) > 0 {
			l.errorf(p+".candidates", "only for match ambiguous")
		}
	case change.MatchAmbiguous:
		if a.User != nil || a.ImpersonatedUser != nil {
			l.errorf(p+".user", "an ambiguous match names no user: list the candidates' usernames instead")
		}
		if len(a.Candidates) < 2 {
			l.errorf(p+".candidates", "an ambiguous match has at least two candidates")
		}
	case change.MatchNone:
		if a.User != nil || a.ImpersonatedUser != nil || len(a.Candidates) > 0 {
			l.errorf(p+".match", "none names no user and no candidates")
		}
	default:
		l.errorf(p+".match", "%q is not a match: use exact, window, ambiguous or none", as.Match)
	}
	if a.ImpersonatedUser != nil && a.User == nil {
		l.errorf(p+".impersonatedUser", "needs the user who impersonated (user)")
	}
	return a
}
