package watchstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
)

// chunked is a watch body that returns its bytes in reads of at most n.
type chunked struct {
	data   []byte
	n      int
	end    error
	closed bool
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, c.end
	}
	k := copy(p[:min(len(p), c.n)], c.data)
	c.data = c.data[k:]
	return k, nil
}

func (c *chunked) Close() error { c.closed = true; return nil }

type readEvent struct {
	typ watch.EventType
	obj string
}

func readAll(s *Stream) ([]readEvent, error) {
	var out []readEvent
	for {
		typ, obj, err := s.Next(context.Background())
		if err != nil {
			return out, err
		}
		out = append(out, readEvent{typ, string(obj.(RawObject))})
	}
}

func TestEventStream(t *testing.T) {
	big := fmt.Sprintf(`{"metadata":{"name":"big"},"data":{"x":%q}}`, strings.Repeat("a\"}", 30000))
	objects := []string{
		`{"metadata":{"name":"one","resourceVersion":"1"}}`,
		big,
		`{"metadata":{"resourceVersion":"9","annotations":{"k8s.io/initial-events-end":"true"}}}`,
		fmt.Sprintf(`{"metadata":{"name":"mid"},"data":{"x":%q}}`, strings.Repeat("b", 600)),
	}
	types := []watch.EventType{watch.Added, watch.Modified, watch.Bookmark, watch.Deleted}
	var stream bytes.Buffer
	for i, o := range objects {
		fmt.Fprintf(&stream, "{\"type\":%q,\"object\":%s}\n", types[i], o)
	}
	for _, n := range []int{1, 5, 100, idleRead, 4096, 1 << 20} {
		body := &chunked{data: bytes.Clone(stream.Bytes()), n: n, end: io.EOF}
		s := NewStream(body)
		got, err := readAll(s)
		if !errors.Is(err, io.EOF) {
			t.Fatalf("reads of %d: ended with %v, want io.EOF", n, err)
		}
		if len(got) != len(objects) {
			t.Fatalf("reads of %d: %d events, want %d", n, len(got), len(objects))
		}
		for i, e := range got {
			if e.typ != types[i] || e.obj != objects[i] {
				t.Errorf("reads of %d: event %d is %s %.60q, want %s %.60q", n, i, e.typ, e.obj, types[i], objects[i])
			}
		}
		if s.grown {
			t.Errorf("reads of %d: a drained stream holds a buffer of %d bytes", n, cap(s.buf))
		}
		s.Close()
		if !body.closed {
			t.Errorf("reads of %d: body not closed", n)
		}
	}
}

// A stream waiting for its next event holds no buffer: the one an event
// larger than idle took is given back once its event is handed on, the
// newline after it included.
func TestEventStreamIdleHoldsNoBuffer(t *testing.T) {
	event := fmt.Sprintf(`{"type":"ADDED","object":{"data":%q}}`+"\n", strings.Repeat("z", 5000))
	s := NewStream(&chunked{data: []byte(event), n: 1000, end: io.EOF})
	if _, _, err := s.Next(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !s.grown {
		t.Fatal("a 5 KB event was read without a buffer of its own")
	}
	if _, _, err := s.Next(context.Background()); !errors.Is(err, io.EOF) {
		t.Fatalf("then %v, want io.EOF", err)
	}
	if s.grown {
		t.Error("waiting for the next event, the stream still holds its buffer")
	}
}

func TestEventStreamBadInput(t *testing.T) {
	status := `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}}`
	for _, tc := range []struct {
		name, stream string
		end          error
		check        func(error) bool
	}{
		{"ERROR event", status, io.EOF, apierrors.IsResourceExpired},
		{"cut inside an event", `{"type":"ADDED","object":{"a":`, io.EOF, func(err error) bool { return errors.Is(err, io.ErrUnexpectedEOF) }},
		{"not objects", `["ADDED"]`, io.EOF, func(err error) bool {
			return err != nil && strings.Contains(err.Error(), "not a stream of JSON objects")
		}},
		{"no object", `{"type":"ADDED"}`, io.EOF, func(err error) bool { return err != nil && strings.Contains(err.Error(), "without its object") }},
		{"type not a string", `{"type":7,"object":{}}`, io.EOF, func(err error) bool { return err != nil && strings.Contains(err.Error(), "a watch event") }},
		{"read error", `{"type":"ADDED","obj`, io.ErrClosedPipe, func(err error) bool { return errors.Is(err, io.ErrClosedPipe) }},
	} {
		for _, n := range []int{1, 7, 1 << 10} {
			s := NewStream(&chunked{data: []byte(tc.stream), n: n, end: tc.end})
			_, err := readAll(s)
			if !tc.check(err) {
				t.Errorf("%s, reads of %d: error %v", tc.name, n, err)
			}
		}
	}
}

// FuzzEventStream: whatever the bytes and the reads' size, the stream
// hands on the events json.Decoder finds, then ends with an error, and
// never panics.
func FuzzEventStream(f *testing.F) {
	f.Add([]byte(`{"type":"ADDED","object":{"a":1}}`+"\n"+`{"type":"BOOKMARK","object":{"metadata":{}}}`), 3)
	f.Add([]byte(`{"type":"ERROR","object":{"status":"Failure","code":410,"reason":"Expired"}}`), 1)
	f.Fuzz(func(t *testing.T, data []byte, n int) {
		n = 1 + (n&0xffff)%(len(data)+1)
		got, err := readAll(NewStream(&chunked{data: bytes.Clone(data), n: n, end: io.EOF}))
		if err == nil {
			t.Fatal("the stream ended without an error")
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		for i, e := range got {
			var want map[string]json.RawMessage // keys matched exactly, as the stream reads them
			var typ string
			if err := dec.Decode(&want); err != nil || json.Unmarshal(want["type"], &typ) != nil {
				return // the Framer checks less than json.Decoder: past here they may differ
			}
			if !utf8.ValidString(string(e.typ)) {
				return // json.Decoder replaces what is not UTF-8; the stream hands it on as it came (no type matches it)
			}
			if string(e.typ) != typ || e.obj != string(want["object"]) {
				t.Fatalf("event %d: %s %q, json.Decoder %s %q", i, e.typ, e.obj, typ, want["object"])
			}
		}
	})
}
