package audit

import (
	"fmt"
	"io"
	"io/fs"
	"os"
)

// notRegularError is the error of a path that names something else than a
// regular file: a FIFO (whose open would wait for a writer), a device
// (/dev/zero never ends), a directory, a socket.
type notRegularError struct {
	path string
	mode fs.FileMode
}

func (e *notRegularError) Error() string {
	kind := "not a regular file"
	switch t := e.mode.Type(); {
	case t&fs.ModeNamedPipe != 0:
		kind = "a FIFO"
	case t&fs.ModeCharDevice != 0:
		kind = "a character device"
	case t&fs.ModeDevice != 0:
		kind = "a device"
	case t&fs.ModeDir != 0:
		kind = "a directory"
	case t&fs.ModeSocket != 0:
		kind = "a socket"
	}
	return fmt.Sprintf("%s is not a regular file but %s", e.path, kind)
}

// openRegular opens path for reading if it names a regular file (through
// symlinks). It looks before it opens, so that a device is never opened,
// opens without blocking (O_NONBLOCK, which does nothing to a regular
// file's reads), so that a FIFO put there meanwhile cannot hold it, and
// looks again at what it opened.
func openRegular(path string) (*os.File, os.FileInfo, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, info, &notRegularError{path: path, mode: info.Mode()}
	}
	file, err := os.OpenFile(path, os.O_RDONLY|openNonBlock, 0)
	if err != nil {
		return nil, nil, err
	}
	if info, err = file.Stat(); err != nil {
		_ = file.Close()
		return nil, nil, err
	}
	if !info.Mode().IsRegular() {
		_ = file.Close()
		return nil, info, &notRegularError{path: path, mode: info.Mode()}
	}
	return file, info, nil
}

// readRegular reads a regular file of at most limit bytes (a certificate,
// a token, a state file): anything else is an error, never a wait nor an
// endless read.
func readRegular(path string, limit int64) ([]byte, error) {
	file, _, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = file.Close() }()
	data, err := io.ReadAll(io.LimitReader(file, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return data, nil
}
