package fieldmetrics

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"gopkg.in/yaml.v3"

	"github.com/fieldwatch/fieldwatch/fileerr"
	"github.com/fieldwatch/fieldwatch/internal/yamlstrict"
)

// KindCRS is the kind of a kube-state-metrics CustomResourceStateMetrics
// file.
const KindCRS = "CustomResourceStateMetrics"

// Load reads and compiles the metrics configuration of `fieldwatch run`:
// config, a CustomResourceStateMetrics file ("" for none; --metrics-config),
// and the `metrics:` sections of the rules files, into one Set. It
// returns a nil Set when none of them defines a metric. Every error comes
// back at once, a fileerr.List of FILE:LINE:COL: PATH: MESSAGE; with any,
// there is no Set.
func Load(config string, rulesFiles ...string) (*Set, error) {
	c := newCompiler()
	var errs fileerr.List
	defined := false
	if config != "" {
		data, err := readFile(config)
		if err != nil {
			errs = append(errs, &fileerr.Error{File: config, Msg: fmt.Sprintf("read: %v", err)})
		} else {
			defined = true
			errs = append(errs, c.crsFile(config, data)...)
		}
	}
	for _, p := range rulesFiles {
		data, err := readFile(p)
		if err != nil {
			errs = append(errs, &fileerr.Error{File: p, Msg: fmt.Sprintf("read: %v", err)})
			continue
		}
		has, ferrs := c.rulesFile(p, data)
		defined = defined || has
		errs = append(errs, ferrs...)
	}
	if !defined && len(errs) == 0 {
		return nil, nil
	}
	return c.result(errs)
}

// Parse compiles the content of a CustomResourceStateMetrics file; name is
// the file name used in error positions.
func Parse(name string, data []byte) (*Set, error) {
	c := newCompiler()
	return c.result(c.crsFile(name, data))
}

// ParseRules compiles the `metrics:` section of a rules file's content;
// nil when it has none.
func ParseRules(name string, data []byte) (*Set, error) {
	c := newCompiler()
	has, errs := c.rulesFile(name, data)
	if !has && len(errs) == 0 {
		return nil, nil
	}
	return c.result(errs)
}

func (c *compiler) result(errs fileerr.List) (*Set, error) {
	set, err := c.finish()
	var l fileerr.List
	if errors.As(err, &l) {
		errs = append(errs, l...)
	}
	if err := errs.Err(); err != nil {
		return nil, err
	}
	return set, nil
}

// crsFile decodes and compiles a CustomResourceStateMetrics file.
func (c *compiler) crsFile(name string, data []byte) fileerr.List {
	var f File
	pos, errs := yamlstrict.Unmarshal(data, &f)
	for _, e := range errs {
		e.File = name
	}
	if pos.Node("") == nil {
		return errs
	}
	if f.Kind != "" && f.Kind != KindCRS {
		line, col := pos.At("kind")
		errs = append(errs, &fileerr.Error{File: name, Line: line, Col: col, Path: "kind", Msg: fmt.Sprintf("must be %s, not %q", KindCRS, f.Kind)})
	}
	if !pos.Has("spec") {
		errs = append(errs, &fileerr.Error{File: name, Line: 1, Col: 1, Path: "spec", Msg: "required: a CustomResourceStateMetrics file has a spec with resources"})
	}
	c.placed(name, pos, func() { c.spec(&f.Spec, "spec", true) })
	return errs
}

// rulesFile is a rules file as package fieldmetrics reads it: its metrics
// section, the rest left to package rules.
type rulesFile struct {
	Rules   *yaml.Node `yaml:"rules"`
	Metrics *Spec      `yaml:"metrics"`
}

// rulesFile decodes and compiles the metrics section of a rules file, and
// says whether it has one.
func (c *compiler) rulesFile(name string, data []byte) (bool, fileerr.List) {
	var f rulesFile
	pos, errs := yamlstrict.Unmarshal(data, &f)
	for _, e := range errs {
		e.File = name
	}
	if f.Metrics == nil {
		return false, errs
	}
	c.placed(name, pos, func() { c.spec(f.Metrics, "metrics", false) })
	return true, errs
}

// placed runs compile and places the errors and resources it adds in the
// file.
func (c *compiler) placed(name string, pos *yamlstrict.Positions, compile func()) {
	n, first := len(c.errs), len(c.set.resources)
	compile()
	for _, e := range c.errs[n:] {
		e.File = name
		e.Line, e.Col = pos.At(e.Path)
	}
	for _, r := range c.set.resources[first:] {
		line, col := pos.At(r.where)
		r.where = fmt.Sprintf("%s:%d:%d", name, line, col)
	}
}

// readFile reads a file of at most yamlstrict.MaxBytes.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return nil, pe.Err
		}
		return nil, err
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, yamlstrict.MaxBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > yamlstrict.MaxBytes {
		return nil, fmt.Errorf("larger than the %d bytes a file may have", yamlstrict.MaxBytes)
	}
	return data, nil
}
