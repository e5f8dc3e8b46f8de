//go:build !linux

package testenv

import (
	"testing"
	"time"
)

// SpentCPU returns how long fn took: elsewhere than on Linux a thread's
// CPU time is not read, and the wall clock stands in for it.
func SpentCPU(t testing.TB, fn func()) time.Duration {
	t.Helper()
	start := time.Now()
	fn()
	return time.Since(start)
}
