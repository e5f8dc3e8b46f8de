package fieldmetrics

import (
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/fileerr"
	"github.com/fieldwatch/fieldwatch/internal/fieldpath"
)

// Metric types, as a Generator's each.type names them (any case).
const (
	TypeGauge    = "gauge"
	TypeStateSet = "stateset"
	TypeInfo     = "info"
)

// defaultPrefix is the metric name prefix of a resource without
// metricNamePrefix, as in kube-state-metrics.
const defaultPrefix = "kube_customresource"

// The labels every series of a resource carries (unless a metric's
// commonLabels override them): the group, version and kind of the
// object's resource, as kube-state-metrics adds them.
const (
	labelGroup   = "customresource_group"
	labelVersion = "customresource_version"
	labelKind    = "customresource_kind"
)

var (
	metricNameRE = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	labelNameRE  = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
	invalidLabel = regexp.MustCompile(`[^a-zA-Z0-9_]`)
)

// sanitizeLabelName replaces what a label name may not hold by _, as
// kube-state-metrics does to the keys of labelsFromPath.
func sanitizeLabelName(s string) string {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '_' && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			return invalidLabel.ReplaceAllString(s, "_")
		}
	}
	return s
}

// Family describes one metric family of a Set: every resource's metrics
// of one name make one family.
type Family struct {
	// Name is the full metric name, prefix included.
	Name string
	// Help is the HELP text of the first metric of that name.
	Help string
	// Type is TypeGauge, TypeStateSet or TypeInfo; the exposition types
	// them all as gauges.
	Type string
	// index is the family's place in Set.families.
	index int
}

// Set is a compiled metrics configuration: compile once, evaluate many
// objects. It is immutable and safe for concurrent use.
type Set struct {
	resources []*resourceMetrics
	families  []*Family // sorted by name
	// names are the label names written in the configuration, sanitized
	// where kube-state-metrics sanitizes them: series refer to them by
	// index.
	names   []string
	nameIdx map[string]int
	// byGroup indexes resources by their group (never "*").
	byGroup map[string][]int
}

// resourceMetrics are the families of one configured resource.
type resourceMetrics struct {
	sel change.Selector
	// where is the resource's place in the configuration (FILE:LINE:COL
	// or its field path).
	where    string
	common   map[string]string
	families []*family
}

// family is one metric of a resource.
type family struct {
	*Family
	where  string
	logV   int
	common map[string]string // the metric's own commonLabels
	base   labelPaths        // labelsFromPath, the resource's merged with the metric's
	each   evaluator
}

// labelPaths are compiled labelsFromPath: stars ("*", "prefix_*")
// copy a map, sorted by key; plain ones, sorted by label name, override
// what a star copied.
type labelPaths struct {
	stars []starLabel
	plain []pathLabel
}

type starLabel struct {
	prefix string // "" for "*", "prefix_" for "prefix_*", "" for "*key"
	path   valuePath
}

type pathLabel struct {
	name int // index in Set.names
	path valuePath
}

// labelName returns the name of l.
func (s *Set) labelName(l *label) string {
	if l.name >= 0 {
		return s.names[l.name]
	}
	return l.literal
}

// Resources returns the selectors of the resources the set reads: the
// watcher must cache them.
func (s *Set) Resources() []change.Selector {
	out := make([]change.Selector, 0, len(s.resources))
	for _, r := range s.resources {
		out = append(out, r.sel)
	}
	return out
}

// Families returns the metric families, sorted by name.
func (s *Set) Families() []*Family { return slices.Clone(s.families) }

// Empty reports whether the set has no resource.
func (s *Set) Empty() bool { return s == nil || len(s.resources) == 0 }

// Selects reports whether the set reads res.
func (s *Set) Selects(res change.Resource) bool {
	if s == nil {
		return false
	}
	for _, i := range s.byGroup[res.Group] {
		if s.resources[i].sel.Matches(res) {
			return true
		}
	}
	return false
}

// compiler collects the errors of one compilation, and the label names.
type compiler struct {
	errs   fileerr.List
	set    *Set
	byName map[string]*Family
}

