package testenv

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestWait(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name      string
		ctx       context.Context
		holdsAt   int64 // the call from which cond holds; 0: never
		noTimeout bool  // a timeout of 0
		wantErr   string
		wantIs    error
	}{
		{name: "holds at once", ctx: context.Background(), holdsAt: 1},
		{name: "holds on the third call", ctx: context.Background(), holdsAt: 3},
		{name: "never holds", ctx: context.Background(), wantErr: "the thing: not after 100ms"},
		{name: "context ended", ctx: cancelled, wantErr: "the thing: ", wantIs: context.Canceled},
		{name: "no timeout, holds", ctx: context.Background(), noTimeout: true, holdsAt: 3},
		{name: "no timeout, context ended", ctx: cancelled, noTimeout: true, wantErr: "the thing: ", wantIs: context.Canceled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			timeout := 100 * time.Millisecond
			if tc.noTimeout {
				timeout = 0
			}
			err := Wait(tc.ctx, time.Millisecond, timeout, "the thing", func() bool {
				n := calls.Add(1)
				return tc.holdsAt != 0 && n >= tc.holdsAt
			})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Wait: %v", err)
				}
				if got := calls.Load(); got != tc.holdsAt {
					t.Errorf("cond called %d times, want %d", got, tc.holdsAt)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
				t.Fatalf("Wait: %v, want %q", err, tc.wantErr)
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("Wait: %v, want it to wrap %v", err, tc.wantIs)
			}
		})
	}
}

// TestEventuallyWhy checks that a failed wait reports the condition's
// last reason.
func TestEventuallyWhy(t *testing.T) {
	rec := &recordingTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		EventuallyWhy(rec, 50*time.Millisecond, "three apples", func() (bool, string) { return false, "two apples" })
	}()
	<-done
	if want := "timed out after 50ms waiting for three apples: two apples"; rec.fatal != want {
		t.Errorf("failure %q, want %q", rec.fatal, want)
	}
}

// recordingTB records Fatalf instead of failing the test.
type recordingTB struct {
	testing.TB
	fatal string
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
