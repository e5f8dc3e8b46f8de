package audit

import "time"

// Clock is the time source of the Index and the Attributor: the real clock,
// or a fake one in tests.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine after d.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call (*time.Timer is one).
type Timer interface {
	Stop() bool
	Reset(d time.Duration) bool
}

// RealClock is the wall clock.
type RealClock struct{}

var _ Clock = RealClock{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// AfterFunc is time.AfterFunc.
func (RealClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// sinceOrZero is how long ago t was at now, never negative.
func sinceOrZero(now, t time.Time) time.Duration {
	if d := now.Sub(t); d > 0 {
		return d
	}
	return 0
}
