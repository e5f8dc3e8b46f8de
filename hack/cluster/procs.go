package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// daemon is one process of the cluster, started in its own session (so
// that make's end or a Ctrl-C does not reach it) with its output in
// bin/cluster/logs/NAME.log and its PID in runDir/pids/NAME.pid.
type daemon struct {
	name string
	path string
	args []string
	env  []string
}

// pidRecord is a PID file: the PID and the process's start time, so that
// a PID the kernel has given to another process since is never signalled.
type pidRecord struct {
	pid   int
	start string
}

// start starts d and records its PID.
func (d daemon) start(p paths) error {
	logf, err := os.OpenFile(p.log(d.name), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer func() { _ = logf.Close() }()
	cmd := exec.Command(d.path, d.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), d.env...)
	cmd.Env = append(cmd.Env, "PATH="+p.bin+":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", d.name, err)
	}
	pid := cmd.Process.Pid
	start, err := startTime(pid)
	if err != nil {
		return fmt.Errorf("%s: %w", d.name, err)
	}
	// Reap it if it exits while this process still runs, so that a
	// failed start shows as exited, not as a zombie.
	go func() { _ = cmd.Wait() }()
	return os.WriteFile(pidFile(d.name), fmt.Appendf(nil, "%d %s\n", pid, start), 0o644)
}

// readPID reads NAME's PID file.
func readPID(name string) (pidRecord, error) {
	data, err := os.ReadFile(pidFile(name))
	if err != nil {
		return pidRecord{}, err
	}
	f := strings.Fields(string(data))
	if len(f) != 2 {
		return pidRecord{}, fmt.Errorf("%s: malformed", pidFile(name))
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil {
		return pidRecord{}, fmt.Errorf("%s: %w", pidFile(name), err)
	}
	return pidRecord{pid: pid, start: f[1]}, nil
}

// alive reports whether the recorded process still runs: same PID, same
// start time, not a zombie.
func (r pidRecord) alive() bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", r.pid))
	if err != nil {
		return false
	}
	fields := statFields(stat)
	return len(fields) > 19 && fields[19] == r.start && fields[0] != "Z"
}

// startTime is field 22 of /proc/PID/stat: when the process started, in
// clock ticks since boot.
func startTime(pid int) (string, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	fields := statFields(stat)
	if len(fields) < 20 {
		return "", fmt.Errorf("/proc/%d/stat: too short", pid)
	}
	return fields[19], nil
}

// statFields are the fields of /proc/PID/stat after the command name
// (which may hold spaces): the state first.
func statFields(stat []byte) []string {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(stat[i+1:]))
}

// running reports whether NAME's recorded process runs.
func running(name string) bool {
	r, err := readPID(name)
	return err == nil && r.alive()
}

// stop sends SIGTERM to NAME's recorded process, SIGKILL after grace,
// waits for it to end and removes its PID file.
func stop(name string, grace time.Duration) error {
	r, err := readPID(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(pidFile(name)) }()
	if !r.alive() {
		return nil
	}
	_ = syscall.Kill(r.pid, syscall.SIGTERM)
	if waitGone(r, grace) {
		return nil
	}
	_ = syscall.Kill(r.pid, syscall.SIGKILL)
	if waitGone(r, 10*time.Second) {
		return nil
	}
	return fmt.Errorf("%s (PID %d) did not exit after SIGKILL", name, r.pid)
}

func waitGone(r pidRecord, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for r.alive() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

// killPID stops the process pid, whose start time is read first, as stop
// does for a recorded one.
func killPID(pid int, grace time.Duration) {
	start, err := startTime(pid)
	if err != nil {
		return
	}
	r := pidRecord{pid: pid, start: start}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	if !waitGone(r, grace) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		waitGone(r, 5*time.Second)
	}
}

// logTail returns the last lines of NAME's log.
func logTail(p paths, name string, lines int) string {
	data, err := os.ReadFile(p.log(name))
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}

// componentError is a failure of one component, with the tail of its log.
type componentError struct {
	name string
	err  error
	tail string
	log  string
}

func (e *componentError) Error() string {
	return fmt.Sprintf("%s: %v\nlast lines of %s:\n%s", e.name, e.err, e.log, e.tail)
}

func (e *componentError) Unwrap() error { return e.err }

func failed(p paths, name string, err error) error {
	return &componentError{name: name, err: err, tail: logTail(p, name, 30), log: p.log(name)}
}

// run runs a command and returns its combined output in the error when it
// fails.
func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// quiet runs a command whose failure is expected at times (removing what
// may not exist).
func quiet(name string, args ...string) error {
	return exec.Command(name, args...).Run()
}
