package directhttp

import (
	"errors"
	"net/textproto"
	"slices"
)

// ErrInvalidHeader is the error of a POST refused before it was sent: a
// header value, or the Host, that net/http would refuse too. Sending it
// again cannot help.
var ErrInvalidHeader = errors.New("invalid header")

// Header is a request's headers in the order they were set: no map to
// make, fill and range over for each request. Keys are canonical
// (textproto.CanonicalMIMEHeaderKey), as http.Header's. Host,
// Content-Length, Transfer-Encoding and Trailer are the client's own and
// are not sent from Header, as net/http's request writer leaves them out
// of a request's Header.
type Header []headerLine

type headerLine struct{ key, value string }

// Set replaces the values of key with value.
func (h *Header) Set(key, value string) {
	key = textproto.CanonicalMIMEHeaderKey(key)
	*h = slices.DeleteFunc(*h, func(l headerLine) bool { return l.key == key })
	*h = append(*h, headerLine{key, value})
}

// Add adds value to the values of key.
func (h *Header) Add(key, value string) {
	*h = append(*h, headerLine{textproto.CanonicalMIMEHeaderKey(key), value})
}

// ownHeaders are the headers the client writes itself.
var ownHeaders = map[string]bool{"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Trailer": true}
