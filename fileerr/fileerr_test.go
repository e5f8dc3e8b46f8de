package fileerr

import (
	"errors"
	"fmt"
	"testing"
)

func TestErrorFormat(t *testing.T) {
	tests := []struct {
		name string
		e    Error
		want string
	}{
		{"everything", Error{File: "f.yaml", Line: 3, Col: 5, Path: "rules[0].name", Msg: "required"}, "f.yaml:3:5: rules[0].name: required"},
		{"no column", Error{File: "f.yaml", Line: 3, Msg: "bad"}, "f.yaml:3:1: bad"},
		{"no line", Error{File: "f.yaml", Path: "rules", Msg: "read: no such file"}, "f.yaml: rules: read: no such file"},
		{"no file", Error{Line: 16, Col: 1, Path: "base", Msg: "unknown key"}, "16:1: base: unknown key"},
		{"path only", Error{Path: "rules[2].when", Msg: "CEL: bad"}, "rules[2].when: CEL: bad"},
		{"message only", Error{Msg: "empty"}, "empty"},
		{"in an expression", Error{Path: "rules[0].when", Msg: "CEL: bad", ExprLine: 2, ExprCol: 7}, "rules[0].when: CEL: bad (at line 2, column 7 of the expression)"},
		{"newlines escaped", Error{File: "f", Line: 1, Col: 1, Msg: "a\nb"}, `f:1:1: a\nb`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.e.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestListErr(t *testing.T) {
	if err := List(nil).Err(); err != nil {
		t.Fatalf("an empty List is %v, not nil", err)
	}
	b3 := &Error{File: "b", Line: 3, Msg: "b3"}
	a9 := &Error{File: "a", Line: 9, Msg: "a9"}
	b1 := &Error{File: "b", Line: 1, Col: 4, Msg: "b1"}
	b1first := &Error{File: "b", Line: 1, Col: 2, Msg: "b1 first"}
	b1same := &Error{File: "b", Line: 1, Col: 4, Msg: "b1 same"}
	err := List{b3, a9, b1, b1first, b1same}.Err()
	// b first appeared first: files keep that order.
	want := "b:1:2: b1 first\nb:1:4: b1\nb:1:4: b1 same\nb:3:1: b3\na:9:1: a9"
	if err.Error() != want {
		t.Errorf("Err() =\n%s\nwant\n%s", err, want)
	}
	wrapped := fmt.Errorf("load: %w", err)
	var list List
	if !errors.As(wrapped, &list) || len(list) != 5 {
		t.Errorf("errors.As(List) = %v", list)
	}
	var one *Error
	if !errors.As(wrapped, &one) || one != b1first {
		t.Errorf("errors.As(*Error) = %v, want the first error", one)
	}
}
