package action

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// DeadLetterFile is the name of the dead-letter file inside
// Options.StateDir.
const DeadLetterFile = "dead-letter.jsonl"

// ShutdownError is the error recorded for a firing that was still
// undelivered when Close's grace period ended, or that was handed to a
// closed Dispatcher.
const ShutdownError = "shutdown"

// DeadLetter is one line of the dead-letter file: a firing that one action
// failed to deliver for good.
type DeadLetter struct {
	// Time is when the firing was given up.
	Time time.Time `json:"time"`
	// Rule and Action (the action's kind) name the action, Index is its
	// position in the rule's actions list.
	Rule   string `json:"rule"`
	Action string `json:"action"`
	Index  int    `json:"index"`
	// Attempts is how many deliveries were tried (0 when none was).
	Attempts int `json:"attempts"`
	// Error is why the firing was given up: the last attempt's error, or
	// ShutdownError.
	Error string `json:"error"`
	// LastError is the last attempt's error when Error is ShutdownError.
	LastError string `json:"lastError,omitempty"`
	// ID is the payload's id.
	ID string `json:"id"`
	// Payload is the payload, as the actions received it.
	Payload json.RawMessage `json:"payload"`
}

// deadLetters appends DeadLetters to the dead-letter file, one fsync'd
// JSON line each. Without a file (no state directory), or when the file
// cannot be written, the dead letter is logged at error level with the
// full payload instead: never dropped.
type deadLetters struct {
	log  *slog.Logger
	path string // "" = log only

	mu sync.Mutex
	f  *os.File // opened on first use, closed by close
}

func newDeadLetters(stateDir string, log *slog.Logger) *deadLetters {
	dl := &deadLetters{log: log}
	if stateDir != "" {
		dl.path = filepath.Join(stateDir, DeadLetterFile)
	}
	return dl
}

func (dl *deadLetters) write(rec DeadLetter) {
	if !json.Valid(rec.Payload) {
		// Keep the record valid JSON lines whatever the payload is.
		quoted, _ := json.Marshal(string(rec.Payload))
		rec.Payload = quoted
	}
	line, err := json.Marshal(rec)
	if err == nil && dl.path != "" {
		err = dl.append(append(line, '\n'))
		if err == nil {
			return
		}
	}
	msg := "dead letter"
	attrs := []slog.Attr{
		slog.String("rule", rec.Rule), slog.String("action", rec.Action), slog.Int("index", rec.Index),
		slog.String("id", rec.ID), slog.Int("attempts", rec.Attempts), slog.String("error", rec.Error),
		slog.Any("payload", rec.Payload),
	}
	if rec.LastError != "" {
		attrs = append(attrs, slog.String("lastError", rec.LastError))
	}
	if err != nil {
		msg = "dead letter not written to file, logged instead"
		attrs = append(attrs, slog.String("writeError", err.Error()))
	}
	dl.log.LogAttrs(context.Background(), slog.LevelError, msg, attrs...)
}

func (dl *deadLetters) append(line []byte) error {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	if dl.f == nil {
		if err := os.MkdirAll(filepath.Dir(dl.path), 0o700); err != nil {
			return fmt.Errorf("dead-letter dir: %w", err)
		}
		f, err := os.OpenFile(dl.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return fmt.Errorf("open dead-letter file: %w", err)
		}
		dl.f = f
	}
	if _, err := dl.f.Write(line); err != nil {
		// Reopen next time: the file may have been removed or the disk
		// remounted.
		_ = dl.f.Close()
		dl.f = nil
		return fmt.Errorf("write dead-letter file: %w", err)
	}
	if err := dl.f.Sync(); err != nil {
		return fmt.Errorf("fsync dead-letter file: %w", err)
	}
	return nil
}

// close closes the file; a later write opens it again.
func (dl *deadLetters) close() error {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	if dl.f == nil {
		return nil
	}
	err := dl.f.Close()
	dl.f = nil
	return err
}
