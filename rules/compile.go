package rules

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/crd/diff"
	"github.com/fieldwatch/fieldwatch/fileerr"
	"github.com/fieldwatch/fieldwatch/internal/fieldpath"
)

// Compile validates and compiles rules written as plain structs. Every
// error comes back together, as a fileerr.List whose errors carry the field
// path (rules[2].fields[0].path: ...) but no file position: Load and Parse
// add those. With any error there is no Set.
func Compile(f File) (*Set, error) {
	rules, errs := compileFile(&f)
	errs = append(errs, duplicateNames(rules)...)
	if err := errs.Err(); err != nil {
		return nil, err
	}
	return newSet(rules), nil
}

// compiler collects the errors of one compilation.
type compiler struct {
	errs fileerr.List
}

// errorf records an error about the field at path.
func (c *compiler) errorf(path, format string, args ...any) {
	c.errs = append(c.errs, &fileerr.Error{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// compileFile compiles every rule of f. When there are errors, the rules
// are only good for checking duplicate names.
func compileFile(f *File) ([]*Rule, fileerr.List) {
	var c compiler
	rules := make([]*Rule, len(f.Rules))
	for i := range f.Rules {
		rules[i] = c.rule(&f.Rules[i], fieldpath.Item("rules", i))
	}
	return rules, c.errs
}

// duplicateNames reports rules whose name an earlier rule has.
func duplicateNames(rules []*Rule) fileerr.List {
	var errs fileerr.List
	first := map[string]*Rule{}
	for _, r := range rules {
		if r.Name == "" {
			continue // reported as required
		}
		if f, ok := first[r.Name]; ok {
			e := r.nameErr
			e.Msg = fmt.Sprintf("duplicate rule name %q (first defined at %s)", r.Name, f.Source)
			errs = append(errs, &e)
			continue
		}
		first[r.Name] = r
	}
	return errs
}

var ruleNameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$`)

// rule validates and compiles one rule at field path p. When it records
// errors, the rule is incomplete: its name and Source are still good for
// duplicate checks.
func (c *compiler) rule(rs *RuleSpec, p string) *Rule {
	nerr := len(c.errs)
	r := &Rule{
		Name:          rs.Name,
		Description:   rs.Description,
		Source:        p,
		IncludeObject: rs.IncludeObject,
		States:        rs.History != nil && rs.History.States,
		nameErr:       fileerr.Error{Path: p + ".name"},
	}
	switch {
	case rs.Name == "":
		c.errorf(p+".name", "required")
	case !ruleNameRE.MatchString(rs.Name):
		c.errorf(p+".name", "%q is not a valid rule name: letters, digits, '.', '_' and '-', starting and ending with a letter or digit, at most 253 characters", rs.Name)
	}
	c.match(r, rs.Match, p+".match")
	c.on(r, rs.On, p+".on")
	for i := range rs.Fields {
		if f := c.field(&rs.Fields[i], fieldpath.Item(p+".fields", i)); f != nil {
			r.fields = append(r.fields, f)
		}
	}
	r.ignore = c.paths(rs.IgnoreFields, p+".ignoreFields")
	for _, ip := range r.ignore {
		r.ignoreKey += ip.String() + "\n"
	}
	r.redact = c.paths(rs.Redact, p+".redact")
	r.noise = ruleNoise(r.fields)
	r.noiseTree = newPruner(r.noise).exclude
	crdOnly := matchesCRDsOnly(r.Selectors)
	r.when = c.when(string(rs.When), p+".when", crdOnly)
	switch {
	case rs.CRD != nil && !crdOnly:
		c.errorf(p+".crd", "only rules that match CustomResourceDefinitions only have crd: every match.resources entry must be "+
			"{group: apiextensions.k8s.io, kind: CustomResourceDefinition}")
	case rs.CRD != nil && rs.CRD.Impact:
		r.crd = crdImpact
	case rs.CRD != nil || (r.when != nil && r.when.usesCRD):
		r.crd = crdCompare
	}
	if rs.CRD != nil && rs.CRD.Policy != nil && crdOnly {
		pol, err := rs.CRD.Policy.Compile()
		for _, e := range unjoinErrors(err) {
			var pe diff.PolicyError
			if errors.As(e, &pe) {
				c.errorf(p+".crd.policy."+pe.Path, "%s", pe.Msg)
			} else {
				c.errorf(p+".crd.policy", "%v", e)
			}
		}
		r.crdPolicy = pol
	}
	if len(rs.Actions) == 0 {
		c.errorf(p+".actions", "at least one action is required")
	}
	for i := range rs.Actions {
		ap := fieldpath.Item(p+".actions", i)
		a := c.action(rs.Actions[i], ap)
		a.when = c.routeWhen(string(a.When), ap+".when", crdOnly)
		if a.when != nil && a.when.usesCRD && r.crd == crdNone {
			r.crd = crdCompare
		}
		r.routeAudit = r.routeAudit || (a.when != nil && (a.when.actorAudit || readsUser(a.when, string(a.When))))
		r.Actions = append(r.Actions, a)
	}
	if len(c.errs) == nerr {
		r.compileProjection()
	}
	return r
}

func (c *compiler) match(r *Rule, m *MatchSpec, p string) {
	r.where.match = fileerr.Error{Path: p}
	if m == nil {
		c.errorf(p, "required: match.resources says which resources the rule watches")
		return
	}
	if len(m.Resources) == 0 {
		c.errorf(p+".resources", "at least one resource selector is required")
	}
	for i, s := range m.Resources {
		sp := fieldpath.Item(p+".resources", i)
		sel := change.Selector{Version: s.Version, Kind: s.Kind, Resource: s.Resource, Custom: m.Custom}
		if s.Group == nil {
			c.errorf(sp+".group", `required ("" for the core group, "*" for any group)`)
		} else {
			sel.Group = *s.Group
		}
		if s.Kind == "" && s.Resource == "" {
			c.errorf(sp, `one of kind and resource is required ("*" for any)`)
		}
		for _, kv := range [][2]string{{"group", sel.Group}, {"version", s.Version}, {"kind", s.Kind}, {"resource", s.Resource}} {
			if v := kv[1]; strings.ContainsAny(v, " \t/") || (strings.Contains(v, "*") && v != "*") {
				c.errorf(sp+"."+kv[0], "%q is not a valid %s (a name, or \"*\" for any)", v, kv[0])
			}
		}
		r.Selectors = append(r.Selectors, sel)
		r.where.resources = append(r.where.resources, fileerr.Error{Path: sp})
	}
	for i := range m.Namespaces {
		r.where.namespaces = append(r.where.namespaces, fileerr.Error{Path: fieldpath.Item(p+".namespaces", i)})
	}
	for _, list := range []struct {
		key  string
		vals []string
	}{{"namespaces", m.Namespaces}, {"excludeNamespaces", m.ExcludeNamespaces}} {
		for i, ns := range list.vals {
			if ns == "" {
				c.errorf(fieldpath.Item(p+"."+list.key, i), "empty namespace name")
			}
		}
	}
	r.filter.namespaces = m.Namespaces
	r.filter.excludeNamespaces = m.ExcludeNamespaces
	for i, g := range m.Names {
		if _, err := path.Match(g, ""); err != nil || g == "" {
			c.errorf(fieldpath.Item(p+".names", i), "%q is not a valid name glob (path.Match syntax: *, ?, [a-z])", g)
		}
	}
	r.filter.names = m.Names
	r.users.users = c.userGlobs(m.Users, p+".users")
	r.users.exclude = c.userGlobs(m.ExcludeUsers, p+".excludeUsers")
	if m.LabelSelector != "" {
		sel, err := labels.Parse(m.LabelSelector)
		if err != nil {
			c.errorf(p+".labelSelector", "invalid label selector: %v", err)
		}
		r.filter.labels = sel
	}
}

func (c *compiler) on(r *Rule, on []string, p string) {
	if on != nil && len(on) == 0 {
		c.errorf(p, "must not be empty (leave on out for create, update and delete)")
	}
	if len(on) == 0 {
		r.on = 7
		r.On = []change.Type{change.Created, change.Updated, change.Deleted}
		return
	}
	for i, s := range on {
		var t change.Type
		switch s {
		case "create":
			t = change.Created
		case "update":
			t = change.Updated
		case "delete":
			t = change.Deleted
		default:
			c.errorf(fieldpath.Item(p, i), "%q is not a change type: use create, update or delete", s)
			continue
		}
		if r.on&changeBit(t) != 0 {
			c.errorf(fieldpath.Item(p, i), "%q listed twice", s)
			continue
		}
		r.on |= changeBit(t)
		r.On = append(r.On, t)
	}
}

func (c *compiler) field(fs *FieldSpec, p string) *fieldTrigger {
	nerr := len(c.errs)
	f := &fieldTrigger{added: fs.Added, removed: fs.Removed}
	if fs.Path == "" {
		c.errorf(p+".path", "required")
	} else if fp, err := compilePath(fs.Path); err != nil {
		c.errorf(p+".path", "invalid path %q: %v", fs.Path, err)
	} else {
		f.path = fp
	}
	if fs.From != nil {
		f.from, f.hasFrom = *fs.From, true
	}
	if fs.To != nil {
		f.to, f.hasTo = *fs.To, true
	}
	switch {
	case f.added && f.removed:
		c.errorf(p+".removed", "added and removed exclude each other")
	case f.added && f.hasFrom:
		c.errorf(p+".from", "an added field has no old value: drop from or added")
	case f.removed && f.hasTo:
		c.errorf(p+".to", "a removed field has no new value: drop to or removed")
	case f.hasFrom && f.hasTo && equal(f.from, f.to):
		c.errorf(p+".to", "equals from: the value never changes from it to itself")
	}
	if len(c.errs) > nerr {
		return nil
	}
	return f
}

func (c *compiler) paths(srcs []string, p string) []*fieldPath {
	var out []*fieldPath
	for i, s := range srcs {
		fp, err := compilePath(s)
		if err != nil {
			c.errorf(fieldpath.Item(p, i), "invalid path %q: %v", s, err)
			continue
		}
		out = append(out, fp)
	}
	return out
}

// crdResource is the resource of CustomResourceDefinitions.
var crdResource = change.Resource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions",
	Kind: "CustomResourceDefinition", Preferred: true}

// matchesCRDsOnly reports whether the selectors select
// CustomResourceDefinitions and nothing else: the rules that can read the
// comparison of a CRD change.
func matchesCRDsOnly(sels []change.Selector) bool {
	for _, s := range sels {
		named := s.Kind == crdResource.Kind || s.Resource == crdResource.Resource
		if s.Group != crdResource.Group || s.Custom || !named || !s.Matches(crdResource) {
			return false
		}
	}
	return len(sels) > 0
}

// ruleNoise returns the noise paths a rule leaves out: all of them but
// those that one of its fields names at or below.
func ruleNoise(fields []*fieldTrigger) [][]string {
	var out [][]string
	for _, n := range noisePaths {
		named := false
		for _, f := range fields {
			if f.path != nil && hasPrefix(f.path.prefix(), n) {
				named = true
			}
		}
		if !named {
			out = append(out, n)
		}
	}
	return out
}

// when compiles a when expression ("" for none). Its CEL errors carry
// their line and column in the expression, which the loader maps into the
// file where it can.
func (c *compiler) when(src, p string, withCRD bool) *celExpr {
	if src == "" {
		return nil
	}
	if strings.TrimSpace(src) == "" {
		c.errorf(p, "empty expression (leave when out instead)")
		return nil
	}
	x, issues := compileCEL(src, withCRD)
	for _, is := range issues {
		c.errs = append(c.errs, &fileerr.Error{Path: p, Msg: "CEL: " + is.msg, ExprLine: is.line, ExprCol: is.col})
	}
	return x
}

// unjoinErrors returns the errors an errors.Join holds; none for nil.
func unjoinErrors(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
