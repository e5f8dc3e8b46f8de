package fileerr

import (
	"fmt"
	"sort"
	"strings"
)

// Error is one load or validation error: where it is (file, 1-based line
// and column), which field it is about (a path such as
// rules[2].fields[0].path) and what is wrong. An error found before the
// file is known (a compile error, a decoding error) has no File, and one
// about a file as a whole no Line: the loader adds what it knows.
type Error struct {
	File string
	// Line and Col are 1-based; 0 when unknown.
	Line, Col int
	// Path is the field path inside the file ("" for the file itself).
	Path string
	Msg  string
	// ExprLine and ExprCol locate an error inside the expression at Path
	// (a CEL expression): a loader that can map them into the file (the
	// expression is a one-line scalar) does so and clears them;
	// otherwise Error mentions them.
	ExprLine, ExprCol int
}

// Error formats e as FILE:LINE:COL: PATH: MESSAGE, leaving out what e
// lacks (LINE:COL: PATH: MESSAGE without a file, PATH: MESSAGE without
// either), on one line: newlines in the message are escaped.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		if e.File != "" {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%d:%d", e.Line, max(e.Col, 1))
	}
	if b.Len() > 0 {
		b.WriteString(": ")
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	if e.ExprLine > 0 {
		fmt.Fprintf(&b, " (at line %d, column %d of the expression)", e.ExprLine, e.ExprCol)
	}
	// One error, one line: a message that quotes user input (a CEL
	// expression spanning lines, say) keeps its newlines escaped.
	return strings.ReplaceAll(b.String(), "\n", `\n`)
}

// List is every error of one load, in file and position order once Err
// has sorted it.
type List []*Error

// Error returns the errors one per line.
func (l List) Error() string {
	parts := make([]string, len(l))
	for i, e := range l {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "\n")
}

// Unwrap returns the errors, for errors.Is and errors.As.
func (l List) Unwrap() []error {
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errs
}

// Err returns l sorted, as an error, or nil when it is empty. The order
// is by file (in the order files first appear), line and column, keeping
// the order of errors at the same position.
func (l List) Err() error {
	if len(l) == 0 {
		return nil
	}
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
	return l
}
