package fieldmetrics

import (
	"errors"
	"fmt"
)

// The evaluators below give the series of one metric for one object as
// kube-state-metrics' compiledGauge, compiledStateSet and compiledInfo do
// (pkg/customresourcestate), on the value its each.path points to: the
// same series, labels and values for the same object, the same values
// skipped and the same errors. Their output goes to an evalOut, whose
// buffers are reused from one object to the next.

// evaluator gives the series of one metric's each.
type evaluator interface {
	// eachPath is each.path.
	eachPath() valuePath
	// values adds the series of v, the value at each.path, to out.
	values(v any, out *evalOut)
}

// common is what every each has: its path and labelsFromPath.
type common struct {
	path   valuePath
	labels labelPaths
}

func (c *common) eachPath() valuePath { return c.path }

// label is one label of a series: a name of the configuration (name, an
// index in Set.names) or one read from an object (literal, name -1).
type label struct {
	name    int
	literal string
	value   string
}

// evalSeries is one series in an evalOut: labels[start:end], value.
type evalSeries struct {
	start, end int
	value      float64
}

// evalOut collects the series of one metric of one object, and the
// errors met on the way.
type evalOut struct {
	labels []label
	series []evalSeries
	errs   []error
	// open is the index in labels where the series being built starts.
	open int
}

func (o *evalOut) reset() {
	o.labels, o.series, o.errs = o.labels[:0], o.series[:0], o.errs[:0]
}

// begin starts a series.
func (o *evalOut) begin() { o.open = len(o.labels) }

// drop abandons the series being built.
func (o *evalOut) drop() { o.labels = o.labels[:o.open] }

// commit ends the series being built with value v.
func (o *evalOut) commit(v float64) {
	o.series = append(o.series, evalSeries{start: o.open, end: len(o.labels), value: v})
}

// set sets a label of the series being built, replacing one of the same
// name (as kube-state-metrics' map of labels does).
func (o *evalOut) set(l label) {
	for i := o.open; i < len(o.labels); i++ {
		if sameName(&o.labels[i], &l) {
			o.labels[i].value = l.value
			return
		}
	}
	o.labels = append(o.labels, l)
}

func sameName(a, b *label) bool {
	if a.name >= 0 || b.name >= 0 {
		return a.name == b.name
	}
	return a.literal == b.literal
}

func (o *evalOut) errorf(format string, args ...any) {
	o.errs = append(o.errs, fmt.Errorf(format, args...))
}

// addPathLabels sets the labels lp reads from obj on the series being
// built: first what the stars copy from maps (keys sanitized), then the
// plain ones, which win.
func (o *evalOut) addPathLabels(s *Set, obj any, lp *labelPaths) {
	for i := range lp.stars {
		st := &lp.stars[i]
		m, ok := st.path.Get(obj).(map[string]any)
		if !ok {
			continue
		}
		for k, v := range m {
			name := sanitizeLabelName(st.prefix + k)
			if name == "" || name[0] >= '0' && name[0] <= '9' {
				continue // no valid label name: kube-state-metrics would break the exposition
			}
			l := label{name: -1, literal: name, value: labelValue(v)}
			if idx, ok := s.nameIdx[name]; ok {
				l = label{name: idx, value: l.value}
			}
			o.set(l)
		}
	}
	for i := range lp.plain {
		pl := &lp.plain[i]
		v := pl.path.Get(obj)
		if v == nil {
			continue
		}
		o.set(label{name: pl.name, value: labelValue(v)})
	}
}

// gaugeEval is a Gauge.
type gaugeEval struct {
	common
	valueFrom    valuePath
	nilIsZero    bool
	labelFromKey int // -1: none
	// keyOnly is valueFrom's one part, which on a map names the item
	// whose value is the value (kube-state-metrics' shortcut).
	keyOnly string
	set     *Set
}

var errNilPath = errors.New("got nil while resolving path")

// value resolves valueFrom in it: ok false gives no series (and, with
// err, an error).
func (g *gaugeEval) value(it any) (float64, bool, error) {
	got := g.valueFrom.Get(it)
	if got == nil {
		switch {
		case g.nilIsZero:
			return 0, true, nil
		case it == nil:
			return 0, false, errNilPath
		}
		return 0, false, nil
	}
	f, err := toFloat64(got, g.nilIsZero)
	if err != nil {
		return 0, false, fmt.Errorf("%s: %w", g.valueFrom, err)
	}
	return f, true, nil
}

