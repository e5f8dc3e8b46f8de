package history

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// benchPayload is a payload of the size a one-field update makes (about
// 450 bytes), of one of 20,000 objects in 50 namespaces.
func benchPayload(i int) []byte {
	return fixture{uid: fmt.Sprintf("6a1f0000-1111-2222-3333-%012d", i%20000), rv: fmt.Sprint(1000000 + i), rule: "counter",
		namespace: fmt.Sprintf("ns-%02d", i%50), name: fmt.Sprintf("cm-%05d", i%20000), manager: "kubectl-patch", user: fmt.Sprintf("user-%d", i%10),
		time: t0.Add(time.Duration(i) * time.Millisecond), changes: fmt.Sprintf(`[{"op":"replace","path":"/data/counter","value":"%d-x","oldValue":"%d-x"}]`, i, i-1)}.payload()
}

// BenchmarkRecord is the history's write path: entries recorded as the
// pipeline records them (RecordEntry: fields from the firing, not parsed
// back), written by the Recorder into SQLite in batches.
// It reports entries written per second, the CPU per entry (the whole
// process: parsing, SQLite, the Go runtime; and the writer's thread
// alone) and the bytes on disk per entry.
func BenchmarkRecord(b *testing.B) { benchRecord(b, SQLiteOptions{}, nil) }

// BenchmarkTrail is BenchmarkRecord without the trail, with it (the
// hash chain), and with its checkpoints signed, side by side: what the
// trail costs an entry.
func BenchmarkTrail(b *testing.B) {
	b.Run("chain=off", func(b *testing.B) { benchRecord(b, SQLiteOptions{noTrail: true}, nil) })
	b.Run("chain=on", func(b *testing.B) { benchRecord(b, SQLiteOptions{}, nil) })
	b.Run("chain=on,signed", func(b *testing.B) { benchRecord(b, SQLiteOptions{}, NewSigner(newKey(b), "bench")) })
}

