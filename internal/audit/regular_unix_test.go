//go:build unix

package audit

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReloadableRefuses: the files of the audit webhook (certificate, key,
// client CA, token) and the follower's state file are read only when they
// are regular files of bounded size. A FIFO (whose open would wait for a
// writer, with every request behind the reload's lock), /dev/zero (an
// endless read), a directory or a file over the bound are errors at once.
// Before, a FIFO hung NewWebhook and /dev/zero was read until memory ran
// out.
func TestReloadableRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(path string) error
		want string
	}{
		{"a FIFO", func(path string) error { return syscall.Mkfifo(path, 0o600) }, "is not a regular file but a FIFO"},
		{"a symlink to /dev/zero", func(path string) error { return os.Symlink("/dev/zero", path) }, "is not a regular file but a character device"},
		{"a directory", func(path string) error { return os.Mkdir(path, 0o700) }, "is not a regular file but a directory"},
		{"a file over the bound", func(path string) error {
			return os.WriteFile(path, []byte(strings.Repeat("t", maxReloadableBytes+1)), 0o600)
		}, "is larger than 1048576 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "token")
			if err := tc.make(path); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := newReloadable(loadToken, path)
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("newReloadable = %v, want an error saying %q", err, tc.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("newReloadable still reading 5s later")
			}
			f, err := NewFollower(FollowerOptions{Path: filepath.Join(t.TempDir(), "log"), StateFile: path}, &recordingSink{})
			if err != nil {
				t.Fatal(err)
			}
			go func() { done <- f.Run(t.Context()) }()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), "audit log state") {
					t.Errorf("a follower with this state file: %v, want an audit log state error", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the follower still reading its state file 5s later")
			}
		})
	}
}
