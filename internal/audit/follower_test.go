package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/internal/testenv"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// logLine is a real Metadata-level patch event of the apiserver's log with
// the given auditID.
func logLine(t testing.TB, id string) []byte {
	t.Helper()
	for _, l := range readLines(t, apiserverLog) {
		if bytes.Contains(l, []byte(`"level":"Metadata","auditID":`)) && bytes.Contains(l, []byte(`"verb":"patch"`)) {
			var ev map[string]any
			if err := json.Unmarshal(l, &ev); err != nil {
				t.Fatal(err)
			}
			ev["auditID"] = id
			out, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			return append(out, '\n')
		}
	}
	t.Fatal("no Metadata patch in " + apiserverLog)
	return nil
}

func lines(t testing.TB, prefix string, from, to int) []byte {
	t.Helper()
	var b bytes.Buffer
	for i := from; i < to; i++ {
		b.Write(logLine(t, fmt.Sprintf("%s-%d", prefix, i)))
	}
	return b.Bytes()
}

func ids(prefix string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s-%d", prefix, i))
	}
	return out
}

// TestFollowerSplitsLines feeds the log in chunks of random sizes: the
// records are those of the lines, a partial line is never decoded half,
// and an overlong line is skipped without losing the next.
func TestFollowerSplitsLines(t *testing.T) {
	data := append(lines(t, "a", 0, 30), '\n') // an empty line too
	long := bytes.Repeat([]byte("x"), 3000)
	data = append(data, long...)
	data = append(data, '\n')
	data = append(data, lines(t, "b", 0, 5)...)
	for seed := range uint64(20) {
		sink := &recordingSink{}
		m := NewMetrics(nil)
		f, err := NewFollower(FollowerOptions{Path: "unused", MaxLineBytes: 2500, Metrics: m, Logger: slog.New(slog.DiscardHandler)}, sink)
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(seed, 1))
		for rest := data; len(rest) > 0; {
			n := min(len(rest), 1+r.IntN(700))
			f.consume(slices.Clone(rest[:n]))
			rest = rest[n:]
		}
		want := append(ids("a", 0, 30), ids("b", 0, 5)...)
		if got := sink.ids(); !slices.Equal(got, want) {
			t.Fatalf("seed %d: got %v, want %v", seed, got, want)
		}
		if v := testutil.ToFloat64(m.logSkipped); v != 1 {
			t.Errorf("seed %d: %v lines skipped, want 1", seed, v)
		}
		if v := testutil.ToFloat64(m.decodeErrorsBy[SourceLog]); v != 0 {
			t.Errorf("seed %d: %v decode errors", seed, v)
		}
		if f.lineStart != int64(len(data)) {
			t.Errorf("seed %d: lineStart %d, want %d", seed, f.lineStart, len(data))
		}
	}
}

// runFollower runs a follower until the returned stop is called, which
// fails the test unless Run returns within 5 s. With started, it returns
// once the follower has opened the file, or found it missing. logs is
// what the follower logged.
func runFollower(t *testing.T, opts FollowerOptions, sink Sink, started bool) (stop func(), logs *testenv.SyncBuffer) {
	t.Helper()
	opts.PollInterval = 10 * time.Millisecond
	logs = &testenv.SyncBuffer{}
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	f, err := NewFollower(opts, sink)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("follower: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("the follower did not stop within 5s of its context ending")
		}
	}
	t.Cleanup(stop)
	if started {
		testenv.Eventually(t, 5*time.Second, "the follower started", func() bool {
			l := logs.String()
			return strings.Contains(l, "audit log: following") || strings.Contains(l, "audit log: waiting for the file")
		})
	}
	return stop, logs
}

func appendFile(t *testing.T, path string, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func waitIDs(t *testing.T, sink *recordingSink, want []string) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, fmt.Sprintf("%d records", len(want)), func() bool { return len(sink.ids()) >= len(want) })
	if got := sink.ids(); !slices.Equal(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
}

// TestFollowerRotationAndTruncation: starts at the end, follows a rename
// rotation (reading the old file's last lines first) and a truncation.
func TestFollowerRotationAndTruncation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	appendFile(t, path, lines(t, "before", 0, 5))
	appendFile(t, path, []byte(`{"kind":"Event","half":`)) // the end is mid-line
	sink := &recordingSink{}
	m := NewMetrics(nil)
	runFollower(t, FollowerOptions{Path: path, Metrics: m}, sink, true)
	appendFile(t, path, []byte("\"rest of a line written before\"}\n"))
	appendFile(t, path, lines(t, "one", 0, 3))
	waitIDs(t, sink, ids("one", 0, 3))

	// rotation: the writer adds to the old file, renames it, starts a new one
	appendFile(t, path, lines(t, "one", 3, 5))
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	appendFile(t, path, lines(t, "two", 0, 4))
	waitIDs(t, sink, slices.Concat(ids("one", 0, 5), ids("two", 0, 4)))

	// truncation (copytruncate)
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "truncation noticed", func() bool {
		return testutil.ToFloat64(m.logReopens.WithLabelValues("truncated")) == 1
	})
	appendFile(t, path, lines(t, "three", 0, 2))
	waitIDs(t, sink, slices.Concat(ids("one", 0, 5), ids("two", 0, 4), ids("three", 0, 2)))
	if v := testutil.ToFloat64(m.logReopens.WithLabelValues("rotated")); v != 1 {
		t.Errorf("rotations %v, want 1", v)
	}
	if v := testutil.ToFloat64(m.decodeErrorsBy[SourceLog]); v != 0 {
		t.Errorf("%v decode errors: a half line was parsed", v)
	}
}

