package app

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// TestHTTPEndpoints: /healthz answers at once, /readyz once every watched
// resource has synced, /metrics exposes the process's metrics, and
// /debug/pprof/ never on HTTPAddr, and on PprofAddr (a loopback
// address) when it is set.
func TestHTTPEndpoints(t *testing.T) {
	env := testenv.Shared(t)
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	if err := writeTestFile(rulesFile, "rules:\n  - name: cm\n    match: {resources: [{group: '', kind: ConfigMap}]}\n    actions: [{log: {}}]\n"); err != nil {
		t.Fatal(err)
	}
	for _, pprof := range []bool{false, true} {
		pprofAddr := ""
		if pprof {
			pprofAddr = "127.0.0.1:0" // the address it binds is logged
		}
		var logs testenv.SyncBuffer
		ctx, cancel := context.WithCancel(context.Background())
		addr := make(chan string, 1)
		done := make(chan error, 1)
		go func() {
			done <- Run(ctx, Config{
				RulesFiles: []string{rulesFile}, Rest: env.Config(), HTTPAddr: "127.0.0.1:0",
				Stdout: io.Discard, Logger: slog.New(slog.NewJSONHandler(&logs, nil)), PprofAddr: pprofAddr,
				Ready: func(a string) { addr <- a },
			})
		}()
		base := "http://" + <-addr
		if code := get(base + "/healthz"); code != http.StatusOK {
			t.Errorf("/healthz = %d", code)
		}
		testenv.Eventually(t, time.Minute, "/readyz", func() bool { return get(base+"/readyz") == http.StatusOK })
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		samples := map[string]bool{}
		for _, line := range strings.Split(string(body), "\n") {
			if !strings.HasPrefix(line, "#") {
				samples[line] = true
			}
		}
		for _, want := range []string{"fieldwatch_rules 1", "fieldwatch_watcher_resources 1", "fieldwatch_leader 1", "fieldwatch_shard_server_side 0"} {
			if !samples[want] {
				t.Errorf("/metrics lacks the sample %q", want)
			}
		}
		if code := get(base + "/debug/pprof/"); code != http.StatusNotFound {
			t.Errorf("pprof %v: /debug/pprof/ on the HTTP address = %d, want 404", pprof, code)
		}
		if pprof {
			var bound string
			testenv.Eventually(t, time.Minute, "the pprof address in the log", func() bool {
				bound = loggedAddr(logs.String(), "serving Go profiles on a loopback address")
				return bound != ""
			})
			if code := get("http://" + bound + "/debug/pprof/"); code != http.StatusOK {
				t.Errorf("/debug/pprof/ on %s = %d, want 200", bound, code)
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

// TestPprofLoopbackOnly: profiles are served on loopback addresses only.
func TestPprofLoopbackOnly(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:6060": true, "localhost:6060": true, "[::1]:6060": true, "127.0.0.2:0": true,
		":6060": false, "0.0.0.0:6060": false, "[::]:6060": false, "10.0.0.1:6060": false, "example.com:6060": false, "6060": false,
	} {
		if err := checkLoopback(addr); (err == nil) != ok {
			t.Errorf("checkLoopback(%q) = %v, want ok %v", addr, err, ok)
		}
	}
	err := Run(context.Background(), Config{RulesFiles: []string{"unused.yaml"}, Rest: testenv.Shared(t).Config(),
		PprofAddr: ":0", Stdout: io.Discard, Logger: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Errorf("Run with PprofAddr :0 = %v, want it refused", err)
	}
}

// loggedAddr returns the addr of the first JSON log line whose message is
// msg, or "".
func loggedAddr(logs, msg string) string {
	for _, line := range strings.Split(logs, "\n") {
		var rec struct{ Msg, Addr string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == msg {
			return rec.Addr
		}
	}
	return ""
}

// TestHistoryAddr: with History.Addr the history's API and pages are
// served on a listener of their own and not on HTTPAddr, so that a
// NetworkPolicy can open the two to different clients; /metrics and the
// probes stay on HTTPAddr. Without a token the history answers 401 (no
// History.InsecureLoopback).
func TestHistoryAddr(t *testing.T) {
	env := testenv.Shared(t)
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	if err := writeTestFile(rulesFile, "rules:\n  - name: cm\n    match: {resources: [{group: '', kind: ConfigMap}]}\n    actions: [{log: {}}]\n"); err != nil {
		t.Fatal(err)
	}
	var logs testenv.SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{
			RulesFiles: []string{rulesFile}, Rest: env.Config(), HTTPAddr: "127.0.0.1:0", StateDir: t.TempDir(),
			History: HistoryConfig{Addr: "127.0.0.1:0"},
			Stdout:  io.Discard, Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
			Ready: func(a string) { addr <- a },
		})
	}()
	base := "http://" + <-addr
	var history string
	testenv.Eventually(t, time.Minute, "the history's address in the log", func() bool {
		history = loggedAddr(logs.String(), "history server listening")
		return history != ""
	})
	for _, tc := range []struct {
		url  string
		code int
	}{
		{base + "/metrics", http.StatusOK},
		{base + "/healthz", http.StatusOK},
		{base + "/api/v1/history", http.StatusNotFound},
		{base + "/history", http.StatusNotFound},
		{"http://" + history + "/api/v1/history", http.StatusUnauthorized},
		{"http://" + history + "/history", http.StatusUnauthorized},
		{"http://" + history + "/metrics", http.StatusNotFound},
	} {
		if code := get(tc.url); code != tc.code {
			t.Errorf("%s = %d, want %d", tc.url, code, tc.code)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
