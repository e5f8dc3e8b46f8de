package watcher

import (
	"fmt"
	"os"
	"runtime/debug"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// gcPercent reads GOGC's current value.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// TestStartGC: watchers starting lower GOGC to startGCPercent from the
// default; it comes back when the last of them is done (each done func
// counts once), and stays as it was when the environment sets GOGC or
// something else changed it.
func TestStartGC(t *testing.T) {
	// A watcher of an earlier test may still be starting: wait until
	// none is.
	testenv.EventuallyWhy(t, time.Minute, "no watcher starting", func() (bool, string) {
		startGCState.Lock()
		defer startGCState.Unlock()
		return startGCState.starting == 0, fmt.Sprintf("%d watchers starting", startGCState.starting)
	})
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	t.Setenv("GOGC", "") // restored after the test
	if err := os.Unsetenv("GOGC"); err != nil {
		t.Fatal(err)
	}
	end1 := startGC()
	end2 := startGC()
	if p := gcPercent(); p != startGCPercent {
		t.Fatalf("GOGC %d while starting, want %d", p, startGCPercent)
	}
	end1()
	end1()
	if p := gcPercent(); p != startGCPercent {
		t.Fatalf("GOGC %d with one watcher still starting, want %d", p, startGCPercent)
	}
	end2()
	if p := gcPercent(); p != 100 {
		t.Fatalf("GOGC %d once started, want 100", p)
	}

	debug.SetGCPercent(50) // set by someone else
	end := startGC()
	if p := gcPercent(); p != 50 {
		t.Errorf("GOGC %d while starting after it was set to 50, want 50", p)
	}
	end()
	debug.SetGCPercent(100)

	t.Setenv("GOGC", "100")
	end = startGC()
	if p := gcPercent(); p != 100 {
		t.Errorf("GOGC %d while starting with GOGC set in the environment, want 100", p)
	}
	end()
}
