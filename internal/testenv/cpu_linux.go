//go:build linux

package testenv

import (
	"runtime"
	"syscall"
	"testing"
	"time"
)

// SpentCPU runs fn on an OS thread of its own and returns the CPU time
// (user and system) that thread spent: unlike the wall clock, other work
// loading the machine does not count. Tests bound work with it instead of
// with the time it took; work fn hands to other goroutines is not
// counted.
func SpentCPU(t testing.TB, fn func()) time.Duration {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const rusageThread = 1 // Linux's RUSAGE_THREAD: the calling thread
	var before, after syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &before); err != nil {
		t.Fatal(err)
	}
	fn()
	if err := syscall.Getrusage(rusageThread, &after); err != nil {
		t.Fatal(err)
	}
	return time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
}