// TestFollowerWaitsForTheFile: a log that appears after the start is read
// from its beginning.
func TestFollowerWaitsForTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	sink := &recordingSink{}
	runFollower(t, FollowerOptions{Path: path}, sink, true)
	appendFile(t, path, lines(t, "new", 0, 3))
	waitIDs(t, sink, ids("new", 0, 3))
}

// TestFollowerResumes: with a state file, a restart resumes where the last
// run stopped; after a rotation while stopped, the new file is read from
// its start.
func TestFollowerResumes(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	state := filepath.Join(dir, "state")
	appendFile(t, path, lines(t, "old", 0, 2))

	sink := &recordingSink{}
	stop, _ := runFollower(t, FollowerOptions{Path: path, StateFile: state}, sink, true)
	appendFile(t, path, lines(t, "a", 0, 3))
	waitIDs(t, sink, ids("a", 0, 3))
	stop()
	appendFile(t, path, lines(t, "a", 3, 6))
	appendFile(t, path, []byte(`{"partial":`))

	sink2 := &recordingSink{}
	stop, _ = runFollower(t, FollowerOptions{Path: path, StateFile: state}, sink2, false)
	waitIDs(t, sink2, ids("a", 3, 6))
	stop()
	data, err := os.ReadFile(state)
	if err != nil || !strings.Contains(string(data), `"offset":`) {
		t.Fatalf("state %s: %v", data, err)
	}

	// the partial line is completed while stopped, then the file rotates
	appendFile(t, path, []byte("\"done\"}\n"))
	appendFile(t, path, lines(t, "a", 6, 7))
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	appendFile(t, path, lines(t, "b", 0, 2))
	sink3 := &recordingSink{}
	runFollower(t, FollowerOptions{Path: path, StateFile: state}, sink3, false)
	waitIDs(t, sink3, ids("b", 0, 2))
}

func TestFollowerOptions(t *testing.T) {
	if _, err := NewFollower(FollowerOptions{}, &recordingSink{}); err == nil || !strings.Contains(err.Error(), "no path") {
		t.Errorf("no path: %v", err)
	}
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := os.WriteFile(state, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewFollower(FollowerOptions{Path: filepath.Join(dir, "log"), StateFile: state, Logger: slog.New(slog.DiscardHandler)}, &recordingSink{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "audit log state "+state) {
		t.Errorf("corrupt state: %v", err)
	}
}

// TestFollowerHugeBinaryLines: 10 MB of random bytes (some 40,000 lines of
// garbage), or 10 MB without a newline (a line over the limit), and then
// events: the events are read, the garbage is counted, and at most a line
// a second is logged about it. Before, each undecodable line was a WARN
// line: 40,638 of them for one such blob.
func TestFollowerHugeBinaryLines(t *testing.T) {
	garbage := make([]byte, 10<<20)
	_, _ = rand.NewChaCha8([32]byte{1}).Read(garbage)
	for _, tc := range []struct {
		name         string
		data         []byte
		decodeErrors bool // else none
		skipped      float64
	}{
		{name: "random bytes with newlines", data: garbage, decodeErrors: true},
		{name: "random bytes without a newline", data: bytes.ReplaceAll(garbage, []byte("\n"), []byte(" ")), skipped: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.log")
			appendFile(t, path, nil)
			sink := &recordingSink{}
			m := NewMetrics(nil)
			stop, logs := runFollower(t, FollowerOptions{Path: path, Metrics: m}, sink, true)
			start := time.Now()
			appendFile(t, path, append(slices.Clone(tc.data), '\n'))
			appendFile(t, path, lines(t, "after", 0, 3))
			waitIDs(t, sink, ids("after", 0, 3))
			elapsed := time.Since(start)
			stop()
			errs := testutil.ToFloat64(m.decodeErrorsBy[SourceLog])
			if tc.decodeErrors && errs < 10000 || !tc.decodeErrors && errs != 0 {
				t.Errorf("%v decode errors counted", errs)
			}
			if v := testutil.ToFloat64(m.logSkipped); v != tc.skipped {
				t.Errorf("%v lines skipped, want %v", v, tc.skipped)
			}
			logged := strings.Count(logs.String(), "audit log: undecodable line") + strings.Count(logs.String(), "audit log: skipped")
			if most := 2 * (1 + int(elapsed/time.Second)); logged > most {
				t.Errorf("%d lines logged about %v decode errors in %s, want at most %d (one a second of each kind)", logged, errs, elapsed, most)
			}
		})
	}
}

// TestFollowerStopsWhileReading: a file far larger than can be read while
// the test runs (1 TiB of NUL bytes, sparse: one line with no end) is
// being read when the context ends, and Run returns at once. Before, the
// follower looked at its context only at the end of the file.
func TestFollowerStopsWhileReading(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	m := NewMetrics(nil)
	stop, _ := runFollower(t, FollowerOptions{Path: path, Metrics: m}, &recordingSink{}, true)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 40); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the endless line skipped (it is being read)", func() bool { return testutil.ToFloat64(m.logSkipped) >= 1 })
	stop()
}
