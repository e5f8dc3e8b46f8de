//go:build !linux

package history

import "time"

// threadCPU cannot tell a thread's CPU time on this system:
// fieldwatch_history_cpu_seconds_total stays at 0.
func threadCPU() (time.Duration, bool) { return 0, false }