func (g *gaugeEval) values(v any, out *evalOut) {
	switch iter := v.(type) {
	case map[string]any:
		for key, it := range iter {
			out.begin()
			var f float64
			if g.keyOnly != "" && key == g.keyOnly {
				var err error
				if f, err = toFloat64(it, g.nilIsZero); err != nil {
					out.errorf("%s: [%s]: %w", g.path, key, err)
					continue
				}
			} else {
				var ok bool
				if f, ok, _ = g.value(it); !ok {
					continue // kube-state-metrics drops these errors
				}
			}
			if key != "" && g.labelFromKey >= 0 {
				out.set(label{name: g.labelFromKey, value: key})
			}
			out.addPathLabels(g.set, it, &g.labels)
			out.addPathLabels(g.set, v, &g.labels)
			out.commit(f)
		}
	case []any:
		for i, it := range iter {
			out.begin()
			f, ok, err := g.value(it)
			if err != nil {
				out.errorf("%s: [%d]: %w", g.path, i, err)
				continue
			}
			if !ok {
				continue
			}
			out.addPathLabels(g.set, it, &g.labels)
			out.commit(f)
		}
	default:
		out.begin()
		f, ok, err := g.value(v)
		if err != nil {
			out.errorf("%s: %w", g.path, err)
			return
		}
		if !ok {
			return
		}
		out.addPathLabels(g.set, v, &g.labels)
		out.commit(f)
	}
}

// stateSetEval is a StateSet.
type stateSetEval struct {
	common
	valueFrom valuePath
	list      []string
	labelName int
	set       *Set
}

func (s *stateSetEval) values(v any, out *evalOut) {
	if items, ok := v.([]any); ok {
		for _, it := range items {
			s.one(it, out)
		}
		return
	}
	s.one(v, out)
}

func (s *stateSetEval) one(v any, out *evalOut) {
	comparable := s.valueFrom.Get(v)
	if comparable == nil {
		return
	}
	value, ok := comparable.(string)
	if !ok {
		full := s.path
		if len(s.valueFrom) > 0 {
			full = append(append(valuePath{}, s.path...), s.valueFrom...)
		}
		out.errorf("%s: expected value for path to be string, got %T", full, comparable)
		return
	}
	for _, entry := range s.list {
		out.begin()
		out.set(label{name: s.labelName, value: entry})
		out.addPathLabels(s.set, v, &s.labels)
		f := 0.0
		if value == entry {
			f = 1
		}
		out.commit(f)
	}
}

// infoEval is an Info.
type infoEval struct {
	common
	labelFromKey int // -1: none
	set          *Set
}

func (in *infoEval) values(v any, out *evalOut) {
	switch iter := v.(type) {
	case []any:
		for _, it := range iter {
			in.one(it, out)
		}
	case map[string]any:
		n := len(out.series)
		in.one(v, out)
		if in.labelFromKey >= 0 {
			key := label{name: in.labelFromKey}
			for _, sr := range out.series[n:] {
				for _, l := range out.labels[sr.start:sr.end] {
					if sameName(&l, &key) {
						out.errorf("%s: labelFromKey (%s) generated labels conflict with labelsFromPath, consider renaming it", in.path, in.set.names[in.labelFromKey])
					}
				}
			}
		}
		for key, it := range iter {
			out.begin()
			if key != "" && in.labelFromKey >= 0 {
				out.set(label{name: in.labelFromKey, value: key})
			}
			out.addPathLabels(in.set, it, &in.labels)
			if len(out.labels) > out.open {
				out.commit(1)
			} else {
				out.drop()
			}
		}
	default:
		in.one(v, out)
	}
}

// one gives the series of one item: value 1 with the labels read from
// it, none when it has none.
func (in *infoEval) one(v any, out *evalOut) {
	if v == nil {
		return
	}
	out.begin()
	out.addPathLabels(in.set, v, &in.labels)
	if len(out.labels) > out.open {
		out.commit(1)
		return
	}
	out.drop()
}
