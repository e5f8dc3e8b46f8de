package action

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/fieldwatch/fieldwatch/rules"
)

// deliveryError is a failed attempt that says how to go on: never again
// (permanent), or not before retryAfter (the receiver asked for it).
type deliveryError struct {
	err        error
	permanent  bool
	retryAfter time.Duration
}

func (e *deliveryError) Error() string { return e.err.Error() }
func (e *deliveryError) Unwrap() error { return e.err }

// permanent marks err as not worth retrying.
func permanent(err error) error {
	return &deliveryError{err: err, permanent: true}
}

// isPermanent reports whether err must not be retried.
func isPermanent(err error) bool {
	var de *deliveryError
	return errors.As(err, &de) && de.permanent
}

// retryAfter returns the wait the receiver asked for, or 0.
func retryAfter(err error) time.Duration {
	var de *deliveryError
	if errors.As(err, &de) {
		return de.retryAfter
	}
	return 0
}

// backoff returns the wait after the attempt-th failed attempt (1-based):
// InitialBackoff doubled per further failure, capped at MaxBackoff, with
// "equal jitter" (half fixed, half random) so that workers that failed
// together do not retry together. A Retry-After from the receiver replaces
// it, capped at MaxBackoff too.
func backoff(r rules.Retry, attempt int, err error) time.Duration {
	if ra := retryAfter(err); ra > 0 {
		return min(ra, r.MaxBackoff)
	}
	d := r.InitialBackoff
	for i := 1; i < attempt && d < r.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, r.MaxBackoff)
	half := d / 2
	if half <= 0 {
		return d
	}
	return half + rand.N(half+1)
}

// sleep waits for d or until ctx ends; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// parseRetryAfter reads a Retry-After header: delay-seconds or an HTTP
// date (RFC 9110, 10.2.3). It returns 0 when the header is absent or bad.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		if secs > int64(24*time.Hour/time.Second) {
			secs = int64(24 * time.Hour / time.Second)
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}

// httpStatusPermanent reports whether an HTTP status means the same request
// will never succeed: a 4xx other than 408 Request Timeout and 429 Too Many
// Requests.
func httpStatusPermanent(code int) bool {
	return code >= 400 && code < 500 && code != http.StatusRequestTimeout && code != http.StatusTooManyRequests
}

// classifyKube wraps an error of a Kubernetes client call: errors the
// apiserver may not repeat (timeouts, throttling, 5xx, conflicts, network
// trouble) stay retryable; any other status error (not found, invalid,
// forbidden, ...) is permanent.
func classifyKube(err error) error {
	if err == nil {
		return nil
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return err // transport trouble: the apiserver may be back soon
	}
	if secs, ok := apierrors.SuggestsClientDelay(err); ok && secs > 0 {
		return &deliveryError{err: err, retryAfter: time.Duration(secs) * time.Second}
	}
	switch {
	case apierrors.IsConflict(err),
		apierrors.IsServerTimeout(err),
		apierrors.IsTimeout(err),
		apierrors.IsTooManyRequests(err),
		apierrors.IsServiceUnavailable(err),
		apierrors.IsInternalError(err),
		apierrors.IsUnexpectedServerError(err):
		return err
	}
	if code := status.Status().Code; code >= 500 || code == http.StatusRequestTimeout || code == http.StatusTooManyRequests {
		return err
	}
	return permanent(err)
}
