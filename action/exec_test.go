package action

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
	"github.com/fieldwatch/fieldwatch/rules"
)

// script writes an executable shell script into dir and returns its path.
// The action runs it as argv, without a shell of its own.
func script(t *testing.T, dir, name, body string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func execRule(name string, spec *rules.ExecAction) *rules.Rule {
	return &rules.Rule{Name: name, Actions: []rules.Action{{Exec: spec}}}
}

// TestExecStdinArgsEnv: the payload arrives on stdin, argv as given (no
// shell expansion), the action's environment added.
func TestExecStdinArgsEnv(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	bin := script(t, dir, "notify", `cat > "$OUT.stdin"; printf '%s\n' "$@" > "$OUT.args"; echo "$FW_TEAM" > "$OUT.env"; echo notified`)
	h := newHarness(t, nil)
	r := execRule("exec", &rules.ExecAction{
		Command: []string{bin, "--json", "$HOME", "two words"},
		Env:     map[string]string{"OUT": out, "FW_TEAM": "shop"},
	})
	f := newFiring(r)
	done := newDoneCounter(t)
	h.deliver(t, f, done.fn(f.ID))
	testenv.Eventually(t, 10*time.Second, "done", func() bool { return done.count(f.ID) == 1 })
	if dls := h.deadLetters(t); len(dls) != 0 {
		t.Fatalf("dead letters: %+v", dls)
	}
	for suffix, want := range map[string]string{
		".stdin": string(f.Payload),
		".args":  "--json\n$HOME\ntwo words\n",
		".env":   "shop\n",
	} {
		b, err := os.ReadFile(out + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != want {
			t.Errorf("%s = %q, want %q", suffix, b, want)
		}
	}
	if !strings.Contains(h.logs.String(), `"stdout":"notified\n"`) {
		t.Errorf("stdout not in the log:\n%s", h.logs.String())
	}
}

// TestExecNonZeroExit: a non-zero exit is a failure, retried, then
// dead-lettered with the exit status and the last line of stderr.
func TestExecNonZeroExit(t *testing.T) {
	dir := t.TempDir()
	bin := script(t, dir, "fail", `cat >/dev/null; echo "receiver said no" >&2; exit 3`)
	h := newHarness(t, nil)
	r := execRule("fail", &rules.ExecAction{Command: []string{bin}, Retry: fastRetry})
	f := newFiring(r)
	done := newDoneCounter(t)
	h.deliver(t, f, done.fn(f.ID))
	testenv.Eventually(t, 10*time.Second, "done", func() bool { return done.count(f.ID) == 1 })
	dls := h.deadLetters(t)
	if len(dls) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dls))
	}
	if dls[0].Attempts != 3 || !strings.Contains(dls[0].Error, "exit status 3") || !strings.Contains(dls[0].Error, "receiver said no") {
		t.Errorf("dead letter: attempts %d, error %q", dls[0].Attempts, dls[0].Error)
	}
	if !strings.Contains(h.logs.String(), `"stderr":"receiver said no\n"`) {
		t.Errorf("stderr not in the log:\n%s", h.logs.String())
	}
}

// TestExecMissingBinary: a command that does not exist is not retried.
func TestExecMissingBinary(t *testing.T) {
	h := newHarness(t, nil)
	r := execRule("missing", &rules.ExecAction{Command: []string{filepath.Join(t.TempDir(), "nope")}})
	f := newFiring(r)
	done := newDoneCounter(t)
	h.deliver(t, f, done.fn(f.ID))
	testenv.Eventually(t, 10*time.Second, "done", func() bool { return done.count(f.ID) == 1 })
	if dls := h.deadLetters(t); len(dls) != 1 || dls[0].Attempts != 1 {
		t.Errorf("dead letters %+v, want one after one attempt", dls)
	}
}

// TestExecTimeoutKillsGroup: a process that never exits is killed at the
// timeout together with the children it started.
func TestExecTimeoutKillsGroup(t *testing.T) {
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	bin := script(t, dir, "hang", `sleep 600 & echo $! >> "$PIDS"; echo $$ >> "$PIDS"; wait`)
	h := newHarness(t, nil)
	r := execRule("hang", &rules.ExecAction{
		Command: []string{bin},
		Env:     map[string]string{"PIDS": pids},
		Timeout: 300 * time.Millisecond,
		Retry:   rules.Retry{Attempts: 1},
	})
	f := newFiring(r)
	done := newDoneCounter(t)
	start := time.Now()
	h.deliver(t, f, done.fn(f.ID))
	testenv.Eventually(t, 10*time.Second, "done", func() bool { return done.count(f.ID) == 1 })
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Errorf("gave up after %s, before the timeout", el)
	}
	dls := h.deadLetters(t)
	if len(dls) != 1 || !strings.Contains(dls[0].Error, "timeout") {
		t.Fatalf("dead letters %+v, want one for the timeout", dls)
	}
	ids := readPids(t, pids)
	if len(ids) != 2 {
		t.Fatalf("pids %v, want the script's and its child's", ids)
	}
	for _, pid := range ids {
		testenv.Eventually(t, 5*time.Second, "pid "+strconv.Itoa(pid)+" gone", func() bool { return !alive(pid) })
	}
}

func readPids(t *testing.T, path string) []int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var out []int
	s := bufio.NewScanner(f)
	for s.Scan() {
		pid, err := strconv.Atoi(strings.TrimSpace(s.Text()))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, pid)
	}
	return out
}

