package history

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// benchPayload is a payload of the size a one-field update makes (about
// 450 bytes), of one of 20,000 objects in 50 namespaces.
func benchPayload(i int) []byte {
	return fixture{uid: fmt.Sprintf("6a1f0000-1111-2222-3333-%012d", i%20000), rv: fmt.Sprint(1000000 + i), rule: "counter",
		namespace: fmt.Sprintf("ns-%02d", i%50), name: fmt.Sprintf("cm-%05d", i%20000), manager: "kubectl-patch", user: fmt.Sprintf("user-%d", i%10),
		time: t0.Add(time.Duration(i) * time.Millisecond), changes: fmt.Sprintf(`[{"op":"replace","path":"/data/counter","value":"%d-x","oldValue":"%d-x"}]`, i, i-1)}.payload()
}

// BenchmarkRecord is the history's write path: payloads recorded as the
// pipeline records them, written by the Recorder into SQLite in batches.
// It reports entries written per second, the CPU per entry (the whole
// process: parsing, SQLite, the Go runtime) and the bytes on disk per
// entry.
func BenchmarkRecord(b *testing.B) {
	payloads := make([][]byte, b.N)
	for i := range payloads {
		payloads[i] = benchPayload(i)
	}
	path := filepath.Join(b.TempDir(), "history.db")
	store, err := OpenSQLite(path, SQLiteOptions{MaxBytes: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	r := NewRecorder(RecorderOptions{Store: store, MaxBytes: 1 << 30, Registerer: prometheus.NewRegistry(), QueueEntries: b.N + 1, QueueBytes: 1 << 40})
	cpu0 := processCPU()
	b.ResetTimer()
	start := time.Now()
	for _, p := range payloads {
		r.Record(p, Delivered)
	}
	r.Close(context.Background())
	elapsed := time.Since(start)
	b.StopTimer()
	cpu := processCPU() - cpu0
	var disk int64
	for _, f := range []string{path, path + "-wal"} {
		if fi, err := os.Stat(f); err == nil {
			disk += fi.Size()
		}
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "entries/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/entry")
	b.ReportMetric(float64(disk)/float64(b.N), "disk-B/entry")
}
