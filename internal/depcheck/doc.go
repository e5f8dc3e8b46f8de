// Package depcheck is the one check, for tests, that a package keeps to
// what its doc.go says it imports: `go list -deps` of the package must
// name none of the banned import path prefixes (Check, CheckExcept for
// the few packages a banned prefix lets through), or nothing outside the
// standard library (StdlibOnly). It imports only the standard library,
// so that a package kept free of client-go can use it in its tests
// without taking client-go into its test binary.
package depcheck
