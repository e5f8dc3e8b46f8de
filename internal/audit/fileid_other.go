//go:build !unix

package audit

import "os"

// fileID returns zeros where the system has no inodes: the follower then
// never resumes from a state file.
func fileID(os.FileInfo) (dev, ino uint64) { return 0, 0 }

// openNonBlock is 0 where there are no FIFOs to wait on.
const openNonBlock = 0
