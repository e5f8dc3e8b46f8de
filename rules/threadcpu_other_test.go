//go:build !linux

package rules

import (
	"testing"
	"time"
)

// spentCPU returns how long fn took (elsewhere than on Linux, the wall
// clock).
func spentCPU(t *testing.T, fn func()) time.Duration {
	start := time.Now()
	fn()
	return time.Since(start)
}
