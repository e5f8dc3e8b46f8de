package rules

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/fieldwatch/fieldwatch/fileerr"
	"github.com/fieldwatch/fieldwatch/internal/fieldpath"
	"github.com/fieldwatch/fieldwatch/internal/yamlstrict"
)

// Load reads, compiles and merges rules files: the rules of all files, in
// the order the paths are given, with names unique across files. Every
// error of every file is reported (a fileerr.List, one FILE:LINE:COL:
// PATH: MESSAGE per line); when there is any, Load returns no Set.
func Load(paths ...string) (*Set, error) {
	if len(paths) == 0 {
		return nil, errors.New("no rules file given")
	}
	var all []*Rule
	var errs fileerr.List
	for _, p := range paths {
		data, err := readFile(p)
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err // the path is already in the message
			}
			errs = append(errs, &fileerr.Error{File: p, Msg: fmt.Sprintf("read: %v", err)})
			continue
		}
		rules, ferrs := parseFile(p, data)
		all = append(all, rules...)
		errs = append(errs, ferrs...)
	}
	errs = append(errs, duplicateNames(all)...)
	if err := errs.Err(); err != nil {
		return nil, err
	}
	return newSet(all), nil
}

// readFile reads a rules file, or as much of it as tells that it is larger
// than a file may be (yamlstrict.MaxBytes): a rules path pointed at a
// device or a huge file is an error, not a memory exhausted.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, yamlstrict.MaxBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > yamlstrict.MaxBytes {
		return nil, fmt.Errorf("larger than the %d bytes a rules file may have", yamlstrict.MaxBytes)
	}
	return data, nil
}

// Parse compiles one rules file's content; name is the file name used in
// error positions.
func Parse(name string, data []byte) (*Set, error) {
	rules, errs := parseFile(name, data)
	errs = append(errs, duplicateNames(rules)...)
	if err := errs.Err(); err != nil {
		return nil, err
	}
	return newSet(rules), nil
}

// Validate loads the files and returns what Load would: nil when they are
// valid, a fileerr.List otherwise. It is `fieldwatch validate`.
func Validate(paths ...string) error {
	_, err := Load(paths...)
	return err
}

// parseFile decodes and compiles one file, and places every error in it.
// It returns its rules and every error; when there are errors, the rules
// are only good for checking duplicate names.
func parseFile(name string, data []byte) ([]*Rule, fileerr.List) {
	var f File
	pos, derrs := yamlstrict.Unmarshal(data, &f)
	errs := derrs
	for _, e := range errs {
		e.File = name
	}
	if pos.Node("") == nil {
		return nil, errs // not a document
	}
	if !pos.Has("rules") && !pos.Has("metrics") {
		line, col := pos.At("rules")
		errs = append(errs, &fileerr.Error{File: name, Line: line, Col: col, Path: "rules", Msg: "required: a rules file is a mapping with a rules list (or a metrics section)"})
	}
	for i := range f.Rules {
		// A null list is an empty one: `on:` alone is as wrong as `on: []`.
		if p := fieldpath.Item("rules", i) + ".on"; pos.Has(p) && f.Rules[i].On == nil {
			f.Rules[i].On = []string{}
		}
		// `crd:` alone is `crd: {}`.
		if p := fieldpath.Item("rules", i) + ".crd"; pos.Has(p) && f.Rules[i].CRD == nil {
			f.Rules[i].CRD = &CRDSpec{}
		}
	}
	rules, cerrs := compileFile(&f)
	for _, e := range cerrs {
		place(name, pos, e)
	}
	for i, r := range rules {
		p := fieldpath.Item("rules", i)
		line, col := pos.At(p)
		r.Source = fmt.Sprintf("%s:%d:%d", name, line, col)
		r.nameErr.File = name
		r.nameErr.Line, r.nameErr.Col = pos.At(p + ".name")
		r.where.place(name, pos)
	}
	return rules, append(errs, cerrs...)
}

// place sets the file position of a compile error: where its field was
// written or, when the file lacks it, its closest parent. A CEL error in
// a one-line expression points into the expression.
func place(file string, pos *yamlstrict.Positions, e *fileerr.Error) {
	e.File = file
	e.Line, e.Col = pos.At(e.Path)
	n := pos.Node(e.Path)
	if e.ExprLine == 0 || n == nil || strings.Contains(n.Value, "\n") {
		return
	}
	switch n.Style {
	case 0:
		e.Col = n.Column + e.ExprCol - 1
	case yaml.SingleQuotedStyle, yaml.DoubleQuotedStyle:
		e.Col = n.Column + e.ExprCol
	default:
		return
	}
	e.ExprLine, e.ExprCol = 0, 0
}
