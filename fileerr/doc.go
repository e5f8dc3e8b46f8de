// Package fileerr is the error of fieldwatch's file loaders: an Error says
// where a problem is (file, line, column, the field path inside the file)
// and what it is, on one line:
//
//	FILE:LINE:COL: PATH: MESSAGE
//
// and a List holds every error of one load, so that a user sees all the
// problems of a file in one run. internal/yamlstrict reports its decoding
// errors as Errors (without the file, which its caller adds); rules' Load,
// Parse, Compile and Validate and internal/cases' Load and Parse return a
// List; crd/diff's manifest readers return an Error.
//
// A Go user of those packages reads the position with errors.As:
//
//	var list fileerr.List
//	if errors.As(err, &list) {
//		for _, e := range list {
//			fmt.Println(e.File, e.Line, e.Col, e.Path, e.Msg)
//		}
//	}
//
// That is why the package is not internal: rules and crd/diff, which a Go
// program can import, return its types. It imports only the standard
// library (deps_test.go checks it), so that any loader can use it.
package fileerr
