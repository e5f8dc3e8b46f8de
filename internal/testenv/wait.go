package testenv

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"
)

// Eventually polls cond every 20 ms until it holds, and fails the test when
// timeout passes first, saying what it waited for. Tests use it instead of
// sleeping.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Poll(timeout, cond) {
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

// Poll polls cond every 20 ms until it holds, and reports whether it did
// before timeout passed: for a test that says more than Eventually when
// it does not.
func Poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// SyncBuffer is a bytes.Buffer that one goroutine may write while others
// read: a process's or an app's output under test.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// RunUntilCleanup runs run in a goroutine with a context that ends when
// the test does; the test's cleanup waits up to timeout for run to return
// and reports its error, or that it did not return. Cleanups registered
// before it run after run returned.
func RunUntilCleanup(t testing.TB, timeout time.Duration, run func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(timeout):
			t.Errorf("Run did not return %s after its context ended", timeout)
		}
	})
}
