//go:build !unix

package connlimit

// FileLimit returns 0 where there is no RLIMIT_NOFILE: Caps then gives the
// listeners what they want.
func FileLimit() (uint64, error) { return 0, nil }
