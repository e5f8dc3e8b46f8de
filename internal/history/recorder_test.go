package history

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// blockingStore is a Store whose writes wait until release is closed:
// a disk that stalls.
type blockingStore struct {
	Store
	release chan struct{}
}

func (b *blockingStore) Write(ctx context.Context, es []Entry) (int, error) {
	select {
	case <-b.release:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return b.Store.Write(ctx, es)
}

// TestRecordNeverBlocks: with the store stalled, Record returns at once
// for every payload; beyond the queue's bound payloads are dropped and
// counted, and once the store moves again the queued ones are written.
func TestRecordNeverBlocks(t *testing.T) {
	store := &blockingStore{Store: openSQLite(t), release: make(chan struct{})}
	reg := prometheus.NewRegistry()
	r := NewRecorder(RecorderOptions{Store: store, Registerer: reg, QueueEntries: 1000, FlushInterval: time.Millisecond})
	const n = 5000
	payloads := make([][]byte, n)
	for i := range payloads {
		payloads[i] = fixture{uid: fmt.Sprintf("u%d", i), rv: "1", namespace: "ns", name: "n", time: t0.Add(time.Duration(i) * time.Millisecond)}.payload()
	}
	start := time.Now()
	for _, p := range payloads {
		r.Record(p, Delivered)
	}
	// Generous for -race on a loaded machine: a blocked Record would
	// take forever, not seconds.
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("recording %d payloads with the store stalled took %s", n, took)
	}
	close(store.release)
	r.Close(context.Background())
	written := testutil.ToFloat64(r.m.written)
	dropped := testutil.ToFloat64(r.m.dropped)
	// The writer may have taken a batch before the queue filled.
	if written+dropped != n || dropped < n-1000-float64(r.batch) || written < 1000 {
		t.Errorf("written %v, dropped %v of %d, queue of 1000", written, dropped, n)
	}
	st, _ := store.Stats(context.Background())
	if st.Entries != int64(written) {
		t.Errorf("the store holds %d entries, the recorder counted %v written", st.Entries, written)
	}
}

// TestRecorderOncePerID: the same payload recorded twice (a delivery
// repeated after a restart or a failover) is one entry, counted as a
// duplicate.
func TestRecorderOncePerID(t *testing.T) {
	store := openSQLite(t)
	r := NewRecorder(RecorderOptions{Store: store, Registerer: prometheus.NewRegistry()})
	p := fixture{uid: "u", rv: "1", namespace: "ns", name: "n", time: t0}.payload()
	r.Record(p, Delivered)
	r.Record(p, Delivered)
	r.Record([]byte(`{"not":"a payload"}`), Delivered)
	r.Close(context.Background())
	if w, d, inv := testutil.ToFloat64(r.m.written), testutil.ToFloat64(r.m.duplicate), testutil.ToFloat64(r.m.invalid); w != 1 || d != 1 || inv != 1 {
		t.Errorf("written %v, duplicate %v, invalid %v; want 1, 1, 1", w, d, inv)
	}
}

// bigPayload is a payload of about size bytes.
func bigPayload(i, size int) []byte {
	return fixture{uid: fmt.Sprintf("u%07d", i), rv: "1", namespace: "ns", name: "n", time: t0.Add(time.Duration(i) * time.Millisecond),
		changes: `[{"op":"replace","path":"/spec/text","value":"` + strings.Repeat("x", size) + `","oldValue":"y"}]`}.payload()
}

