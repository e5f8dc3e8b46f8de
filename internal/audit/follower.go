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
)

// The defaults of FollowerOptions.
const (
	DefaultPollInterval = 100 * time.Millisecond
	DefaultMaxLineBytes = 4 << 20
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
	// rotation or a truncation at the end of the file (default 100ms).
	PollInterval time.Duration
	// MaxLineBytes bounds a line (default 4 MiB); longer ones are skipped
	// and counted.
	MaxLineBytes int
	// Logger receives decoding errors and reopenings (default
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
	return &Follower{opts: opts, sink: sink, m: opts.Metrics, log: opts.Logger}, nil
}

// Run follows the log until ctx ends, then records its state. It waits for
// the file when it does not exist yet; other errors end it.
func (f *Follower) Run(ctx context.Context) error {
	defer func() {
		if f.f != nil {
			_ = f.f.Close()
		}
	}()
	if err := f.open(ctx); err != nil {
		return err
	}
	f.buf = make([]byte, 64<<10)
	for {
		n, err := f.readSome()
		if err != nil {
			return err
		}
		if n > 0 {
			f.saveState(false)
			continue
		}
		switch switched, err := f.checkPath(); {
		case err != nil:
			return err
		case switched:
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

// open opens Path for the first time, waiting for it to exist, and seeks
// to where following starts.
func (f *Follower) open(ctx context.Context) error {
	state, haveState, err := f.loadState()
	if err != nil {
		return err
	}
	for waited := false; ; waited = true {
		file, info, err := openLog(f.opts.Path)
		if err == nil {
			start, whence := int64(0), io.SeekEnd
			switch {
			case haveState && state.Path == f.opts.Path && sameID(info, state) && state.Offset <= info.Size():
				start, whence = state.Offset, io.SeekStart
			case haveState || waited:
				// Another file than the one the state names (rotated while
				// we were away), a truncated one, or one created since we
				// started: all of it is new.
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
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("audit log: %w", err)
		}
		if !waited {
			f.log.Info("audit log: waiting for the file", "path", f.opts.Path)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(f.opts.PollInterval):
		}
	}
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

func openLog(path string) (*os.File, os.FileInfo, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	info, err := file.Stat()
	if err != nil {
		_ = file.Close()
		return nil, nil, err
	}
	return file, info, nil
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
	f.log.Warn("audit log: skipped a line longer than the limit", "path", f.opts.Path, "limit", f.opts.MaxLineBytes)
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
		f.log.Warn("audit log: undecodable line", "path", f.opts.Path, "error", err)
	}
	return rec, keep, err
}

// checkPath looks at Path once the file is read to its end: a different
// file there (rotation) or a shorter one (truncation) makes the follower
// start over on it. It reports whether it did.
func (f *Follower) checkPath() (bool, error) {
	info, err := os.Stat(f.opts.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil // renamed away; the new file is not there yet
	}
	if err != nil {
		return false, fmt.Errorf("audit log: %w", err)
	}
	if f.f != nil && os.SameFile(info, f.info) {
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
	// A new file. The old one may have grown between the last read and the
	// rename: read it to its end first.
	for {
		n, err := f.readSome()
		if err != nil {
			return false, err
		}
		if n == 0 {
			break
		}
	}
	file, info, err := openLog(f.opts.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("audit log: %w", err)
	}
	if f.f != nil {
		_ = f.f.Close()
		f.m.logReopens.WithLabelValues("rotated").Inc()
		f.log.Info("audit log: rotated, following the new file", "path", f.opts.Path)
	}
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
	data, err := os.ReadFile(f.opts.StateFile)
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