// alive reports whether pid is a running process (a zombie is not).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ...: the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// TestExecConcurrencyCap: no more children run at once than MaxProcesses,
// however many exec workers there are.
func TestExecConcurrencyCap(t *testing.T) {
	dir := t.TempDir()
	events := filepath.Join(dir, "events")
	bin := script(t, dir, "slow", `echo start >> "$EVENTS"; sleep 0.3; echo end >> "$EVENTS"`)
	h := newHarness(t, func(o *Options) {
		o.MaxProcesses = 2
		o.ExecWorkers = 4
	})
	// Two actions of two rules share the cap.
	a := execRule("a", &rules.ExecAction{Command: []string{bin}, Env: map[string]string{"EVENTS": events}})
	b := execRule("b", &rules.ExecAction{Command: []string{bin}, Env: map[string]string{"EVENTS": events}})
	done := newDoneCounter(t)
	for range 4 {
		for _, r := range []*rules.Rule{a, b} {
			f := newFiring(r)
			h.deliver(t, f, done.fn(f.ID))
		}
	}
	testenv.Eventually(t, 20*time.Second, "done", func() bool { return done.total.Load() == 8 })
	b2, err := os.ReadFile(events)
	if err != nil {
		t.Fatal(err)
	}
	running, most := 0, 0
	for line := range strings.SplitSeq(strings.TrimSpace(string(b2)), "\n") {
		if line == "start" {
			running++
		} else {
			running--
		}
		most = max(most, running)
	}
	if most > 2 {
		t.Errorf("%d children ran at once, cap 2", most)
	}
	if most < 2 {
		t.Errorf("at most %d child ran at once; the cap of 2 was never used", most)
	}
}

// TestExecOutputBounded: a chatty child's output is cut in the log.
func TestExecOutputBounded(t *testing.T) {
	dir := t.TempDir()
	bin := script(t, dir, "chatty", `i=0; while [ $i -lt 2000 ]; do echo 0123456789; i=$((i+1)); done`)
	h := newHarness(t, func(o *Options) { o.OutputLimit = 100 })
	r := execRule("chatty", &rules.ExecAction{Command: []string{bin}})
	f := newFiring(r)
	done := newDoneCounter(t)
	h.deliver(t, f, done.fn(f.ID))
	testenv.Eventually(t, 10*time.Second, "done", func() bool { return done.count(f.ID) == 1 })
	if !strings.Contains(h.logs.String(), "(21900 more bytes)") {
		t.Errorf("output not cut at 100 bytes:\n%.2000s", h.logs.String())
	}
}

// TestExecMinimalEnvironment: a child gets PATH and the like, and the
// action's env, but none of fieldwatch's other variables (a webhook
// signing secret given by secretEnv, say).
func TestExecMinimalEnvironment(t *testing.T) {
	t.Setenv("FW_HOOK_SECRET", "s3cr3t")
	dir := t.TempDir()
	out := filepath.Join(dir, "env")
	bin := script(t, dir, "env", `env > "$OUT"`)
	h := newHarness(t, nil)
	r := execRule("env", &rules.ExecAction{Command: []string{bin}, Env: map[string]string{"OUT": out, "MODE": "audit"}})
	f := newFiring(r)
	done := newDoneCounter(t)
	h.deliver(t, f, done.fn(f.ID))
	testenv.Eventually(t, 10*time.Second, "done", func() bool { return done.count(f.ID) == 1 })
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		env[k] = v
	}
	if env["MODE"] != "audit" || env["PATH"] != os.Getenv("PATH") {
		t.Errorf("child environment %v lacks MODE=audit or fieldwatch's PATH", env)
	}
	for k := range env {
		switch k {
		case "OUT", "MODE", "PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "PWD", "SHLVL", "_":
			// the action's, the inherited few, and what sh sets itself
		default:
			t.Errorf("child got %s from fieldwatch's environment", k)
		}
	}
}

// TestExecKillsWhatASuccessLeftRunning: a child that exits 0 leaving a
// background process (holding its stdout) succeeds, and what it left is
// killed with its process group.
func TestExecKillsWhatASuccessLeftRunning(t *testing.T) {
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	bin := script(t, dir, "fork", `cat >/dev/null; sleep 600 & echo $! >> "$PIDS"; echo started`)
	h := newHarness(t, nil)
	r := execRule("fork", &rules.ExecAction{Command: []string{bin}, Env: map[string]string{"PIDS": pids}, Retry: rules.Retry{Attempts: 1}})
	f := newFiring(r)
	done := newDoneCounter(t)
	h.deliver(t, f, done.fn(f.ID))
	testenv.Eventually(t, 10*time.Second, "done", func() bool { return done.count(f.ID) == 1 })
	if dls := h.deadLetters(t); len(dls) != 0 {
		t.Fatalf("dead letters %+v, want a success", dls)
	}
	ids := readPids(t, pids)
	if len(ids) != 1 {
		t.Fatalf("pids %v, want the background sleep's", ids)
	}
	testenv.Eventually(t, 5*time.Second, "the background sleep gone", func() bool { return !alive(ids[0]) })
	if !strings.Contains(h.logs.String(), `"stdout":"started\n"`) {
		t.Errorf("stdout not in the log:\n%s", h.logs.String())
	}
}
