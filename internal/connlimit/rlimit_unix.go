//go:build unix

package connlimit

import (
	"fmt"
	"syscall"
)

// FileLimit returns the process's descriptor limit (RLIMIT_NOFILE), after
// raising its soft limit to the hard one. Go's runtime already does so at
// start on Linux (and restores the old soft limit for the processes it
// starts, exec actions included); FileLimit sets it only where the runtime
// did not, so that this stays so.
func FileLimit() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("read RLIMIT_NOFILE: %w", err)
	}
	if lim.Cur < lim.Max {
		raised := syscall.Rlimit{Cur: lim.Max, Max: lim.Max}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
			return uint64(lim.Cur), fmt.Errorf("raise RLIMIT_NOFILE from %d to %d: %w", lim.Cur, lim.Max, err) //nolint:unconvert // int64 on some systems
		}
		lim = raised
	}
	return uint64(lim.Cur), nil //nolint:unconvert // int64 on some systems
}
