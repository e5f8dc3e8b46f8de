package directhttp

import (
	"bufio"
	"bytes"
	"net/http"

	"golang.org/x/net/http/httpguts"
)

// quickResponse reads from br, when its header is all buffered, a final
// response of the shape a receiver answers a webhook with: HTTP/1.1, a
// 2xx status, a Content-Length (none needed for 204), no
// Transfer-Encoding or Trailer, headers of one line each. Its body, up to
// maxDrain, is read too: the response has none left (Body
// http.NoBody) and Close says whether its connection can serve another
// request. For any other response it returns false having read nothing,
// and http.ReadResponse reads it. What it accepts, http.ReadResponse
// reads the same way (FuzzQuickResponse); it saves the header map, its
// strings and the body reader of each POST.
func quickResponse(br *bufio.Reader) (*http.Response, bool) {
	buf, _ := br.Peek(br.Buffered())
	end := bytes.Index(buf, crlfcrlf)
	if end < 0 {
		return nil, false
	}
	head := buf[:end+2] // each line with its CRLF
	line, head, _ := bytes.Cut(head, crlf)
	if len(line) < len("HTTP/1.1 200") || string(line[:len("HTTP/1.1 ")]) != "HTTP/1.1 " || line[9] != '2' ||
		!isDigit(line[10]) || !isDigit(line[11]) || (len(line) > 12 && line[12] != ' ') || !validValue(line[12:]) {
		return nil, false
	}
	code := 200 + int(line[10]-'0')*10 + int(line[11]-'0')
	status := string(line[len("HTTP/1.1 "):]) // before Discard, which may reuse buf
	length, hasLength, closing := int64(-1), false, false
	for len(head) > 0 {
		line, head, _ = bytes.Cut(head, crlf)
		name, value, ok := bytes.Cut(line, colon)
		if !ok || len(name) == 0 || !validName(name) || !validValue(value) {
			return nil, false // an obs-fold line starts with a space: not a name
		}
		value = bytes.Trim(value, " \t")
		switch {
		case asciiEqualFold(name, "Content-Length"):
			n, ok := parseLength(value)
			if !ok || hasLength {
				return nil, false
			}
			length, hasLength = n, true
		case asciiEqualFold(name, "Connection"):
			if httpguts.HeaderValuesContainsToken([]string{string(value)}, "close") {
				closing = true
			}
		case asciiEqualFold(name, "Transfer-Encoding"), asciiEqualFold(name, "Trailer"):
			return nil, false
		}
	}
	if code == http.StatusNoContent {
		length = 0
	} else if !hasLength {
		return nil, false // a body up to the connection's end
	}
	resp := &http.Response{
		Status: status, StatusCode: code,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		ContentLength: length, Close: closing, Body: http.NoBody,
	}
	_, _ = br.Discard(end + 4)
	if length > maxDrain {
		resp.Close = true // the connection goes rather than the time to read it
		return resp, true
	}
	if n, err := br.Discard(int(length)); err != nil || int64(n) != length {
		resp.Close = true // delivered all the same; the connection is lost
	}
	return resp, true
}

var (
	crlf     = []byte("\r\n")
	crlfcrlf = []byte("\r\n\r\n")
	colon    = []byte(":")
)

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// parseLength parses a Content-Length: decimal digits only, at most 18
// of them (no overflow).
func parseLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if !isDigit(c) {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// validName reports whether name is a token (RFC 9110), as
// net/textproto requires of a header's name.
func validName(name []byte) bool {
	for _, c := range name {
		if c >= 0x80 || !httpguts.IsTokenRune(rune(c)) {
			return false
		}
	}
	return true
}

// validValue reports whether v holds only what net/textproto accepts in
// a header's value: visible characters, spaces, tabs and obs-text.
func validValue(v []byte) bool {
	for _, c := range v {
		if c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// asciiEqualFold reports whether b is s, ignoring ASCII case.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
