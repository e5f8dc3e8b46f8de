package testenv

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// PollInterval is how often Eventually, EventuallyWhy and Poll check
// their condition.
const PollInterval = 20 * time.Millisecond

// Eventually polls cond every PollInterval until it holds, and fails the
// test when timeout passes first, saying what it waited for. Tests use it
// instead of sleeping.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Poll(timeout, cond) {
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

// EventuallyWhy is Eventually with a condition that says why it does not
// hold yet: the failure reports the last reason.
func EventuallyWhy(t testing.TB, timeout time.Duration, what string, cond func() (ok bool, why string)) {
	t.Helper()
	var why string
	if !Poll(timeout, func() bool {
		var ok bool
		ok, why = cond()
		return ok
	}) {
		t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, why)
	}
}

// Poll polls cond every PollInterval until it holds, and reports whether
// it did before timeout passed: for a test that says more than Eventually
// when it does not.
func Poll(timeout time.Duration, cond func() bool) bool {
	return PollEvery(PollInterval, timeout, cond)
}

// PollEvery is Poll with another interval: a condition that reads a real
// cluster over its API is polled less often than one that reads memory.
func PollEvery(interval, timeout time.Duration, cond func() bool) bool {
	return Wait(context.Background(), interval, timeout, "", cond) == nil
}

// Wait polls cond every interval, first at once, until it holds (nil),
// ctx ends or timeout passes (an error that says what it waited for); a
// timeout of 0 leaves ctx alone to bound it. It is the one polling loop
// of the tests and hack/ programs.
func Wait(ctx context.Context, interval, timeout time.Duration, what string, cond func() bool) error {
	poll := func(context.Context) (bool, error) { return cond(), nil }
	var err error
	if timeout > 0 {
		err = wait.PollUntilContextTimeout(ctx, interval, timeout, true, poll)
	} else {
		err = wait.PollUntilContextCancel(ctx, interval, true, poll)
	}
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %w", what, ctx.Err())
	default:
		return fmt.Errorf("%s: not after %s", what, timeout)
	}
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
// before it run after run returned. The function it returns ends run's
// context earlier and waits for it the same way (a SIGTERM in the middle
// of a test); the cleanup then has nothing left to do.
func RunUntilCleanup(t testing.TB, timeout time.Duration, run func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
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
	t.Cleanup(stop)
	return stop
}
