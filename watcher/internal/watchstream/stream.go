package watchstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/fieldwatch/fieldwatch/internal/jsonscan"
)

// Source is an open watch: Next returns its events one by one, with
// io.EOF once it ended (or ctx ended), and the API error of an ERROR
// event. Close releases it; a Source is read by one goroutine.
type Source interface {
	Next(ctx context.Context) (watch.EventType, any, error)
	Close()
}

// RawObject is an object as a watch stream carries it, JSON not decoded
// yet: its reader decodes of it what it keeps (DecodeProjected).
type RawObject []byte

// Stream is a watch's response body read as the apiserver writes it (JSON
// events one after the other), framed with jsonscan, each event's object
// handed on as a RawObject. A watch that waits for its next event holds
// a small fixed buffer, not one the size of its largest event (as a
// json.Decoder would keep); an event larger than it is read into a
// buffer of its own, twice what it holds at most, dropped once its events
// are handed on. (Not a pool's: at a start thousands of watches wait,
// each within its initial events, and a pool's buffers outlive the
// start.)
type Stream struct {
	body  io.ReadCloser
	frame jsonscan.Framer
	// buf[off:] is what was read and not handed on: in idle, or in a
	// buffer of its own (grown).
	buf   []byte
	off   int
	grown bool
	// err is the error of a read that returned bytes too, for when
	// they are handed on.
	err  error
	idle [idleRead]byte
}

var _ Source = &Stream{}

const (
	// idleRead is what a watch waiting for an event reads into: a
	// bookmark, a deletion or a small object's event fits.
	idleRead = 512
	// maxEvent bounds a watch event (the apiserver's objects are at most
	// a few MiB): a stream that sends a larger one is read no further.
	maxEvent = 128 << 20
)

// NewStream returns the stream of a watch's response body, which it
// closes on Close.
func NewStream(body io.ReadCloser) *Stream { return &Stream{body: body} }

// Close closes the body and drops the buffer.
func (s *Stream) Close() {
	_ = s.body.Close()
	s.drop()
}

// Next returns the next event, its object a RawObject of its own (not
// the stream's buffer); it blocks in the body's read while none is
// buffered (ctx is not consulted: closing the body ends the read).
func (s *Stream) Next(context.Context) (watch.EventType, any, error) {
	for {
		if s.off < len(s.buf) {
			n, err := s.frame.Next(s.buf[s.off:])
			if err != nil {
				return "", nil, err
			}
			if n > 0 {
				event := s.buf[s.off : s.off+n]
				s.off += n
				typ, obj, err := decodeEvent(event)
				if s.off == len(s.buf) {
					s.drop()
				}
				return typ, obj, err
			}
		}
		if err := s.fill(); err != nil {
			return "", nil, err
		}
	}
}

// fill reads more of the stream: into idle when nothing is under way
// (what is left is whitespace between events), else into the buffer's
// free room, taking a buffer, or a larger one, when it has too little.
func (s *Stream) fill() error {
	if s.err != nil {
		return s.endErr()
	}
	if len(bytes.TrimLeft(s.buf[s.off:], " \t\r\n")) == 0 {
		s.drop()
		n, err := s.body.Read(s.idle[:])
		s.buf, s.off, s.err = s.idle[:n], 0, err
		if n == 0 && err != nil {
			return s.endErr()
		}
		return nil
	}
	if s.grown && s.off > 0 {
		s.buf = s.buf[:copy(s.buf, s.buf[s.off:])]
		s.off = 0
	}
	if rest := len(s.buf) - s.off; !s.grown || cap(s.buf)-len(s.buf) < idleRead {
		if rest > maxEvent {
			return fmt.Errorf("a watch event of more than %d MiB", maxEvent>>20)
		}
		b := append(make([]byte, 0, 2*(rest+idleRead)), s.buf[s.off:]...)
		s.buf, s.off, s.grown = b, 0, true
	}
	n, err := s.body.Read(s.buf[len(s.buf):cap(s.buf)])
	s.buf, s.err = s.buf[:len(s.buf)+n], err
	if n == 0 && err != nil {
		return s.endErr()
	}
	return nil
}

// endErr is the error that ends the stream: io.ErrUnexpectedEOF when it
// ended inside an event.
func (s *Stream) endErr() error {
	if errors.Is(s.err, io.EOF) && len(bytes.TrimSpace(s.buf[s.off:])) > 0 {
		return io.ErrUnexpectedEOF
	}
	return s.err
}

// drop lets the buffer go (its content was handed on).
func (s *Stream) drop() { s.buf, s.off, s.grown = nil, 0, false }

// decodeEvent returns the type of a watch event and its object, a copy
// (the event's bytes are the stream's buffer); an ERROR event's Status as
// its API error.
func decodeEvent(event []byte) (watch.EventType, any, error) {
	var typ string
	var obj []byte
	err := jsonscan.EachKey(event, func(key string, value []byte) error {
		switch key {
		case "type":
			if len(value) < 2 || value[0] != '"' {
				return jsonscan.ErrSyntax
			}
			t, err := jsonscan.Key(value)
			typ = t
			return err
		case "object":
			obj = value
		}
		return nil
	})
	switch {
	case err != nil:
		return "", nil, fmt.Errorf("a watch event: %w", err)
	case obj == nil:
		return "", nil, fmt.Errorf("a watch event of type %q without its object", typ)
	case typ == string(watch.Error):
		return "", nil, statusError(obj)
	}
	return watch.EventType(typ), RawObject(bytes.Clone(obj)), nil
}

// statusError turns the Status of an ERROR event into its API error.
func statusError(raw json.RawMessage) error {
	var st metav1.Status
	if err := json.Unmarshal(raw, &st); err != nil || st.Status == "" {
		return fmt.Errorf("a watch error event: %s", raw)
	}
	return &apierrors.StatusError{ErrStatus: st}
}

// FromWatch returns client-go's watch wi as a Source: its objects are
// *unstructured.Unstructured, decoded by client-go in a goroutine of its
// own. Close stops wi.
func FromWatch(wi watch.Interface) Source { return watchSource{wi} }

type watchSource struct{ wi watch.Interface }

func (s watchSource) Close() { s.wi.Stop() }

func (s watchSource) Next(ctx context.Context) (watch.EventType, any, error) {
	select {
	case <-ctx.Done():
		return "", nil, io.EOF
	case e, ok := <-s.wi.ResultChan():
		switch {
		case !ok:
			return "", nil, io.EOF
		case e.Type == watch.Error:
			return "", nil, apierrors.FromObject(e.Object)
		}
		obj, ok := e.Object.(*unstructured.Unstructured)
		if !ok {
			return "", nil, fmt.Errorf("a watch event of type %T", e.Object)
		}
		return e.Type, obj, nil
	}
}

// Bookmark returns the resourceVersion of a BOOKMARK event's object (a
// RawObject or an *unstructured.Unstructured, as a Source hands it on),
// and whether it ends a watch-list's initial events.
func Bookmark(obj any) (rv string, initialEnd bool, err error) {
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		return o.GetResourceVersion(), o.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true", nil
	case RawObject:
		var b struct {
			Metadata struct {
				ResourceVersion string            `json:"resourceVersion"`
				Annotations     map[string]string `json:"annotations"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(o, &b); err != nil {
			return "", false, err
		}
		return b.Metadata.ResourceVersion, b.Metadata.Annotations[metav1.InitialEventsAnnotationKey] == "true", nil
	}
	return "", false, fmt.Errorf("unexpected object type %T", obj)
}
