package history

import "syscall"

// diskFree returns the bytes an unprivileged writer may still take on
// the filesystem of path, or -1 when it cannot tell.
func diskFree(path string) int64 {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return -1
	}
	return int64(st.Bavail) * st.Bsize
}
