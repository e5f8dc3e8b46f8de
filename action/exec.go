package action

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/fieldwatch/fieldwatch/rules"
)

// waitDelay bounds how long an exited (or killed) child's output pipes
// are read: a grandchild that escaped the process group could hold them
// open forever.
const waitDelay = 2 * time.Second

// inheritedEnv are the only variables of fieldwatch's environment a child
// gets (besides the action's env): fieldwatch's environment holds secrets
// (a webhook signing secret named by secretEnv, say) that are not the
// child's to read.
var inheritedEnv = []string{"PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR"}

// execAction runs a command with the payload on stdin.
type execAction struct {
	argv    []string
	env     []string // inheritedEnv of the process's environment plus the action's
	timeout time.Duration
	procs   chan struct{} // shared cap on running children
	limit   int           // bytes of stdout and of stderr kept
	log     *slog.Logger
}

var _ handler = &execAction{}

func newExec(spec *rules.ExecAction, procs chan struct{}, limit int, log *slog.Logger) *execAction {
	e := &execAction{
		argv:    spec.Command,
		timeout: spec.Timeout,
		procs:   procs,
		limit:   limit,
		log:     log,
	}
	if e.timeout <= 0 {
		e.timeout = rules.DefaultExecTimeout
	}
	for _, k := range inheritedEnv {
		if v, ok := os.LookupEnv(k); ok {
			e.env = append(e.env, k+"="+v)
		}
	}
	keys := make([]string, 0, len(spec.Env))
	for k := range spec.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		e.env = append(e.env, k+"="+spec.Env[k]) // later entries win
	}
	return e
}

func (e *execAction) attempt(ctx context.Context, it *item) error {
	if len(e.argv) == 0 {
		return permanent(errors.New("exec: empty command"))
	}
	select {
	case e.procs <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-e.procs }()

	runCtx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	cmd := exec.CommandContext(runCtx, e.argv[0], e.argv[1:]...)
	cmd.Env = e.env
	cmd.Stdin = bytes.NewReader(it.f.Payload)
	stdout, stderr := &capped{max: e.limit}, &capped{max: e.limit}
	// The child leads a process group of its own, so that the timeout
	// kills what it started too, not just the child.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	cmd.WaitDelay = waitDelay

	start := time.Now()
	err := run(cmd, stdout, stderr)
	elapsed := time.Since(start)
	attrs := []any{"pid", pidOf(cmd), "elapsed", elapsed.Round(time.Millisecond).String()}
	if stdout.Len() > 0 {
		attrs = append(attrs, "stdout", stdout.String())
	}
	if stderr.Len() > 0 {
		attrs = append(attrs, "stderr", stderr.String())
	}
	switch {
	case err == nil:
		if stdout.Len() > 0 || stderr.Len() > 0 {
			withFiring(e.log, it).Info("exec output", attrs...)
		}
		return nil
	case runCtx.Err() == context.DeadlineExceeded && ctx.Err() == nil:
		err = fmt.Errorf("exec %s: killed after the %s timeout", e.argv[0], e.timeout)
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission):
		return permanent(fmt.Errorf("exec %s: %w", e.argv[0], err))
	default:
		err = fmt.Errorf("exec %s: %w", e.argv[0], err)
	}
	withFiring(e.log, it).Warn("exec failed", append(attrs, "error", err)...)
	if tail := lastLine(stderr.Bytes()); tail != "" {
		err = fmt.Errorf("%w: %s", err, tail)
	}
	return err
}

// run runs cmd with its stdout and stderr copied to the given writers
// through pipes of its own, so that Wait returns when the child exits.
// Then it kills the child's process group: whatever the child left
// running in the background dies with it, also after a success. The
// output is read until its last writer is gone, or for waitDelay more
// when a process that escaped the group holds it.
func run(cmd *exec.Cmd, stdout, stderr io.Writer) error {
	var copies sync.WaitGroup
	var readers []*os.File
	for _, out := range []struct {
		set *io.Writer
		w   io.Writer
	}{{&cmd.Stdout, stdout}, {&cmd.Stderr, stderr}} {
		r, w, err := os.Pipe()
		if err != nil {
			return err
		}
		defer func() { _ = w.Close() }() // after Start, closed at once below
		readers = append(readers, r)
		*out.set = w
		copies.Go(func() { _, _ = io.Copy(out.w, r) })
	}
	closeAll := func() {
		for _, r := range readers {
			_ = r.Close()
		}
	}
	if err := cmd.Start(); err != nil {
		_ = cmd.Stdout.(*os.File).Close()
		_ = cmd.Stderr.(*os.File).Close()
		copies.Wait()
		closeAll()
		return err
	}
	// The child holds the write ends now.
	_ = cmd.Stdout.(*os.File).Close()
	_ = cmd.Stderr.(*os.File).Close()
	err := cmd.Wait()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	read := make(chan struct{})
	go func() {
		copies.Wait()
		close(read)
	}()
	select {
	case <-read:
	case <-time.After(waitDelay):
		closeAll() // an escaped process holds the pipes: stop reading
		<-read
	}
	closeAll()
	return err
}

func pidOf(cmd *exec.Cmd) int {
	if cmd.Process == nil {
		return 0
	}
	return cmd.Process.Pid
}

// lastLine returns the last non-empty line of b, at most 200 bytes, for
// error messages.
func lastLine(b []byte) string {
	b = bytes.TrimRight(b, " \t\r\n")
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	if len(b) > 200 {
		b = b[len(b)-200:]
	}
	return string(bytes.ToValidUTF8(b, nil))
}

// capped keeps the first max bytes written to it and counts the rest.
type capped struct {
	max int

	mu      sync.Mutex
	buf     bytes.Buffer
	dropped int
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	room := c.max - c.buf.Len()
	if room >= len(p) {
		c.buf.Write(p)
	} else {
		c.buf.Write(p[:max(room, 0)])
		c.dropped += len(p) - max(room, 0)
	}
	return len(p), nil
}

func (c *capped) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Len()
}

func (c *capped) Bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.buf.Bytes())
}

func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := string(bytes.ToValidUTF8(c.buf.Bytes(), []byte("?")))
	if c.dropped > 0 {
		s += fmt.Sprintf("... (%d more bytes)", c.dropped)
	}
	return s
}
