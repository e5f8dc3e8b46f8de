package jsonscan

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
)

// frames splits stream into its objects with a Framer given the bytes in
// reads of size n, as a watch stream's reader does.
func frames(t *testing.T, stream string, n int) ([]string, error) {
	t.Helper()
	var out []string
	var f Framer
	var pending []byte
	for i := 0; i < len(stream) || len(pending) > 0; {
		end, err := f.Next(pending)
		if err != nil {
			return out, err
		}
		if end > 0 {
			out = append(out, strings.TrimSpace(string(pending[:end])))
			pending = pending[end:]
			continue
		}
		if i >= len(stream) {
			if len(bytes.TrimSpace(pending)) > 0 {
				return out, io.ErrUnexpectedEOF
			}
			break
		}
		j := min(i+n, len(stream))
		pending = append(pending, stream[i:j]...)
		i = j
	}
	return out, nil
}

// decoderFrames is what json.Decoder finds in stream.
func decoderFrames(stream string) ([]string, error) {
	dec := json.NewDecoder(strings.NewReader(stream))
	var out []string
	for {
		var m json.RawMessage
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, err
		}
		out = append(out, string(m))
	}
}

func TestFramer(t *testing.T) {
	stream := `{"type":"ADDED","object":{"a":"}","b":["{",{"c":"\"}"}],"d":"\\"}}` + "\n" +
		`  {"type":"BOOKMARK","object":{}}` + "\r\n\t" + `{}` + "\n\n"
	want, err := decoderFrames(stream)
	if err != nil || len(want) != 3 {
		t.Fatalf("json.Decoder: %d objects, %v", len(want), err)
	}
	for _, n := range []int{1, 2, 3, 7, 64, len(stream)} {
		got, err := frames(t, stream, n)
		if err != nil {
			t.Fatalf("reads of %d: %v", n, err)
		}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("reads of %d: framed\n%q\nwant\n%q", n, got, want)
		}
	}
}

func TestFramerBadInput(t *testing.T) {
	for _, tc := range []struct {
		stream string
		want   error
	}{
		{`[1,2]`, ErrNotObject},
		{`"a string"`, ErrNotObject},
		{`{"a":1} 7`, ErrNotObject},
		{`{"a":{"b":1}`, io.ErrUnexpectedEOF},
		{`{"a":"}`, io.ErrUnexpectedEOF},
	} {
		for _, n := range []int{1, 4, len(tc.stream)} {
			if _, err := frames(t, tc.stream, n); !errors.Is(err, tc.want) {
				t.Errorf("%q in reads of %d: error %v, want %v", tc.stream, n, err, tc.want)
			}
		}
	}
}

// FuzzFramer: on a stream json.Decoder reads as objects, the Framer
// finds the same objects whatever the reads' size.
func FuzzFramer(f *testing.F) {
	f.Add(`{"a":1}{"b":"}\""}`, 3)
	f.Add(`{"type":"MODIFIED","object":{"x":[1,{"y":"\\"}]}}`+"\n", 1)
	f.Fuzz(func(t *testing.T, stream string, n int) {
		want, err := decoderFrames(stream)
		if err != nil || len(want) == 0 {
			return
		}
		for _, w := range want {
			if !strings.HasPrefix(w, "{") {
				return // a stream of other values: not what the Framer reads
			}
		}
		n = 1 + (n&0xffff)%(len(stream)+1)
		got, err := frames(t, stream, n)
		if err != nil {
			t.Fatalf("reads of %d: %v", n, err)
		}
		var compact []string
		for _, g := range got {
			var b bytes.Buffer
			if err := json.Compact(&b, []byte(g)); err != nil {
				t.Fatalf("framed %q: %v", g, err)
			}
			compact = append(compact, b.String())
		}
		var wantCompact []string
		for _, w := range want {
			var b bytes.Buffer
			_ = json.Compact(&b, []byte(w))
			wantCompact = append(wantCompact, b.String())
		}
		if strings.Join(compact, "\x00") != strings.Join(wantCompact, "\x00") {
			t.Fatalf("reads of %d: framed %q, want %q", n, compact, wantCompact)
		}
	})
}
