package testenv

import (
	"crypto/sha256"
	"testing"
	"time"
)

// TestSpentCPU checks that the CPU time of fixed work is counted, and that
// of a goroutine blocked in a wait is not, however loaded the machine.
func TestSpentCPU(t *testing.T) {
	data := make([]byte, 32<<20)
	busy := SpentCPU(t, func() { sha256.Sum256(data) })
	// SHA-256 runs at a few GB/s at most: 32 MiB cannot take under 2ms.
	if busy < 2*time.Millisecond {
		t.Errorf("hashing 32 MiB spent %s of CPU, want more than 2ms", busy)
	}
	idle := SpentCPU(t, func() { <-time.After(50 * time.Millisecond) })
	if idle > 10*time.Millisecond {
		t.Errorf("a 50ms wait spent %s of CPU, want little", idle)
	}
}
