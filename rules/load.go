package rules

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"reflect"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/fieldwatch/fieldwatch/change"
)

// Load reads, compiles and merges rules files: the rules of all files, in
// the order the paths are given, with names unique across files. Every
// error of every file is reported (an ErrorList, one FILE:LINE:COL:
// PATH: MESSAGE per line); when there is any, Load returns no Set.
func Load(paths ...string) (*Set, error) {
	if len(paths) == 0 {
		return nil, errors.New("no rules file given")
	}
	var all []*Rule
	var errs ErrorList
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err // the path is already in the message
			}
			errs = append(errs, &Error{File: p, Msg: fmt.Sprintf("read: %v", err)})
			continue
		}
		rules, ferrs := parseFile(p, data)
		all = append(all, rules...)
		errs = append(errs, ferrs...)
	}
	errs = append(errs, duplicateNames(all)...)
	if err := errs.err(); err != nil {
		return nil, err
	}
	return newSet(all), nil
}

// Parse compiles one rules file's content; name is the file name used in
// error positions.
func Parse(name string, data []byte) (*Set, error) {
	rules, errs := parseFile(name, data)
	errs = append(errs, duplicateNames(rules)...)
	if err := errs.err(); err != nil {
		return nil, err
	}
	return newSet(rules), nil
}

// Validate loads the files and returns what Load would: nil when they are
// valid, an ErrorList otherwise. It is `fieldwatch validate`.
func Validate(paths ...string) error {
	_, err := Load(paths...)
	return err
}

// parseFile decodes and compiles one file. It returns its rules and every
// error; when there are errors, the rules are only good for checking
// duplicate names.
func parseFile(name string, data []byte) ([]*Rule, ErrorList) {
	d := newYAMLDecoder(name)
	root := d.parseDocument(data)
	if root == nil {
		return nil, d.errs
	}
	var f fileSpec
	d.decode(root, reflect.ValueOf(&f).Elem(), "")
	if _, ok := d.pos["rules"]; !ok {
		d.errorAt("rules", "required: a rules file is a mapping with a rules list")
	}
	rules := make([]*Rule, len(f.Rules))
	for i := range f.Rules {
		rules[i] = compileRule(d, &f.Rules[i], indexPath("rules", i))
	}
	return rules, d.errs
}

// duplicateNames reports rules whose name an earlier rule has.
func duplicateNames(rules []*Rule) ErrorList {
	var errs ErrorList
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

// compileRule validates and compiles one rule, recording errors in d.
// When it records any, the rule is incomplete: its name and position are
// still good for duplicate checks.
func compileRule(d *yamlDecoder, rs *ruleSpec, p string) *Rule {
	nerr := len(d.errs)
	at := d.at(p)
	r := &Rule{
		Name:          rs.Name,
		Description:   rs.Description,
		Source:        fmt.Sprintf("%s:%d:%d", d.file, at.line, at.col),
		IncludeObject: rs.IncludeObject,
		Actions:       rs.Actions,
	}
	np := d.at(p + ".name")
	r.nameErr = Error{File: d.file, Line: np.line, Col: np.col, Path: p + ".name"}
	switch {
	case rs.Name == "":
		d.errorAt(p+".name", "required")
	case !ruleNameRE.MatchString(rs.Name):
		d.errorAt(p+".name", "%q is not a valid rule name: letters, digits, '.', '_' and '-', starting and ending with a letter or digit, at most 253 characters", rs.Name)
	}
	compileMatch(d, r, rs.Match, p+".match")
	compileOn(d, r, rs.On, p+".on")
	for i := range rs.Fields {
		if f := compileField(d, &rs.Fields[i], indexPath(p+".fields", i)); f != nil {
			r.fields = append(r.fields, f)
		}
	}
	r.ignore = compilePaths(d, rs.IgnoreFields, p+".ignoreFields")
	for _, ip := range r.ignore {
		r.ignoreKey += ip.String() + "\n"
	}
	r.redact = compilePaths(d, rs.Redact, p+".redact")
	r.noise = ruleNoise(r.fields)
	if rs.When != nil {
		r.when = compileWhen(d, rs.When, p+".when")
	}
	if _, ok := d.pos[p+".actions"]; !ok || len(rs.Actions) == 0 {
		d.errorAt(p+".actions", "at least one action is required")
	}
	for i := range rs.Actions {
		validateAction(d, &rs.Actions[i], indexPath(p+".actions", i))
	}
	if len(d.errs) == nerr {
		r.compileProjection()
	}
	return r
}

func compileMatch(d *yamlDecoder, r *Rule, m *matchSpec, p string) {
	if m == nil {
		d.errorAt(p, "required: match.resources says which resources the rule watches")
		return
	}
	if len(m.Resources) == 0 {
		d.errorAt(p+".resources", "at least one resource selector is required")
	}
	for i, s := range m.Resources {
		sp := indexPath(p+".resources", i)
		sel := change.Selector{Version: s.Version, Kind: s.Kind, Resource: s.Resource, Custom: m.Custom}
		if s.Group == nil {
			d.errorAt(sp+".group", `required ("" for the core group, "*" for any group)`)
		} else {
			sel.Group = *s.Group
		}
		if s.Kind == "" && s.Resource == "" {
			d.errorAt(sp, `one of kind and resource is required ("*" for any)`)
		}
		for _, kv := range [][2]string{{"group", sel.Group}, {"version", s.Version}, {"kind", s.Kind}, {"resource", s.Resource}} {
			if v := kv[1]; strings.ContainsAny(v, " \t/") || (strings.Contains(v, "*") && v != "*") {
				d.errorAt(sp+"."+kv[0], "%q is not a valid %s (a name, or \"*\" for any)", v, kv[0])
			}
		}
		r.Selectors = append(r.Selectors, sel)
	}
	for _, list := range []struct {
		key  string
		vals []string
	}{{"namespaces", m.Namespaces}, {"excludeNamespaces", m.ExcludeNamespaces}} {
		for i, ns := range list.vals {
			if ns == "" {
				d.errorAt(indexPath(p+"."+list.key, i), "empty namespace name")
			}
		}
	}
	r.filter.namespaces = m.Namespaces
	r.filter.excludeNamespaces = m.ExcludeNamespaces
	for i, g := range m.Names {
		if _, err := path.Match(g, ""); err != nil || g == "" {
			d.errorAt(indexPath(p+".names", i), "%q is not a valid name glob (path.Match syntax: *, ?, [a-z])", g)
		}
	}
	r.filter.names = m.Names
	if m.LabelSelector != "" {
		sel, err := labels.Parse(m.LabelSelector)
		if err != nil {
			d.errorAt(p+".labelSelector", "invalid label selector: %v", err)
		}
		r.filter.labels = sel
	}
}

func compileOn(d *yamlDecoder, r *Rule, on []string, p string) {
	if _, ok := d.pos[p]; ok && len(on) == 0 {
		d.errorAt(p, "must not be empty (leave on out for create, update and delete)")
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
			d.errorAt(indexPath(p, i), "%q is not a change type: use create, update or delete", s)
			continue
		}
		if r.on&changeBit(t) != 0 {
			d.errorAt(indexPath(p, i), "%q listed twice", s)
			continue
		}
		r.on |= changeBit(t)
		r.On = append(r.On, t)
	}
}

