package action

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// Log batches: a log action writes what its queue holds, up to these
// bounds, in one write, then completes those firings. So lines reach the
// output as soon as the queue goes idle, and a backlog costs one write
// call per batch rather than per line.
const (
	maxLogBatch      = 1024
	maxLogBatchBytes = 1 << 20
)

// logWriter is the log action's state: its output and a reused buffer
// (only the action's single worker touches it).
type logWriter struct {
	sink *sink
	buf  []byte
}

// logLoop is the log action's worker: it writes batches of lines.
func (in *instance) logLoop(ctx context.Context) {
	batch := make([]*item, 0, maxLogBatch)
	for {
		it, ok := <-in.queue
		if !ok {
			return
		}
		in.took(it)
		batch = append(batch[:0], it)
		buf := in.lw.line(in.lw.buf[:0], it.f.Payload)
	fill:
		for len(batch) < maxLogBatch && len(buf) < maxLogBatchBytes {
			select {
			case it, ok := <-in.queue:
				if !ok {
					break fill // the next receive returns
				}
				in.took(it)
				batch = append(batch, it)
				buf = in.lw.line(buf, it.f.Payload)
			default:
				break fill
			}
		}
		in.deliverBatch(ctx, batch, func(context.Context) error {
			return in.lw.sink.write(buf)
		})
		if cap(buf) <= 4*maxLogBatchBytes {
			in.lw.buf = buf // reuse, unless one huge batch grew it
		}
		clear(batch) // let the payloads go
	}
}

// line appends payload and a newline to buf. A payload is one line of
// compact JSON already; one that holds newlines is compacted.
func (lw *logWriter) line(buf, payload []byte) []byte {
	if bytes.IndexByte(payload, '\n') >= 0 {
		var c bytes.Buffer
		if json.Compact(&c, payload) == nil {
			payload = c.Bytes()
		}
	}
	buf = append(buf, payload...)
	return append(buf, '\n')
}

// sinks are the log actions' outputs, one per destination (stdout or a
// file path), shared by every log action writing there, so that their
// lines never interleave mid-line.
type sinks struct {
	stdout io.Writer

	mu sync.Mutex
	m  map[string]*sink // by file path; "" is stdout
}

func newSinks(stdout io.Writer) *sinks {
	return &sinks{stdout: stdout, m: map[string]*sink{}}
}

// get returns the sink for path ("" = stdout).
func (ss *sinks) get(path string) *sink {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s, ok := ss.m[path]
	if !ok {
		s = &sink{path: path}
		if path == "" {
			s.w = ss.stdout
		}
		ss.m[path] = s
	}
	return s
}

// reopen reopens every file sink.
func (ss *sinks) reopen() error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	var errs []error
	for _, s := range ss.m {
		errs = append(errs, s.reopen())
	}
	return errors.Join(errs...)
}

// close closes every file sink; a later write opens the file again.
func (ss *sinks) close() error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	var errs []error
	for _, s := range ss.m {
		errs = append(errs, s.close())
	}
	return errors.Join(errs...)
}

// sink is one output of log actions.
type sink struct {
	path string // "" for stdout

	mu sync.Mutex
	w  io.Writer // stdout, or f
	f  *os.File  // nil until opened, and after an error or close
}

// write writes p, lines only, in one call.
func (s *sink) write(p []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.path != "" && s.f == nil {
		if err := s.open(); err != nil {
			return err
		}
	}
	if _, err := s.w.Write(p); err != nil {
		if s.f != nil {
			// Open the file anew for the retry: it may have been
			// removed, or its disk remounted.
			_ = s.f.Close()
			s.f = nil
		}
		return fmt.Errorf("write log: %w", err)
	}
	return nil
}

func (s *sink) open() error {
	f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return fmt.Errorf("open log file: %w", err)
	}
	s.f, s.w = f, f
	return nil
}

// reopen closes the file and opens it again at its path, where log
// rotation may have put a new file.
func (s *sink) reopen() error {
	if s.path == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	if s.f != nil {
		err = s.f.Close()
		s.f = nil
	}
	return errors.Join(err, s.open())
}

func (s *sink) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}
