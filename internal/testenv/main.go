package testenv

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

var (
	sharedOpts Options
	sharedOnce sync.Once
	shared     *Env
	sharedErr  error
)

// Main runs a test package whose tests share one control plane: the first
// call to Shared starts it, and Main stops it after the tests. Call it from
// TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m, testenv.Options{}) }
//
// Starting lazily keeps the control plane out of test binaries that need
// none, such as the worker processes of `go test -fuzz`. The after
// functions run once the control plane has stopped (to stop what the
// package started for it, such as an audit webhook receiver).
func Main(m *testing.M, opts Options, after ...func()) {
	sharedOpts = opts
	code := m.Run()
	defer func() {
		for _, f := range after {
			f()
		}
		os.Exit(code)
	}()
	if shared != nil {
		if err := shared.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: stop control plane: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
}

// Shared returns the package's control plane, starting it on first use.
// When it cannot start, the test fails with the reason (never a skip);
// under `go test -short` (the unit tier) the test is skipped instead.
func Shared(t testing.TB) *Env {
	t.Helper()
	SkipShort(t, NeedsControlPlane)
	sharedOnce.Do(func() { shared, sharedErr = New(sharedOpts) })
	if sharedErr != nil {
		t.Fatalf("start control plane: %v", sharedErr)
	}
	return shared
}
