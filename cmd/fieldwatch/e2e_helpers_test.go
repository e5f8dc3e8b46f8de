package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/internal/payloadtest"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// binary is the fieldwatch binary the end-to-end tests run: this test
// binary itself (built with -race by go test -race), which runs main
// instead of the tests when asMain is set in its environment. A separate
// go build -race of the command took 15 to 40 s before the first test
// started.
var binary string

// asMain is the environment variable that makes the test binary run
// fieldwatch's main.
const asMain = "FIELDWATCH_TEST_BINARY_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMain) == "1" {
		main()
		return
	}
	exe, err := os.Executable()
	if err != nil {
		_, _ = fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = exe
	// Every process the tests start inherits it; only this binary reads it.
	if err := os.Setenv(asMain, "1"); err != nil {
		_, _ = fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testenv.Main(m, testenv.Options{})
}

// proc is a fieldwatch process run by a test.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	addr   string // the HTTP server's, from its log (httpAddr)
	mu     sync.Mutex
	out    []string // stdout lines: the log action's payloads
	valid  int      // how many lines of out payloads has checked
	stderr bytes.Buffer
	done   chan struct{}
}

// startFieldwatch runs `fieldwatch run` with args against the cluster of
// kubeconfig, waits until /readyz answers 200 (unless noWait), and stops it
// with SIGTERM when the test ends, expecting exit code 0.
func startFieldwatch(t *testing.T, kubeconfig string, args ...string) *proc {
	t.Helper()
	p := launch(t, kubeconfig, args...)
	p.waitReady(60 * time.Second)
	return p
}

func launch(t *testing.T, kubeconfig string, args ...string) *proc {
	t.Helper()
	return launchUnder(t, nil, kubeconfig, args...)
}

// launchUnder is launch with fieldwatch's command line run by the command
// wrap (nil: none), such as prlimit, which execs it in the same process.
func launchUnder(t *testing.T, wrap []string, kubeconfig string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, done: make(chan struct{})}
	full := append([]string{"run", "--kubeconfig", kubeconfig, "--http-addr", "127.0.0.1:0", "--log-level", "debug", "--grace-period", "10s"}, args...)
	argv := append(append(slices.Clone(wrap), binary), full...)
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Stderr = &syncWriter{mu: &p.mu, w: &p.stderr}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		s := bufio.NewScanner(stdout)
		s.Buffer(make([]byte, 4<<20), 4<<20)
		for s.Scan() {
			p.mu.Lock()
			p.out = append(p.out, s.Text())
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.stop()
		}
		if t.Failed() {
			t.Logf("fieldwatch stderr (last 4 KiB):\n%s", tail(p.logs(), 4096))
		}
	})
	return p
}

// stop sends SIGTERM and expects a clean exit. A process just started
// may not handle SIGTERM yet (it would die of it): stop waits until it
// logged its HTTP server's address, which main does after installing its
// handler, or exited.
func (p *proc) stop() {
	p.t.Helper()
	p.httpAddr()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	select {
	case err := <-exited:
		<-p.done
		if err != nil {
			p.t.Errorf("fieldwatch exited with %v", err)
		}
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		p.t.Errorf("fieldwatch did not exit 30s after SIGTERM")
	}
}

func (p *proc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// payloads returns the payloads printed so far; each must be one of
// payload.Payload's as it is written (payloadtest.Check, once per line).
func (p *proc) payloads() []map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []map[string]any
	for i, line := range p.out {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			p.t.Errorf("stdout line is not JSON: %q", line)
			continue
		}
		if i >= p.valid {
			if _, err := payloadtest.Check([]byte(line)); err != nil {
				p.t.Errorf("stdout line: %v", err)
			}
		}
		out = append(out, m)
	}
	p.valid = len(p.out)
	return out
}

// waitPayloads waits until at least n payloads were printed.
func (p *proc) waitPayloads(n int, timeout time.Duration) []map[string]any {
	p.t.Helper()
	testenv.Eventually(p.t, timeout, fmt.Sprintf("%d payloads", n), func() bool { return len(p.payloads()) >= n })
	return p.payloads()
}

// waitPayloadsIn waits until at least n payloads about objects of
// namespace ns were printed (tests run in parallel: other tests' CRDs
// fire cluster-wide rules too) and returns those.
func (p *proc) waitPayloadsIn(ns string, n int, timeout time.Duration) []map[string]any {
	p.t.Helper()
	testenv.Eventually(p.t, timeout, fmt.Sprintf("%d payloads in namespace %s", n, ns), func() bool { return len(inNamespace(p.payloads(), ns)) >= n })
	return inNamespace(p.payloads(), ns)
}

func (p *proc) waitReady(timeout time.Duration) {
	p.t.Helper()
	testenv.Eventually(p.t, timeout, "fieldwatch /readyz", func() bool {
		code, _ := p.get("/readyz")
		return code == http.StatusOK
	})
}

// httpAddr returns the address the process's HTTP server listens on (it
// is told port 0), as its log says; "" if the process exited without
// saying.
func (p *proc) httpAddr() string {
	p.t.Helper()
	p.mu.Lock()
	addr := p.addr
	p.mu.Unlock()
	if addr == "" {
		addr = p.loggedAddr("http server listening")
		p.mu.Lock()
		p.addr = addr
		p.mu.Unlock()
	}
	return addr
}

// loggedAddr waits up to a minute for the log line msg and returns its
// addr; "" if the process exited without logging it.
func (p *proc) loggedAddr(msg string) string {
	p.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if addr := findLogged(p.logs(), msg); addr != "" {
			return addr
		}
		select {
		case <-p.done: // exited: stderr is complete
			return findLogged(p.logs(), msg)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("fieldwatch logged no %q line within a minute; stderr:\n%s", msg, tail(p.logs(), 4096))
		}
	}
}

// findLogged returns the addr of the first JSON log line with message msg.
func findLogged(logs, msg string) string {
	quoted, _ := json.Marshal(msg)
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, string(quoted)) {
			continue
		}
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == msg {
			return rec.Addr
		}
	}
	return ""
}

// get fetches a path of the process's HTTP server.
func (p *proc) get(path string) (int, string) {
	addr := p.httpAddr()
	if addr == "" {
		return 0, "no http server"
	}
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metric returns the value of a metric sample line that starts with
// prefix (name and labels), 0 if absent.
func (p *proc) metric(prefix string) float64 {
	_, body := p.get("/metrics")
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, prefix) {
			var v float64
			fields := strings.Fields(line)
			_, _ = fmt.Sscan(fields[len(fields)-1], &v)
			return v
		}
	}
	return 0
}

type syncWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// repo returns a path in the repository.
func repo(t *testing.T, parts ...string) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(append([]string{root}, parts...)...)
}

// apply applies a manifest with field manager "kubectl".
func apply(t *testing.T, env *testenv.Env, manifest string) {
	t.Helper()
	if _, err := env.Apply(context.Background(), testenv.ApplyOptions{FieldManager: "kubectl"}, []byte(manifest)); err != nil {
		t.Fatal(err)
	}
}

// writeFile writes a file in a fresh temporary directory and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
