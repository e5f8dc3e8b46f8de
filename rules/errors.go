package rules

import (
	"fmt"
	"sort"
	"strings"
)

// Error is one load or validation error: where it is (file, 1-based line
// and column), which field it is about (a path such as
// rules[2].fields[0].path) and what is wrong. Compile's errors have a
// Path but no File nor Line: the loader adds those.
type Error struct {
	File string
	Line int
	Col  int
	// Path is the field path inside the file ("" for the file itself).
	Path string
	Msg  string

	// exprLine and exprCol locate a CEL error inside the expression at
	// Path; the loader maps them into the file where the expression is a
	// one-line scalar, and clears them. Otherwise Error mentions them.
	exprLine, exprCol int
}

// Error formats e as FILE:LINE:COL: PATH: MESSAGE (PATH: MESSAGE without
// a file).
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" || e.Line > 0 {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d:%d", e.Line, max(e.Col, 1))
		}
		b.WriteString(": ")
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	if e.exprLine > 0 {
		fmt.Fprintf(&b, " (at line %d, column %d of the expression)", e.exprLine, e.exprCol)
	}
	// One error, one line: a message that quotes user input (a CEL
	// expression spanning lines, say) keeps its newlines escaped.
	return strings.ReplaceAll(b.String(), "\n", `\n`)
}

// ErrorList is every error of one load, in file and position order.
// Compile, Load, Parse and Validate (and the loader of package cases)
// return one (as error) when anything is wrong, so that a user sees all
// the problems of a file in one run.
type ErrorList []*Error

// Error returns the errors one per line.
func (l ErrorList) Error() string {
	parts := make([]string, len(l))
	for i, e := range l {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "\n")
}

// Unwrap returns the errors, for errors.Is and errors.As.
func (l ErrorList) Unwrap() []error {
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errs
}

// sort orders l by file (in the order files first appear), line and
// column, keeping the order of errors at the same position.
func (l ErrorList) sort() {
	files := map[string]int{}
	for _, e := range l {
		if _, ok := files[e.File]; !ok {
			files[e.File] = len(files)
		}
	}
	sort.SliceStable(l, func(i, j int) bool {
		a, b := l[i], l[j]
		if a.File != b.File {
			return files[a.File] < files[b.File]
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
}

// Err returns l, sorted, as an error, or nil when it is empty.
func (l ErrorList) Err() error {
	if len(l) == 0 {
		return nil
	}
	l.sort()
	return l
}
