// Package depcheck is the one check, for tests, that a package imports only
// what its doc.go allows. A package's deps_test.go calls it:
//
//	func TestDependencies(t *testing.T) {
//		depcheck.Check(t, ".", "github.com/fieldwatch/fieldwatch/rules", "k8s.io/client-go")
//	}
//
// Check fails the test for every package that `go list -deps` names under a
// banned import path prefix, CheckExcept lets a few packages under such a
// prefix through, and StdlibOnly allows nothing outside the standard
// library. depcheck imports only the standard library, so that a package
// kept free of client-go can use it without taking client-go into its test
// binary.
package depcheck