func compileField(d *yamlDecoder, fs *fieldSpec, p string) *fieldTrigger {
	nerr := len(d.errs)
	f := &fieldTrigger{added: fs.Added, removed: fs.Removed}
	if fs.Path == "" {
		d.errorAt(p+".path", "required")
	} else if fp, err := compilePath(fs.Path); err != nil {
		d.errorAt(p+".path", "invalid path %q: %v", fs.Path, err)
	} else {
		f.path = fp
	}
	if fs.From != nil {
		f.from, f.hasFrom = d.decodeAny(fs.From, p+".from"), true
	}
	if fs.To != nil {
		f.to, f.hasTo = d.decodeAny(fs.To, p+".to"), true
	}
	switch {
	case f.added && f.removed:
		d.errorAt(p+".removed", "added and removed exclude each other")
	case f.added && f.hasFrom:
		d.errorAt(p+".from", "an added field has no old value: drop from or added")
	case f.removed && f.hasTo:
		d.errorAt(p+".to", "a removed field has no new value: drop to or removed")
	case f.hasFrom && f.hasTo && equal(f.from, f.to):
		d.errorAt(p+".to", "equals from: the value never changes from it to itself")
	}
	if len(d.errs) > nerr {
		return nil
	}
	return f
}

func compilePaths(d *yamlDecoder, srcs []string, p string) []*fieldPath {
	var out []*fieldPath
	for i, s := range srcs {
		fp, err := compilePath(s)
		if err != nil {
			d.errorAt(indexPath(p, i), "invalid path %q: %v", s, err)
			continue
		}
		out = append(out, fp)
	}
	return out
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

// compileWhen compiles a when expression, mapping CEL's error positions
// into the file where the expression is a one-line scalar.
func compileWhen(d *yamlDecoder, n *yaml.Node, p string) *celExpr {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		d.errorf(n, p, "must be a CEL expression string, not %s", describe(n))
		return nil
	}
	if strings.TrimSpace(n.Value) == "" {
		d.errorf(n, p, "empty expression (leave when out instead)")
		return nil
	}
	x, issues := compileCEL(n.Value)
	for _, is := range issues {
		line, col := n.Line, n.Column
		oneLine := !strings.Contains(n.Value, "\n")
		switch {
		case oneLine && n.Style == 0:
			col += is.col - 1
		case oneLine && (n.Style == yaml.SingleQuotedStyle || n.Style == yaml.DoubleQuotedStyle):
			col += is.col
		default:
			d.errorf(n, p, "CEL: %s (at line %d, column %d of the expression)", is.msg, is.line, is.col)
			continue
		}
		d.errs = append(d.errs, &Error{File: d.file, Line: line, Col: col, Path: p, Msg: "CEL: " + is.msg})
	}
	return x
}