func benchRecord(b *testing.B, opts SQLiteOptions, signer *Signer) {
	entries := make([]Entry, b.N)
	for i := range entries {
		e, err := ParsePayload(benchPayload(i), Delivered)
		if err != nil {
			b.Fatal(err)
		}
		entries[i] = e
	}
	path := filepath.Join(b.TempDir(), "history.db")
	opts.MaxBytes = 1 << 30
	store, err := OpenSQLite(path, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	r := NewRecorder(RecorderOptions{Store: store, MaxBytes: 1 << 30, Registerer: prometheus.NewRegistry(), QueueEntries: b.N + 1, QueueBytes: 1 << 40,
		Signer: signer})
	cpu0 := processCPU()
	b.ResetTimer()
	start := time.Now()
	for _, e := range entries {
		r.RecordEntry(e)
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
	// The writer's own thread (fieldwatch_history_cpu_seconds_total):
	// steadier than the process's when other work loads the machine.
	b.ReportMetric(testutil.ToFloat64(r.m.cpu)*1e6/float64(b.N), "writer-cpu-µs/entry")
	b.ReportMetric(float64(disk)/float64(b.N), "disk-B/entry")
}

// BenchmarkQuery1M queries a history of 1,000,000 entries (20,000
// objects in 50 namespaces, 10 users): one object's history, the
// timeline's newest page and a page deep in it (from a cursor), a
// namespace's page, and a rare user within a day; it reports each
// query's p50 and p99 over b.N runs.
func BenchmarkQuery1M(b *testing.B) {
	const total = 1000000
	path := filepath.Join(b.TempDir(), "history.db")
	store, err := OpenSQLite(path, SQLiteOptions{MaxBytes: 4 << 30})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	ctx := context.Background()
	start := time.Now()
	for from := 0; from < total; from += 1000 {
		batch := make([]Entry, 0, 1000)
		for i := from; i < from+1000; i++ {
			e, err := ParsePayload(benchPayload(i), Delivered)
			if err != nil {
				b.Fatal(err)
			}
			e.Recorded = e.Time
			batch = append(batch, e)
		}
		if _, err := store.Write(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	fi, _ := os.Stat(path)
	b.Logf("%d entries written in %s, %d bytes (%d per entry)", total, time.Since(start).Round(time.Second), fi.Size(), fi.Size()/total)
	// Opened again: the index by uid and namespace is rebuilt.
	if err := store.Close(); err != nil {
		b.Fatal(err)
	}
	start = time.Now()
	if store, err = OpenSQLite(path, SQLiteOptions{MaxBytes: 4 << 30}); err != nil {
		b.Fatal(err)
	}
	opened := time.Since(start)
	if err := store.index.wait(ctx); err != nil {
		b.Fatal(err)
	}
	b.Logf("opened again in %s, its index loaded in %s (%d entries)", opened.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), store.index.len())
	deep := &Cursor{Seq: seqOf(t0.Add(total / 2 * time.Millisecond))}
	for _, tc := range []struct {
		name string
		q    func(i int) Query
	}{
		{"object", func(i int) Query { return Query{UID: fmt.Sprintf("6a1f0000-1111-2222-3333-%012d", (i*7919)%20000)} }},
		{"timeline", func(int) Query { return Query{} }},
		{"timeline-deep", func(int) Query { return Query{After: deep} }},
		{"namespace", func(i int) Query { return Query{Namespace: fmt.Sprintf("ns-%02d", i%50)} }},
		{"user-in-a-day", func(i int) Query {
			return Query{User: fmt.Sprintf("user-%d", i%10), Since: t0.Add(total*time.Millisecond - 24*time.Hour)}
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var took []time.Duration
			for i := 0; b.Loop(); i++ {
				s := time.Now()
				p, err := store.Query(ctx, tc.q(i))
				took = append(took, time.Since(s))
				if err != nil || len(p.Entries) == 0 {
					b.Fatalf("%d entries, %v", len(p.Entries), err)
				}
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}

// BenchmarkTrimIdle is what the Recorder's applying the bounds costs
// when nothing is to be removed (10,000 entries, the default bounds):
// the age bound's delete, the disk's and the file's sizes, the stats.
func BenchmarkTrimIdle(b *testing.B) {
	ctx := context.Background()
	store, err := OpenSQLite(filepath.Join(b.TempDir(), "history.db"), SQLiteOptions{MaxBytes: 512 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	var es []Entry
	for i := range 10000 {
		e, _ := ParsePayload(benchPayload(i), Delivered)
		e.Recorded = e.Time
		es = append(es, e)
	}
	if _, err := store.Write(ctx, es); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := store.Trim(ctx, time.Now().Add(-90*24*time.Hour), 512<<20); err != nil {
			b.Fatal(err)
		}
		if _, err := store.Stats(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTrailExportVerify exports the trail of a store of 100,000
// entries (checkpoints every 1,000) to a file and verifies the file
// with the public key; it reports entries a second for each.
func BenchmarkTrailExportVerify(b *testing.B) {
	const total = 100000
	store, err := OpenSQLite(filepath.Join(b.TempDir(), "history.db"), SQLiteOptions{MaxBytes: 4 << 30})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	key := newKey(b)
	signer := NewSigner(key, "bench")
	for k := 0; k < total; k += 1000 {
		es := make([]Entry, 1000)
		for i := range es {
			if es[i], err = ParsePayload(benchPayload(k+i), Delivered); err != nil {
				b.Fatal(err)
			}
			es[i].Recorded = es[i].Time
		}
		write(b, store, es...)
		if err := store.Append(context.Background(), []Record{signer.record()}); err != nil {
			b.Fatal(err)
		}
	}
	path := filepath.Join(b.TempDir(), "trail.jsonl")
	var exportTime, verifyTime time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		exportFile(b, store, path, time.Now())
		exportTime += time.Since(start)
		start = time.Now()
		r, err := verifyFile(path, VerifyOptions{Key: publicOf(key), Now: time.Now()})
		if err != nil || !r.Intact() || r.Chains[0].Entries != total {
			b.Fatalf("Verify = %+v, %v", r, err)
		}
		verifyTime += time.Since(start)
	}
	b.ReportMetric(float64(total*b.N)/exportTime.Seconds(), "exported-entries/s")
	b.ReportMetric(float64(total*b.N)/verifyTime.Seconds(), "verified-entries/s")
}

// BenchmarkVerifyMemory verifies an export of FIELDWATCH_VERIFY_ENTRIES
// entries (default 1,000,000; docs/performance.md has 10,000,000), signed
// every 1,000, and reports the verification's peak heap in use and peak
// live heap (what the last collection found reachable), sampled every
// 10 ms: the reader and Verify keep one batch and a few values per
// chain, so the live heap does not grow with the entries; the heap in
// use is the garbage collector's pacing on top of it.
func BenchmarkVerifyMemory(b *testing.B) {
	total := 1000000
	if s := os.Getenv("FIELDWATCH_VERIFY_ENTRIES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1000 {
			b.Fatalf("FIELDWATCH_VERIFY_ENTRIES=%q: want a number of entries, 1000 or more", s)
		}
		total = n
	}
	key := newKey(b)
	path := writeExport(b, key, total)
	fi, _ := os.Stat(path)
	b.ResetTimer()
	for range b.N {
		runtime.GC()
		var base runtime.MemStats
		runtime.ReadMemStats(&base)
		var peak, peakLive atomic.Uint64
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			t := time.NewTicker(10 * time.Millisecond)
			defer t.Stop()
			live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
			for {
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				if m.HeapInuse > peak.Load() {
					peak.Store(m.HeapInuse)
				}
				metrics.Read(live)
				if v := live[0].Value.Uint64(); v > peakLive.Load() {
					peakLive.Store(v)
				}
				select {
				case <-stop:
					return
				case <-t.C:
				}
			}
		}()
		start := time.Now()
		r, err := verifyFile(path, VerifyOptions{Key: publicOf(key), Now: time.Now()})
		took := time.Since(start)
		close(stop)
		<-sampled
		if err != nil || !r.Intact() || r.Chains[0].Entries != int64(total) {
			b.Fatalf("Verify = %+v, %v", r, err)
		}
		b.ReportMetric(float64(peak.Load()-min(peak.Load(), base.HeapInuse))/(1<<20), "peak-heap-MiB")
		b.ReportMetric(float64(peakLive.Load())/(1<<20), "peak-live-heap-MiB")
		b.ReportMetric(float64(total)/took.Seconds(), "verified-entries/s")
		b.ReportMetric(float64(fi.Size())/(1<<30), "export-GiB")
	}
}

// writeExport writes an export of total entries, signed with key every
// 1,000, to a file of the benchmark's and returns its path. The store it
// exports goes with the function: its index is not the verification's.
func writeExport(b *testing.B, key ed25519.PrivateKey, total int) string {
	b.Helper()
	store, err := OpenSQLite(filepath.Join(b.TempDir(), "history.db"), SQLiteOptions{MaxBytes: 1 << 40})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	signer := NewSigner(key, "bench")
	for k := 0; k < total; k += 1000 {
		es := make([]Entry, min(1000, total-k))
		for i := range es {
			if es[i], err = ParsePayload(benchPayload(k+i), Delivered); err != nil {
				b.Fatal(err)
			}
			es[i].Recorded = es[i].Time
		}
		if _, err := store.Write(context.Background(), es); err != nil {
			b.Fatal(err)
		}
		if err := store.Append(context.Background(), []Record{signer.record()}); err != nil {
			b.Fatal(err)
		}
	}
	path := filepath.Join(b.TempDir(), "trail.jsonl")
	exportFile(b, store, path, time.Now())
	return path
}