// fileBytes is the size of the database file and its log on disk.
func fileBytes(path string) int64 {
	var n int64
	for _, f := range []string{path, path + "-wal"} {
		if fi, err := os.Stat(f); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// TestSizeBoundUnderStream: a steady stream of entries into a store
// bounded to 16 MiB: the file and its log never take more, the oldest
// entries go (counted), the newest stay.
func TestSizeBoundUnderStream(t *testing.T) {
	testenv.SkipShort(t, testenv.LoadTest)
	const bound = 16 << 20
	path := filepath.Join(t.TempDir(), "history.db")
	store, err := OpenSQLite(path, SQLiteOptions{MaxBytes: bound})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	r := NewRecorder(RecorderOptions{Store: store, MaxBytes: bound, Registerer: prometheus.NewRegistry(), FlushInterval: time.Millisecond})
	const n = 40000 // about 40 MiB of payloads
	peak := int64(0)
	for i := range n {
		r.Record(bigPayload(i, 800), Delivered)
		if i%200 == 199 {
			// A steady stream, not one burst: let the writer keep up.
			testenv.PollEvery(time.Millisecond, 30*time.Second, func() bool { k, _ := r.pending(); return k == 0 })
			peak = max(peak, fileBytes(path))
		}
	}
	r.Close(context.Background())
	peak = max(peak, fileBytes(path))
	if peak > bound {
		t.Errorf("the file and its log took %d bytes, over the bound of %d", peak, bound)
	}
	removed := testutil.ToFloat64(r.m.removedSize)
	st, _ := store.Stats(context.Background())
	if removed == 0 || int64(removed)+st.Entries != n-int64(testutil.ToFloat64(r.m.dropped)) {
		t.Errorf("removed %v, %d left, dropped %v, of %d", removed, st.Entries, testutil.ToFloat64(r.m.dropped), n)
	}
	p, err := store.Query(context.Background(), Query{Limit: 1})
	if err != nil || len(p.Entries) != 1 || p.Entries[0].UID != fmt.Sprintf("u%07d", n-1) {
		t.Errorf("newest entry %+v, %v; want the last one written", p.Entries, err)
	}
	t.Logf("peak %d bytes on disk for a bound of %d; %d entries kept, %v removed", peak, bound, st.Entries, removed)
}

// TestFullDisk: the history's file on a small filesystem (a 32 MiB
// tmpfs; the bound, 1 GiB, is never reached) that another file fills
// while entries stream in. The history keeps within what the disk has,
// says so, and goes on recording the newest entries in the room it
// makes inside its file; Record never blocks.
func TestFullDisk(t *testing.T) {
	testenv.SkipShort(t, testenv.NeedsRoot)
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root (the project's machines and CI run as root)")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount a 32 MiB tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	var logs testenv.SyncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	path := filepath.Join(dir, "history.db")
	m := NewMetrics(prometheus.NewRegistry())
	store, err := OpenSQLite(path, SQLiteOptions{MaxBytes: 1 << 30, Logger: log, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	r := NewRecorder(RecorderOptions{Store: store, MaxBytes: 1 << 30, Metrics: m, Logger: log, FlushInterval: time.Millisecond})
	stream := func(from, to int) {
		for i := from; i < to; i++ {
			start := time.Now()
			r.Record(bigPayload(i, 800), Delivered)
			// A liveness bound, not a speed one: a Record blocked behind
			// the full disk would wait for ever.
			if took := time.Since(start); took > 30*time.Second {
				t.Fatalf("Record took %s", took)
			}
			if i%100 == 99 {
				testenv.PollEvery(time.Millisecond, 10*time.Second, func() bool { k, _ := r.pending(); return k == 0 })
			}
		}
	}
	stream(0, 8000) // about 10 MiB, with the log and the reserve 22
	// Another file takes every byte left.
	filler, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for {
		if _, err := filler.Write(chunk); err != nil {
			break
		}
	}
	_ = filler.Close()
	writtenAtFill := testutil.ToFloat64(r.m.written)
	const n = 16000
	stream(8000, n)
	r.Close(context.Background())
	if !strings.Contains(logs.String(), "the disk has less room than --history-max-bytes") {
		t.Errorf("the disk's room is not in the log:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "the disk is full: its reserve is given back") || testutil.ToFloat64(m.errFull) == 0 {
		t.Errorf("the full disk is not reported (counted %v):\n%s", testutil.ToFloat64(m.errFull), logs.String())
	}
	if w := testutil.ToFloat64(r.m.written); w-writtenAtFill < (n-8000)/2 {
		t.Errorf("%v entries written after the disk filled, of %d", w-writtenAtFill, n-8000)
	}
	p, err := store.Query(context.Background(), Query{Limit: 1})
	if err != nil || len(p.Entries) != 1 || p.Entries[0].UID != fmt.Sprintf("u%07d", n-1) {
		t.Errorf("newest entry %+v, %v; want the last one recorded", p.Entries, err)
	}
	t.Logf("full errors %v, removed for size %v, written %v; log:\n%s", testutil.ToFloat64(r.m.errFull), testutil.ToFloat64(r.m.removedSize),
		testutil.ToFloat64(r.m.written), logs.String())
}

// TestCorruptFileSetAside: a history file that is not a database, or
// whose pages are damaged, is set aside with an error log line and a new
// one started; read-only (fieldwatch history --state-dir) it is an error.
func TestCorruptFileSetAside(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"not a database", func(t *testing.T, path string) {
			if err := os.WriteFile(path, bytes.Repeat([]byte("not sqlite "), 1000), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"damaged pages", func(t *testing.T, path string) {
			s, err := OpenSQLite(path, SQLiteOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var es []Entry
			for i := range 2000 {
				es = append(es, fixture{uid: fmt.Sprintf("u%d", i), rv: "1", namespace: "ns", name: "n", time: t0}.entry(t, Delivered))
			}
			write(t, s, es...)
			if err := s.Close(); err != nil { // checkpoints the log into the file
				t.Fatal(err)
			}
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = f.Close() }()
			// Every page but the first (the header and the schema).
			fi, _ := f.Stat()
			junk := bytes.Repeat([]byte{0xA5}, 4096)
			for off := int64(4096); off < fi.Size(); off += 4096 {
				if _, err := f.WriteAt(junk, off); err != nil {
					t.Fatal(err)
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "history.db")
			tc.damage(t, path)
			if _, err := OpenSQLite(path, SQLiteOptions{ReadOnly: true}); err == nil {
				t.Error("read-only open of a corrupt file: no error")
			}
			var logs testenv.SyncBuffer
			s, err := OpenSQLite(path, SQLiteOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatalf("OpenSQLite: %v", err)
			}
			defer func() { _ = s.Close() }()
			aside, _ := filepath.Glob(path + ".corrupt-*")
			if len(aside) == 0 || !strings.Contains(logs.String(), "history database is corrupt: set aside") {
				t.Errorf("set aside %v; log:\n%s", aside, logs.String())
			}
			if n := write(t, s, fixture{uid: "new", rv: "1", namespace: "ns", name: "n", time: t0}.entry(t, Delivered)); n != 1 {
				t.Errorf("the new file took %d entries, want 1", n)
			}
		})
	}
}

// TestCorruptWhileRunning: the file is damaged under a running store;
// the next query finds it, sets it aside, starts a new one and says so
// (ErrReset); the recorder goes on writing there.
func TestCorruptWhileRunning(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	var logs testenv.SyncBuffer
	m := NewMetrics(prometheus.NewRegistry())
	s, err := OpenSQLite(path, SQLiteOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	var es []Entry
	for i := range 3000 {
		es = append(es, fixture{uid: fmt.Sprintf("u%d", i), rv: "1", namespace: fmt.Sprintf("ns%d", i%7), name: "n", time: t0.Add(time.Duration(i) * time.Second)}.entry(t, Delivered))
	}
	write(t, s, es...)
	if err := s.Checkpoint(context.Background()); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	junk := bytes.Repeat([]byte{0x5A}, 4096)
	for off := int64(4096); off < fi.Size(); off += 4096 {
		if _, err := f.WriteAt(junk, off); err != nil {
			t.Fatal(err)
		}
	}
	_ = f.Close()
	if _, err := s.Query(context.Background(), Query{Namespace: "ns3"}); !errors.Is(err, ErrReset) {
		t.Errorf("query of the damaged file: %v, want ErrReset", err)
	}
	r := NewRecorder(RecorderOptions{Store: s, Metrics: m, FlushInterval: time.Millisecond})
	r.Record(fixture{uid: "after", rv: "1", namespace: "ns", name: "n", time: t0.Add(time.Hour)}.payload(), Delivered)
	r.Close(context.Background())
	aside, _ := filepath.Glob(path + ".corrupt-*")
	if len(aside) == 0 || testutil.ToFloat64(r.m.errCorrupt) == 0 {
		t.Errorf("set aside %v, corrupt errors %v; log:\n%s", aside, testutil.ToFloat64(r.m.errCorrupt), logs.String())
	}
	if got := queryAll(t, s, Query{}); len(got) != 1 || got[0] != "after/1/audit" {
		t.Errorf("the new file holds %v, want the entry recorded after the damage", got)
	}
}
