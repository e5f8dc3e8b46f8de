package directhttp

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

// quickSeeds are responses of many shapes: those quickResponse reads
// and those it leaves to http.ReadResponse.
var quickSeeds = []string{
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n",
	"HTTP/1.1 202 Accepted\r\nDate: Sun, 06 Dec 2026 03:00:00 GMT\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 204 No Content\r\n\r\n",
	"HTTP/1.1 204 No Content\r\nContent-Length: 7\r\n\r\n",
	"HTTP/1.1 200\r\ncontent-length: 3\r\nCONNECTION: keep-alive, Close\r\n\r\nabc",
	"HTTP/1.1 200 OK\r\nContent-Length:  4 \r\nX-Obs: caf\xc3\xa9\r\n\r\nbody",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab",
	"HTTP/1.1 200 OK\r\nContent-Length: 99999999\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\nok",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTrailer: X\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\n\r\nuntil the end",
	"HTTP/1.1 200 OK\r\nX-Folded: a\r\n b\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nBad Name: x\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\nContent-Length: 0\n\n",
	"HTTP/1.1 200 OK\r\nX: a\rb\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found",
	"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1  200 OK\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 0",
	"SMTP ready\r\n\r\n",
}

// FuzzQuickResponse: a response quickResponse reads, http.ReadResponse
// reads too, to the same status, length and connection outcome, and both
// leave the reader at the same byte.
func FuzzQuickResponse(f *testing.F) {
	for _, s := range quickSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(data), 4<<10)
		_, _ = br.Peek(1)
		resp, ok := quickResponse(br)
		if !ok {
			if br.Buffered() != min(len(data), 4<<10) {
				t.Fatalf("%q: not read quickly, yet %d of its bytes read", data, min(len(data), 4<<10)-br.Buffered())
			}
			return
		}
		rest, _ := io.ReadAll(br)
		ref, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(data)), nil)
		if err != nil {
			t.Fatalf("%q: read quickly (%d), http.ReadResponse: %v", data, resp.StatusCode, err)
		}
		if ref.StatusCode != resp.StatusCode || ref.Status != resp.Status || ref.ContentLength != resp.ContentLength {
			t.Fatalf("%q: read quickly as %q %d, length %d; http.ReadResponse %q %d, length %d",
				data, resp.Status, resp.StatusCode, resp.ContentLength, ref.Status, ref.StatusCode, ref.ContentLength)
		}
		if resp.ContentLength > maxDrain {
			if !resp.Close {
				t.Fatalf("%q: a body over maxDrain, the connection kept", data)
			}
			return // its body is not read: the connection goes
		}
		body, bodyErr := io.ReadAll(ref.Body)
		refRest := data[len(data)-refRemaining(t, data, ref, body):]
		switch {
		case bodyErr != nil:
			if !resp.Close {
				t.Fatalf("%q: a short body (%v), the connection kept", data, bodyErr)
			}
		case ref.Close != resp.Close:
			t.Fatalf("%q: Close %v read quickly, %v by http.ReadResponse", data, resp.Close, ref.Close)
		case !bytes.Equal(rest, refRest):
			t.Fatalf("%q: left %q read quickly, %q by http.ReadResponse", data, rest, refRest)
		}
	})
}

// refRemaining returns how many bytes of data follow ref's response: its
// header up to the blank line and its body are data's prefix.
func refRemaining(t *testing.T, data []byte, ref *http.Response, body []byte) int {
	t.Helper()
	end := bytes.Index(data, []byte("\r\n\r\n"))
	if end < 0 {
		t.Fatalf("%q: no end of header", data)
	}
	return len(data) - (end + 4 + len(body))
}

// TestQuickResponseShapes: which seeds the quick path reads, so that a
// change that sends them all to http.ReadResponse (or none) shows.
func TestQuickResponseShapes(t *testing.T) {
	for _, tc := range []struct {
		reply  string
		quick  bool
		code   int
		length int64
		close  bool
	}{
		{quickSeeds[0], true, 200, 2, false},
		{quickSeeds[2], true, 202, 0, false},
		{quickSeeds[3], true, 204, 0, false},
		{quickSeeds[4], true, 204, 0, false},
		{quickSeeds[5], true, 200, 3, true},
		{quickSeeds[6], true, 200, 4, false},
		{quickSeeds[7], true, 200, 5, true}, // short body
		{quickSeeds[8], true, 200, 99999999, true},
		{quickSeeds[9], false, 0, 0, false},  // two lengths
		{quickSeeds[12], false, 0, 0, false}, // chunked
		{quickSeeds[14], false, 0, 0, false}, // no length
		{quickSeeds[15], false, 0, 0, false}, // folded
		{quickSeeds[19], false, 0, 0, false}, // informational first
		{quickSeeds[20], false, 0, 0, false}, // 404
		{quickSeeds[21], false, 0, 0, false}, // HTTP/1.0
	} {
		br := bufio.NewReaderSize(strings.NewReader(tc.reply), 4<<10)
		_, _ = br.Peek(1)
		resp, ok := quickResponse(br)
		if ok != tc.quick {
			t.Errorf("%q: read quickly %v, want %v", tc.reply, ok, tc.quick)
			continue
		}
		if ok && (resp.StatusCode != tc.code || resp.ContentLength != tc.length || resp.Close != tc.close) {
			t.Errorf("%q: %d, length %d, close %v; want %d, %d, %v", tc.reply, resp.StatusCode, resp.ContentLength, resp.Close, tc.code, tc.length, tc.close)
		}
	}
}
