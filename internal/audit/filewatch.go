package audit

import (
	"os"
	"sync"
	"time"
)

// reloadCheckInterval is how often a reloadable file is stat'ed at most.
const reloadCheckInterval = time.Second

// maxReloadableBytes bounds a reloadable file (a certificate, a key, a CA
// bundle, a token): a larger one, or one that is not a regular file, fails
// to load.
const maxReloadableBytes = 1 << 20

// reloadable is a value loaded from files and loaded again when one of
// them changes (a rotated certificate, a new token). It stats the files at
// most once per reloadCheckInterval; when loading fails it keeps the value
// it had, and the error.
type reloadable[T any] struct {
	paths []string
	load  func(data [][]byte) (T, error)
	now   func() time.Time

	mu      sync.Mutex
	value   T
	stamp   []fileStamp
	checked time.Time
	err     error
}

type fileStamp struct {
	size    int64
	modTime time.Time
	file    os.FileInfo
}

func (s fileStamp) same(o fileStamp) bool {
	return s.size == o.size && s.modTime.Equal(o.modTime) && s.file != nil && o.file != nil && os.SameFile(s.file, o.file)
}

// newReloadable loads the files once; an error then is returned. Files
// that are not regular ones (a FIFO, a device) are errors, never waited
// on.
func newReloadable[T any](load func(data [][]byte) (T, error), paths ...string) (*reloadable[T], error) {
	r := &reloadable[T]{paths: paths, load: load, now: time.Now}
	if err := r.reload(); err != nil {
		return nil, err
	}
	r.checked = r.now()
	return r, nil
}

// get returns the current value, reloading it first when a file changed.
func (r *reloadable[T]) get() (T, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := r.now(); now.Sub(r.checked) >= reloadCheckInterval {
		r.checked = now
		if r.changed() {
			r.err = r.reload()
		}
	}
	return r.value, r.err
}

func (r *reloadable[T]) changed() bool {
	for i, p := range r.paths {
		st, err := stamp(p)
		if err != nil || !st.same(r.stamp[i]) {
			return true
		}
	}
	return false
}

func (r *reloadable[T]) reload() error {
	stamps := make([]fileStamp, len(r.paths))
	data := make([][]byte, len(r.paths))
	for i, p := range r.paths {
		st, err := stamp(p)
		if err != nil {
			return err
		}
		if data[i], err = readRegular(p, maxReloadableBytes); err != nil {
			return err
		}
		stamps[i] = st
	}
	v, err := r.load(data)
	if err != nil {
		return err
	}
	r.value, r.stamp = v, stamps
	return nil
}

func stamp(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{size: fi.Size(), modTime: fi.ModTime(), file: fi}, nil
}
