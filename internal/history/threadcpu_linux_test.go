package history

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestRecorderCPU: fieldwatch_history_cpu_seconds_total counts the
// writer's CPU time and nothing else the process spends meanwhile: with
// another goroutine burning CPU on a thread of its own while entries are
// written, the history's count is above zero and at most what the
// process spent besides the burner.
func TestRecorderCPU(t *testing.T) {
	store := openSQLite(t)
	r := NewRecorder(RecorderOptions{Store: store, Registerer: prometheus.NewRegistry(), FlushInterval: time.Millisecond})
	const n = 3000
	payloads := make([][]byte, n)
	for i := range payloads {
		payloads[i] = fixture{uid: fmt.Sprintf("u%d", i), rv: "1", namespace: "ns", name: "n", time: t0.Add(time.Duration(i) * time.Millisecond)}.payload()
	}
	burned := make(chan time.Duration)
	stop := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		start, _ := threadCPU()
		x := 0
		for {
			select {
			case <-stop:
				now, _ := threadCPU()
				burned <- now - start
				_ = x
				return
			default:
				for i := range 100000 {
					x += i
				}
			}
		}
	}()
	proc0 := processCPU()
	for _, p := range payloads {
		r.Record(p, Delivered)
	}
	r.Close(context.Background())
	close(stop)
	burner := <-burned
	proc := processCPU() - proc0
	hist := time.Duration(testutil.ToFloat64(r.m.cpu) * float64(time.Second))
	if w := testutil.ToFloat64(r.m.written); w != n {
		t.Fatalf("written %v of %d", w, n)
	}
	t.Logf("history %s, burner %s, process %s for %d entries", hist, burner, proc, n)
	// 10 ms: the writer started counting just before proc0 was read.
	if hist <= 0 || hist > proc-burner+10*time.Millisecond {
		t.Errorf("history CPU %s: want above 0 and at most the process's %s less the burner's %s", hist, proc, burner)
	}
}
