package testenv

import (
	"fmt"
	"os"
	"testing"
)

var shared *Env

// Main starts one control plane for a test package, runs its tests and
// stops the control plane. Call it from TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m, testenv.Options{}) }
//
// When the control plane cannot start, every test of the package fails with
// the reason: exit code 1, never a skip.
func Main(m *testing.M, opts Options) {
	e, err := New(opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: start control plane: %v\n", err)
		os.Exit(1)
	}
	shared = e
	code := m.Run()
	if err := e.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: stop control plane: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// Shared returns the control plane started by Main.
func Shared(t testing.TB) *Env {
	t.Helper()
	if shared == nil {
		t.Fatal("testenv.Shared called without testenv.Main in TestMain")
	}
	return shared
}
