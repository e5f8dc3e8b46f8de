package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// showHistory waits until fieldwatch's history (kept in the state
// directory) holds the n payloads that fired, prints them as `fieldwatch
// history` does, and points at the page that shows them.
func showHistory(ctx context.Context, root, addr string, n int) error {
	server := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, body := get(server + "/metrics")
		if written := metric(body, `fieldwatch_history_entries_total{result="written"}`); written >= float64(n) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the history holds fewer than the %d payloads that fired", n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	say("the history of these changes (fieldwatch history --server %s):", server)
	cmd := exec.CommandContext(ctx, filepath.Join(root, "bin/fieldwatch"), "history", "--server", server)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("fieldwatch history: %w", err)
	}
	say("and as a page: %s/history (the timeline; each object's changes with old and new values; make demo DEMO_FLAGS=-hold keeps it open)", server)
	return nil
}

// metric returns the value of the sample named exactly name in a
// Prometheus text exposition, 0 when absent.
func metric(body, name string) float64 {
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}

// get returns the status and body of url ("" on an error).
func get(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, ""
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
