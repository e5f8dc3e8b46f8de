//go:build unix

package audit

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/internal/testenv"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestFollowerRefusesWhatIsNotARegularFile: a path naming a symlink to
// /dev/zero, a FIFO or a directory is refused, counted and logged once
// however often it is looked at again; the regular file put in its place
// is followed from its start; and the follower stops at once while it
// waits. Before, /dev/zero was read forever and its follower never
// stopped, a FIFO held it in open() (never seeing the file that replaced
// it), and a directory ended it.
func TestFollowerRefusesWhatIsNotARegularFile(t *testing.T) {
	for _, kind := range []struct {
		name string
		make func(path string) error
	}{
		{"a symlink to /dev/zero", func(path string) error { return os.Symlink("/dev/zero", path) }},
		{"a FIFO", func(path string) error { return syscall.Mkfifo(path, 0o600) }},
		{"a directory", func(path string) error { return os.Mkdir(path, 0o700) }},
	} {
		for _, replaced := range []bool{true, false} {
			name := kind.name + ", replaced by a regular file"
			if !replaced {
				name = kind.name + ", stopped while refused"
			}
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				path := filepath.Join(dir, "audit.log")
				if err := kind.make(path); err != nil {
					t.Fatal(err)
				}
				sink := &recordingSink{}
				m := NewMetrics(nil)
				stop, logs := runFollower(t, FollowerOptions{Path: path, Metrics: m}, sink, false)
				refused := m.logOpenFailures.WithLabelValues("not_regular")
				testenv.Eventually(t, 5*time.Second, "the refusal counted", func() bool { return testutil.ToFloat64(refused) == 1 })
				if !replaced {
					stop()
					return
				}
				tmp := filepath.Join(dir, "new.log")
				if err := os.WriteFile(tmp, lines(t, "new", 0, 3), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Remove(path); err != nil { // a rename does not replace a directory
					t.Fatal(err)
				}
				if err := os.Rename(tmp, path); err != nil {
					t.Fatal(err)
				}
				waitIDs(t, sink, ids("new", 0, 3))
				stop()
				if v := testutil.ToFloat64(refused); v != 1 {
					t.Errorf("the refusal counted %v times, want once", v)
				}
				if n := strings.Count(logs.String(), "is not a regular file"); n != 1 {
					t.Errorf("the refusal logged %d times, want once:\n%s", n, logs.String())
				}
			})
		}
	}
}

// TestFollowerRefusesAReplacementThatIsNotARegularFile: when the path of
// the file being followed comes to name a FIFO, the follower keeps the
// file it has, refuses the FIFO once, and follows the regular file that
// comes next.
func TestFollowerRefusesAReplacementThatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	appendFile(t, path, nil)
	sink := &recordingSink{}
	m := NewMetrics(nil)
	runFollower(t, FollowerOptions{Path: path, Metrics: m}, sink, true)
	appendFile(t, path, lines(t, "one", 0, 2))
	waitIDs(t, sink, ids("one", 0, 2))
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	appendFile(t, path+".1", lines(t, "one", 2, 3)) // the old file, still read
	testenv.Eventually(t, 5*time.Second, "the FIFO refused", func() bool {
		return testutil.ToFloat64(m.logOpenFailures.WithLabelValues("not_regular")) == 1
	})
	waitIDs(t, sink, ids("one", 0, 3))
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	appendFile(t, path, lines(t, "two", 0, 2))
	waitIDs(t, sink, slices.Concat(ids("one", 0, 3), ids("two", 0, 2)))
}
