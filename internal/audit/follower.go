package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"time"

	"golang.org/x/time/rate"
)

// The defaults of FollowerOptions.
const (
	DefaultPollInterval = 100 * time.Millisecond
	DefaultMaxLineBytes = 4 << 20
)

// The follower's fixed bounds.
const (
	// readBytes is what one read takes at most; the follower looks at its
	// context between reads.
	readBytes = 64 << 10
	// maxStateBytes bounds the state file.
	maxStateBytes = 64 << 10
)

// FollowerOptions configure a Follower.
type FollowerOptions struct {
	// Path is the audit log the apiserver writes (--audit-log-path, JSON
	// format).
	Path string
	// StateFile, when set, is where the follower records how far it read,
	// so that after a restart it resumes there if Path is still the same
	// file. Without it, or when Path is a new file, see Follower.
	StateFile string
	// PollInterval is how often the follower looks for new lines, a
	// rotation or a truncation at the end of the file, and at a path that
	// is missing or names no regular file (default 100ms).
	PollInterval time.Duration
	// MaxLineBytes bounds a line (default 4 MiB); longer ones are skipped
	// and counted.
	MaxLineBytes int
	// Logger receives decoding errors (at most one line a second, with the
	// count since the last), refusals and reopenings (default
	// slog.Default()).
	Logger *slog.Logger
	// Metrics receive the counts (default unregistered ones).
	Metrics *Metrics
}

// Follower follows the apiserver's JSON audit log and adds its events to
// a Sink. It follows the path across rotations by rename (the old file is
// read to its end first) and across truncation (read again from the
// start). The first time, without a state file or with an empty one, it
// starts at the end of the file: what was logged before it ran is not its
// business. With a state file naming the same file (device and inode) it
// resumes at the saved offset; when the file changed meanwhile it reads
// the new one from the start. A line is decoded only once its newline is
// there: a partial last line waits for the rest.
//
// Only a regular file is followed. A path that names anything else (a
// FIFO, a device such as /dev/zero, a directory) is refused, logged and
// counted once, and looked at again every PollInterval until a regular
// file is there; it is never opened in a way that could block, nor read
// endlessly. Run returns within a read (64 KiB) of its context ending.
type Follower struct {
	opts FollowerOptions
	sink Sink
	m    *Metrics
	log  *slog.Logger

	f    *os.File
	info os.FileInfo
	// readPos is the file position after the last byte read; lineStart
	// where the line being read starts (after the last complete line: the
	// offset a restart resumes at).
	readPos, lineStart int64
	partial            []byte
	skipping           bool // dropping the rest of an overlong line
	buf                []byte
	saved              followState
	savedAt            time.Time
	// refusal is the last reason Path could not be followed, logged and
	// counted once; "" once a file is open.
	refusal string
	// undecodable and overlong count the lines not logged yet since the
	// last line logged about them (at most one a second each).
	undecodable, overlong   int
	undecodableLog, longLog rate.Sometimes
}

// followState is the state file's content.
type followState struct {
	Path   string `json:"path"`
	Device uint64 `json:"device"`
	Inode  uint64 `json:"inode"`
	Offset int64  `json:"offset"`
}