func (c *compiler) errorf(path, format string, args ...any) {
	c.errs = append(c.errs, &fileerr.Error{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// name returns the index of a label name, adding it.
func (c *compiler) name(n string) int {
	if i, ok := c.set.nameIdx[n]; ok {
		return i
	}
	c.set.names = append(c.set.names, n)
	c.set.nameIdx[n] = len(c.set.names) - 1
	return len(c.set.names) - 1
}

// Compile compiles a spec: the `metrics:` section of a rules file
// (custom false) or the spec of a CustomResourceStateMetrics file (custom
// true), whose resources are then the CRD-served ones only and need a
// group, as in kube-state-metrics. Errors carry the field path under
// spec and no file position: Load adds those.
func Compile(spec Spec, custom bool) (*Set, error) {
	c := newCompiler()
	c.spec(&spec, "spec", custom)
	return c.finish()
}

func newCompiler() *compiler {
	return &compiler{
		set:    &Set{nameIdx: map[string]int{}},
		byName: map[string]*Family{},
	}
}

func (c *compiler) finish() (*Set, error) {
	if err := c.errs.Err(); err != nil {
		return nil, err
	}
	s := c.set
	s.byGroup = map[string][]int{}
	for i, r := range s.resources {
		s.byGroup[r.sel.Group] = append(s.byGroup[r.sel.Group], i)
	}
	slices.SortFunc(s.families, func(a, b *Family) int { return strings.Compare(a.Name, b.Name) })
	for i, f := range s.families {
		f.index = i
	}
	return s, nil
}

func (c *compiler) spec(sp *Spec, path string, custom bool) {
	for i := range sp.Resources {
		c.resource(&sp.Resources[i], fieldpath.Item(fieldpath.Child(path, "resources"), i), custom)
	}
}

func (c *compiler) resource(r *Resource, path string, custom bool) {
	gvk := r.GroupVersionKind
	gpath := fieldpath.Child(path, "groupVersionKind")
	switch {
	case gvk.Group == "*":
		c.errorf(fieldpath.Child(gpath, "group"), `must name one group, not "*"`)
	case gvk.Group == "" && custom:
		c.errorf(fieldpath.Child(gpath, "group"), `required: kube-state-metrics resolves custom resources by group ("" is the core group, which only a rules file's metrics section may read)`)
	}
	for _, v := range []struct{ key, val string }{{"group", gvk.Group}, {"version", gvk.Version}, {"kind", gvk.Kind}} {
		if strings.ContainsAny(v.val, " /\t\n") {
			c.errorf(fieldpath.Child(gpath, v.key), "%q is not a name", v.val)
		}
	}
	if r.ErrorLogV < 0 {
		c.errorf(fieldpath.Child(path, "errorLogV"), "must not be negative")
	}
	sel := change.Selector{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind, Custom: custom}
	if sel.Version == "" {
		sel.Version = "*" // kube-state-metrics: every version of the CRD
	}
	if sel.Kind == "*" {
		sel.Kind = ""
	}
	prefix := defaultPrefix
	if r.MetricNamePrefix != nil {
		prefix = *r.MetricNamePrefix
	}
	rm := &resourceMetrics{sel: sel, where: path, common: c.commonLabels(r.CommonLabels, fieldpath.Child(path, "commonLabels"))}
	c.labelsFromPath(r.LabelsFromPath, fieldpath.Child(path, "labelsFromPath"))
	if len(r.Metrics) == 0 {
		c.errorf(fieldpath.Child(path, "metrics"), "required: at least one metric")
	}
	for i := range r.Metrics {
		if f := c.family(r, &r.Metrics[i], prefix, fieldpath.Item(fieldpath.Child(path, "metrics"), i)); f != nil {
			rm.families = append(rm.families, f)
		}
	}
	c.set.resources = append(c.set.resources, rm)
}

// commonLabels checks label names written as keys: kube-state-metrics
// writes commonLabels as they are, so a name Prometheus refuses would
// break the whole exposition.
func (c *compiler) commonLabels(m map[string]string, path string) map[string]string {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !labelNameRE.MatchString(k) {
			c.errorf(fieldpath.Child(path, k), "%q is not a valid label name ([a-zA-Z_][a-zA-Z0-9_]*)", k)
		}
	}
	return m
}

// labelsFromPath compiles labelsFromPath (the resource's, a metric's or
// an each's).
func (c *compiler) labelsFromPath(m map[string][]string, path string) labelPaths {
	var lp labelPaths
	for _, k := range slices.Sorted(maps.Keys(m)) {
		p := fieldpath.Child(path, k)
		vp, err := compilePath(m[k])
		if err != nil {
			c.errorf(p, "%v", err)
			continue
		}
		if strings.HasPrefix(k, "*") || strings.HasSuffix(k, "*") {
			prefix := ""
			if strings.HasSuffix(k, "*") {
				prefix = k[:len(k)-1]
			}
			lp.stars = append(lp.stars, starLabel{prefix: prefix, path: vp})
			continue
		}
		name := sanitizeLabelName(k)
		if name == "" || name[0] >= '0' && name[0] <= '9' {
			c.errorf(p, "%q is not a valid label name once sanitized (%q): it must start with a letter or _", k, name)
			continue
		}
		lp.plain = append(lp.plain, pathLabel{name: c.name(name), path: vp})
	}
	return lp
}

// mergedLabelsFromPath merges the resource's labelsFromPath with the
// metric's, whose keys win.
func mergedLabelsFromPath(r, m map[string][]string) map[string][]string {
	out := maps.Clone(r)
	if out == nil {
		out = map[string][]string{}
	}
	maps.Copy(out, m)
	return out
}

func (c *compiler) family(r *Resource, g *Generator, prefix, path string) *family {
	name := g.Name
	if prefix != "" {
		name = prefix + "_" + g.Name
	}
	switch {
	case g.Name == "":
		c.errorf(fieldpath.Child(path, "name"), "required")
	case !metricNameRE.MatchString(name):
		c.errorf(fieldpath.Child(path, "name"), "%q is not a valid metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)", name)
	}
	if g.ErrorLogV < 0 {
		c.errorf(fieldpath.Child(path, "errorLogV"), "must not be negative")
	}
	typ := strings.ToLower(g.Each.Type)
	each := c.each(&g.Each, typ, fieldpath.Child(path, "each"))
	common := c.commonLabels(g.CommonLabels, fieldpath.Child(path, "commonLabels"))
	c.labelsFromPath(g.LabelsFromPath, fieldpath.Child(path, "labelsFromPath")) // placed errors
	// Both halves were checked where they are written: the merge's
	// errors would repeat theirs.
	n := len(c.errs)
	base := c.labelsFromPath(mergedLabelsFromPath(r.LabelsFromPath, g.LabelsFromPath), "")
	c.errs = c.errs[:n]
	if each == nil || g.Name == "" {
		return nil
	}
	fam := c.byName[name]
	switch {
	case fam == nil:
		fam = &Family{Name: name, Help: g.Help, Type: typ}
		c.byName[name] = fam
		c.set.families = append(c.set.families, fam)
	case fam.Type != typ:
		c.errorf(fieldpath.Child(path, "name"), "metric %s is a %s here and a %s elsewhere: one name, one type", name, typ, fam.Type)
	}
	logV := g.ErrorLogV
	if logV == 0 {
		logV = r.ErrorLogV
	}
	return &family{Family: fam, where: path, logV: logV, common: common, base: base, each: each}
}

func (c *compiler) each(m *Metric, typ, path string) evaluator {
	// `gauge: null` (or {}) beside another is no second metric.
	set := 0
	for _, b := range []bool{m.Gauge != nil && !reflect.ValueOf(*m.Gauge).IsZero(), m.StateSet != nil && !reflect.ValueOf(*m.StateSet).IsZero(), m.Info != nil && !reflect.ValueOf(*m.Info).IsZero()} {
		if b {
			set++
		}
	}
	if set > 1 {
		c.errorf(path, "has more than one of gauge, stateSet and info: type says which one counts, and kube-state-metrics would ignore the others")
	}
	compile := func(typ, key string, p []string) valuePath {
		vp, err := compilePath(p)
		if err != nil {
			c.errorf(fieldpath.Child(fieldpath.Child(path, typ), key), "%v", err)
		}
		return vp
	}
	switch typ {
	case TypeGauge:
		g := m.Gauge
		if g == nil {
			c.errorf(fieldpath.Child(path, "gauge"), "required: type is Gauge")
			return nil
		}
		gp := fieldpath.Child(path, "gauge")
		e := &gaugeEval{
			set:          c.set,
			common:       common{path: compile("gauge", "path", g.Path), labels: c.labelsFromPath(g.LabelsFromPath, fieldpath.Child(gp, "labelsFromPath"))},
			valueFrom:    compile("gauge", "valueFrom", g.ValueFrom),
			nilIsZero:    g.NilIsZero,
			labelFromKey: -1,
		}
		if g.LabelFromKey != "" {
			if !labelNameRE.MatchString(g.LabelFromKey) {
				c.errorf(fieldpath.Child(gp, "labelFromKey"), "%q is not a valid label name", g.LabelFromKey)
			}
			e.labelFromKey = c.name(g.LabelFromKey)
		}
		e.keyOnly = keyOnlyValueFrom(e.valueFrom)
		return e
	case TypeStateSet:
		s := m.StateSet
		if s == nil {
			c.errorf(fieldpath.Child(path, "stateSet"), "required: type is StateSet")
			return nil
		}
		sp := fieldpath.Child(path, "stateSet")
		if !labelNameRE.MatchString(s.LabelName) {
			c.errorf(fieldpath.Child(sp, "labelName"), "%q is not a valid label name: each entry of list is a series with this label", s.LabelName)
		}
		if len(s.List) == 0 {
			c.errorf(fieldpath.Child(sp, "list"), "required: the states, one series each")
		}
		return &stateSetEval{
			set:       c.set,
			common:    common{path: compile("stateSet", "path", s.Path), labels: c.labelsFromPath(s.LabelsFromPath, fieldpath.Child(sp, "labelsFromPath"))},
			valueFrom: compile("stateSet", "valueFrom", s.ValueFrom),
			list:      slices.Clone(s.List),
			labelName: c.name(s.LabelName),
		}
	case TypeInfo:
		in := m.Info
		if in == nil {
			c.errorf(fieldpath.Child(path, "info"), "required: type is Info")
			return nil
		}
		ip := fieldpath.Child(path, "info")
		e := &infoEval{
			set:          c.set,
			common:       common{path: compile("info", "path", in.Path), labels: c.labelsFromPath(in.LabelsFromPath, fieldpath.Child(ip, "labelsFromPath"))},
			labelFromKey: -1,
		}
		if in.LabelFromKey != "" {
			if !labelNameRE.MatchString(in.LabelFromKey) {
				c.errorf(fieldpath.Child(ip, "labelFromKey"), "%q is not a valid label name", in.LabelFromKey)
			}
			e.labelFromKey = c.name(in.LabelFromKey)
		}
		return e
	case "":
		c.errorf(fieldpath.Child(path, "type"), "required: Gauge, StateSet or Info")
	case "counter":
		c.errorf(fieldpath.Child(path, "type"), "Counter is not supported (kube-state-metrics refuses it too): a field's value is a gauge")
	default:
		c.errorf(fieldpath.Child(path, "type"), "unknown metric type %q: Gauge, StateSet or Info", m.Type)
	}
	return nil
}

// keyOnlyValueFrom returns the key of a one-part valueFrom written in
// brackets ("[key]" but not "[]"), which kube-state-metrics reads as the
// key of a map item on a gauge's map; "" otherwise.
func keyOnlyValueFrom(p valuePath) string {
	s := p.String()
	if !strings.Contains(s, ",") && len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		return s[1 : len(s)-1]
	}
	return ""
}
