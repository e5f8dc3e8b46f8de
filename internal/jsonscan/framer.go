package jsonscan

import (
	"errors"
	"fmt"
)

// Framer finds where each JSON object of a stream of them ends (a watch
// stream: objects one after the other, whitespace between), as the
// stream's bytes come: Next is given the bytes not yet framed, each time
// with more at their end, and resumes where it stopped, so that an object
// that comes in many reads is scanned once.
type Framer struct {
	// pos is how far the current object was scanned (0: not started).
	pos      int
	depth    int
	inString bool
	escaped  bool
}

// ErrNotObject is Next's error for a stream that holds something other
// than JSON objects.
var ErrNotObject = errors.New("not a stream of JSON objects")

// Next returns the length of the first object in b (leading whitespace
// included), or 0 when b does not hold all of it yet; then b is given
// again, with more bytes, until it does. After an object, b is given
// from its end.
func (f *Framer) Next(b []byte) (int, error) {
	i := f.pos
	if i == 0 {
		i = skipSpace(b, 0)
		if i == len(b) {
			return 0, nil // whitespace only: nothing started
		}
		if b[i] != '{' {
			return 0, fmt.Errorf("%w: %q at byte %d", ErrNotObject, b[i], i)
		}
		f.depth, f.inString, f.escaped = 1, false, false
		i++
	}
	for ; i < len(b); i++ {
		c := b[i]
		if f.inString {
			switch {
			case f.escaped:
				f.escaped = false
			case c == '\\':
				f.escaped = true
			case c == '"':
				f.inString = false
			}
			continue
		}
		switch c {
		case '"':
			f.inString = true
		case '{', '[':
			f.depth++
		case '}', ']':
			if f.depth--; f.depth == 0 {
				f.pos = 0
				return i + 1, nil
			}
		}
	}
	f.pos = i
	return 0, nil
}

// Reset forgets the object under way (a new stream).
func (f *Framer) Reset() { *f = Framer{} }
