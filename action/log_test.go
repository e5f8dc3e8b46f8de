package action

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
	"github.com/fieldwatch/fieldwatch/rules"
)

// TestLogStdout: one line per firing, the payload bytes, in order.
func TestLogStdout(t *testing.T) {
	h := newHarness(t, nil)
	r := &rules.Rule{Name: "log", Actions: []rules.Action{{Log: &rules.LogAction{}}}}
	done := newDoneCounter(t)
	var want []string
	for range 500 {
		f := newFiring(r)
		want = append(want, string(f.Payload))
		h.deliver(t, f, done.fn(f.ID))
	}
	testenv.Eventually(t, 5*time.Second, "done", func() bool { return done.total.Load() == 500 })
	got := strings.Split(strings.TrimSuffix(h.stdout.String(), "\n"), "\n")
	if len(got) != len(want) {
		t.Fatalf("%d lines, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("line %d = %s, want %s", i, got[i], want[i])
		}
	}
}

// TestLogCompactsMultilinePayload: a payload with newlines still makes one
// line.
func TestLogCompactsMultilinePayload(t *testing.T) {
	h := newHarness(t, nil)
	r := &rules.Rule{Name: "log", Actions: []rules.Action{{Log: &rules.LogAction{}}}}
	f := newFiring(r)
	f.Payload = []byte("{\n  \"id\": \"x\",\n  \"n\": [1,\n 2]\n}")
	done := newDoneCounter(t)
	h.deliver(t, f, done.fn(f.ID))
	testenv.Eventually(t, 5*time.Second, "done", func() bool { return done.count(f.ID) == 1 })
	if got := h.stdout.String(); got != `{"id":"x","n":[1,2]}`+"\n" {
		t.Errorf("stdout = %q", got)
	}
}

// TestLogFileReopen: lines go to the file; after a rotation (rename) and
// Reopen they go to a new file at the path, none lost.
func TestLogFileReopen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "firings.jsonl")
	h := newHarness(t, nil)
	// Two rules share the file: their lines must not interleave.
	a := &rules.Rule{Name: "a", Actions: []rules.Action{{Log: &rules.LogAction{File: path}}}}
	b := &rules.Rule{Name: "b", Actions: []rules.Action{{Log: &rules.LogAction{File: path}}}}
	done := newDoneCounter(t)
	send := func(n int) {
		for range n {
			for _, r := range []*rules.Rule{a, b} {
				f := newFiring(r)
				h.deliver(t, f, done.fn(f.ID))
			}
		}
	}
	send(100)
	testenv.Eventually(t, 5*time.Second, "first batch", func() bool { return done.total.Load() == 200 })
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if err := h.Reopen(); err != nil {
		t.Fatalf("Reopen: %v", err)
	}
	send(50)
	testenv.Eventually(t, 5*time.Second, "second batch", func() bool { return done.total.Load() == 300 })
	if n := jsonLines(t, path+".1"); n != 200 {
		t.Errorf("rotated file has %d lines, want 200", n)
	}
	if n := jsonLines(t, path); n != 100 {
		t.Errorf("new file has %d lines, want 100", n)
	}
	if h.stdout.String() != "" {
		t.Errorf("file log actions wrote to stdout: %q", h.stdout.String())
	}
}

// jsonLines counts the lines of path, failing on one that is not a JSON
// object.
func jsonLines(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	n := 0
	s := bufio.NewScanner(f)
	for s.Scan() {
		var m map[string]any
		if err := json.Unmarshal(s.Bytes(), &m); err != nil {
			t.Fatalf("%s line %d: %v: %q", path, n+1, err, s.Text())
		}
		n++
	}
	return n
}

// TestLogFileUnwritable: a log file that cannot be opened is retried, then
// dead-lettered.
func TestLogFileUnwritable(t *testing.T) {
	h := newHarness(t, nil)
	path := filepath.Join(t.TempDir(), "missing-dir", "firings.jsonl")
	r := &rules.Rule{Name: "bad", Actions: []rules.Action{{Log: &rules.LogAction{File: path}}}}
	f := newFiring(r)
	done := newDoneCounter(t)
	h.deliver(t, f, done.fn(f.ID))
	// The default budget retries for a while; Close cuts it short.
	testenv.Eventually(t, 5*time.Second, "a failed attempt", func() bool { return h.metric(t, "failed_total", "bad", "log", 0) >= 1 })
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "done once the directory exists", func() bool { return done.count(f.ID) == 1 })
	if n := jsonLines(t, path); n != 1 {
		t.Errorf("%d lines, want 1", n)
	}
}
