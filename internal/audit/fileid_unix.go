//go:build unix

package audit

import (
	"os"
	"syscall"
)

// fileID returns the device and inode of a file, which stay the same
// across renames.
func fileID(info os.FileInfo) (dev, ino uint64) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0
	}
	return uint64(st.Dev), uint64(st.Ino) //nolint:unconvert // int32 on some systems
}

// openNonBlock opens a FIFO without waiting for a writer.
const openNonBlock = syscall.O_NONBLOCK
