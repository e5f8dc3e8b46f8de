// Package depcheck is the one check, for tests, that a package keeps to
// what its doc.go says it imports: `go list -deps` of the package must
// name none of the banned import path prefixes. It imports only the
// standard library, so that a package kept free of client-go can use it
// in its tests without taking client-go into its test binary.
package depcheck
