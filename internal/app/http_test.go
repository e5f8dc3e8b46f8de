package app

import (
	"context"
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
// /debug/pprof/ only with Pprof.
func TestHTTPEndpoints(t *testing.T) {
	env := testenv.Shared(t)
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	if err := writeTestFile(rulesFile, "rules:\n  - name: cm\n    match: {resources: [{group: '', kind: ConfigMap}]}\n    actions: [{log: {}}]\n"); err != nil {
		t.Fatal(err)
	}
	for _, pprof := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		addr := make(chan string, 1)
		done := make(chan error, 1)
		go func() {
			done <- Run(ctx, Config{
				RulesFiles: []string{rulesFile}, Rest: env.Config(), HTTPAddr: "127.0.0.1:0",
				Stdout: io.Discard, Logger: slog.New(slog.DiscardHandler), Pprof: pprof,
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
		want := http.StatusNotFound
		if pprof {
			want = http.StatusOK
		}
		if code := get(base + "/debug/pprof/"); code != want {
			t.Errorf("pprof %v: /debug/pprof/ = %d, want %d", pprof, code, want)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}