// NewFollower checks the options; Run opens the file.
func NewFollower(opts FollowerOptions, sink Sink) (*Follower, error) {
	if opts.Path == "" {
		return nil, errors.New("audit log: no path")
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.MaxLineBytes <= 0 {
		opts.MaxLineBytes = DefaultMaxLineBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	return &Follower{opts: opts, sink: sink, m: opts.Metrics, log: opts.Logger,
		undecodableLog: rate.Sometimes{Interval: time.Second}, longLog: rate.Sometimes{Interval: time.Second}}, nil
}

// Run follows the log until ctx ends, then records its state. It waits for
// a regular file at Path while there is none; a corrupt state file, a
// failed seek or a failed read end it.
func (f *Follower) Run(ctx context.Context) error {
	defer func() {
		if f.f != nil {
			_ = f.f.Close()
		}
	}()
	if err := f.open(ctx); err != nil || f.f == nil {
		return err
	}
	f.buf = make([]byte, readBytes)
	for {
		n, err := f.readSome()
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			f.saveState(true)
			return nil
		}
		if n > 0 {
			f.saveState(false)
			continue
		}
		switch again, err := f.checkPath(); {
		case err != nil:
			return err
		case again:
			continue
		}
		select {
		case <-ctx.Done():
			f.saveState(true)
			return nil
		case <-time.After(f.opts.PollInterval):
		}
	}
}

// open opens Path for the first time, waiting for a regular file to be
// there, and seeks to where following starts. It leaves f.f nil when ctx
// ends first.
func (f *Follower) open(ctx context.Context) error {
	state, haveState, err := f.loadState()
	if err != nil {
		return err
	}
	for waited := false; ; waited = true {
		file, info, err := f.openLog()
		if err == nil {
			start, whence := int64(0), io.SeekEnd
			switch {
			case haveState && state.Path == f.opts.Path && sameID(info, state) && state.Offset <= info.Size():
				start, whence = state.Offset, io.SeekStart
			case haveState || waited:
				// Another file than the one the state names (rotated while
				// we were away), a truncated one, or one created (or put
				// in the place of something refused) since we started: all
				// of it is new.
				whence = io.SeekStart
			default:
				// The end, unless that is in the middle of a line.
				f.skipping = endsMidLine(file, info.Size())
			}
			pos, err := file.Seek(start, whence)
			if err != nil {
				_ = file.Close()
				return fmt.Errorf("audit log %s: %w", f.opts.Path, err)
			}
			f.f, f.info, f.readPos, f.lineStart = file, info, pos, pos
			f.log.Info("audit log: following", "path", f.opts.Path, "offset", pos)
			return nil
		}
		if !waited && errors.Is(err, fs.ErrNotExist) {
			f.log.Info("audit log: waiting for the file", "path", f.opts.Path)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(f.opts.PollInterval):
		}
	}
}

// openLog opens Path if it is a regular file. Otherwise (but when it does
// not exist) it logs and counts the reason once, until a file is open.
func (f *Follower) openLog() (*os.File, os.FileInfo, error) {
	file, info, err := openRegular(f.opts.Path)
	if err == nil {
		f.refusal = ""
		return file, info, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, err
	}
	why := err.Error()
	if info != nil {
		dev, ino := fileID(info)
		why = fmt.Sprintf("%s (%d:%d)", why, dev, ino)
	}
	if why != f.refusal {
		f.refusal = why
		var notRegular *notRegularError
		if errors.As(err, &notRegular) {
			f.m.logOpenFailures.WithLabelValues("not_regular").Inc()
		} else {
			f.m.logOpenFailures.WithLabelValues("error").Inc()
		}
		f.log.Error("audit log: cannot follow it; looking again until a regular file is there", "path", f.opts.Path, "error", err)
	}
	return nil, nil, err
}

// endsMidLine reports whether a file of size bytes ends without a newline.
func endsMidLine(file *os.File, size int64) bool {
	if size == 0 {
		return false
	}
	var b [1]byte
	_, err := file.ReadAt(b[:], size-1)
	return err == nil && b[0] != '\n'
}

// readSome reads what the file has past readPos and hands the complete
// lines to the sink; it returns how many bytes it read.
func (f *Follower) readSome() (int, error) {
	if f.f == nil {
		return 0, nil
	}
	n, err := f.f.Read(f.buf)
	if n > 0 {
		f.consume(f.buf[:n])
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return n, fmt.Errorf("audit log %s: %w", f.opts.Path, err)
	}
	return n, nil
}

// consume splits data (read at readPos) into lines, the first joined with
// the partial line before it, and decodes the complete ones.
func (f *Follower) consume(data []byte) {
	base := f.readPos
	f.readPos += int64(len(data))
	var recs []Record
	ignored := 0
	start := 0
	for {
		i := bytes.IndexByte(data[start:], '\n')
		if i < 0 {
			rest := data[start:]
			switch {
			case f.skipping:
			case len(f.partial)+len(rest) > f.opts.MaxLineBytes:
				f.skipLine()
			default:
				f.partial = append(f.partial, rest...)
			}
			break
		}
		chunk := data[start : start+i]
		start += i + 1
		f.lineStart = base + int64(start)
		if f.skipping {
			f.skipping = false
			continue
		}
		line := chunk
		if len(f.partial) > 0 {
			if len(f.partial)+len(chunk) > f.opts.MaxLineBytes {
				f.skipLine()
				f.skipping = false
				continue
			}
			line = append(f.partial, chunk...)
		}
		if rec, keep, err := f.decode(line); keep {
			recs = append(recs, rec)
		} else if err == nil {
			ignored++
		}
		f.partial = f.partial[:0]
	}
	if len(recs) > 0 || ignored > 0 {
		f.sink.Add(SourceLog, recs, ignored)
	}
}

// skipLine drops the line being read: it is too long.
func (f *Follower) skipLine() {
	f.m.logSkipped.Inc()
	f.overlong++
	f.longLog.Do(func() {
		f.log.Warn("audit log: skipped lines longer than the limit", "path", f.opts.Path, "limit", f.opts.MaxLineBytes, "lines", f.overlong)
		f.overlong = 0
	})
	f.partial = f.partial[:0]
	f.skipping = true
}

func (f *Follower) decode(line []byte) (Record, bool, error) {
	// A file truncated under a writer that does not append (the
	// apiserver's log after a rotation) gets a hole of NUL bytes up to
	// where the writer was.
	line = bytes.TrimSpace(bytes.TrimLeft(line, "\x00"))
	if len(line) == 0 {
		return Record{}, false, nil
	}
	rec, keep, err := DecodeEvent(line)
	if err != nil {
		f.m.decodeErrorsBy[SourceLog].Inc()
		f.undecodable++
		f.undecodableLog.Do(func() {
			f.log.Warn("audit log: undecodable lines", "path", f.opts.Path, "lines", f.undecodable, "error", err)
			f.undecodable = 0
		})
	}
	return rec, keep, err
}

// checkPath looks at Path once the file is read to its end: a different
// file there (rotation) or a shorter one (truncation) makes the follower
// start over on it. It reports whether there is more to read at once: the
// new file, or what the old one got before the rotation.
func (f *Follower) checkPath() (bool, error) {
	info, err := os.Stat(f.opts.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil // renamed away; the new file is not there yet
	}
	if err == nil && os.SameFile(info, f.info) {
		if info.Size() >= f.readPos {
			return false, nil
		}
		f.m.logReopens.WithLabelValues("truncated").Inc()
		f.log.Info("audit log: truncated, reading it from the start", "path", f.opts.Path)
		if _, err := f.f.Seek(0, io.SeekStart); err != nil {
			return false, fmt.Errorf("audit log %s: %w", f.opts.Path, err)
		}
		f.startOver(f.f, info)
		return true, nil
	}
	// A new file (or something that cannot be looked at). The old one may
	// have grown between the last read and the rename: read it to its end
	// first.
	if n, err := f.readSome(); n > 0 || err != nil {
		return n > 0, err
	}
	file, info, err := f.openLog()
	if err != nil {
		// Missing again, or refused: the old file stays open, and Path
		// is looked at again next time.
		return false, nil
	}
	_ = f.f.Close()
	f.m.logReopens.WithLabelValues("rotated").Inc()
	f.log.Info("audit log: rotated, following the new file", "path", f.opts.Path)
	f.startOver(file, info)
	return true, nil
}

func (f *Follower) startOver(file *os.File, info os.FileInfo) {
	if len(f.partial) > 0 || f.skipping {
		// A line the rotation or truncation cut: it never completes.
		f.m.logSkipped.Inc()
	}
	f.f, f.info = file, info
	f.readPos, f.lineStart, f.partial, f.skipping = 0, 0, f.partial[:0], false
	f.saveState(true)
}

func (f *Follower) loadState() (followState, bool, error) {
	if f.opts.StateFile == "" {
		return followState{}, false, nil
	}
	data, err := readRegular(f.opts.StateFile, maxStateBytes)
	if errors.Is(err, fs.ErrNotExist) || err == nil && len(bytes.TrimSpace(data)) == 0 {
		return followState{}, false, nil
	}
	if err != nil {
		return followState{}, false, fmt.Errorf("audit log state: %w", err)
	}
	var s followState
	if err := json.Unmarshal(data, &s); err != nil {
		return followState{}, false, fmt.Errorf("audit log state %s: %w", f.opts.StateFile, err)
	}
	return s, true, nil
}

// saveState writes the state file, at most once a second unless now.
func (f *Follower) saveState(now bool) {
	if f.opts.StateFile == "" || f.f == nil {
		return
	}
	dev, ino := fileID(f.info)
	s := followState{Path: f.opts.Path, Device: dev, Inode: ino, Offset: f.lineStart}
	if s == f.saved || !now && time.Since(f.savedAt) < time.Second {
		return
	}
	data, _ := json.Marshal(s)
	tmp := f.opts.StateFile + ".tmp"
	err := os.WriteFile(tmp, append(data, '\n'), 0o600)
	if err == nil {
		err = os.Rename(tmp, f.opts.StateFile)
	}
	if err != nil {
		f.log.Error("audit log: save state", "path", f.opts.StateFile, "error", err)
		return
	}
	f.saved, f.savedAt = s, time.Now()
}

func sameID(info os.FileInfo, s followState) bool {
	dev, ino := fileID(info)
	return ino != 0 && dev == s.Device && ino == s.Inode
}
