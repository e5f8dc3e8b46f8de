package jsonscan

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"slices"
	"sync"
)

// ObjectHash returns a digest of the content of a Kubernetes object, data
// its JSON, that a write leaves as validating admission saw it: the
// object less apiVersion (a webhook may be sent the object converted to
// another version than the one a watch delivers), metadata.resourceVersion
// and metadata.generation, and the time of each metadata.managedFields
// entry. Two encodings of the same content hash alike, whatever their key
// order, white space or string escapes: the digest is of a canonical form
// (object keys sorted, strings unescaped, each value tagged and
// length-prefixed), with numbers as written (kube-apiserver writes them
// alike on both sides). It is the hex of the first 16 bytes of its
// SHA-256.
//
// It is one pass over data, building no values: the canonical form is
// written as data is read, and only an object whose keys come out of
// order is sorted (BenchmarkObjectHash). Watch events and admission
// reviews carry their objects with sorted keys or in their Go type's field
// order, which is the same on both sides.
func ObjectHash(data []byte) (string, error) {
	h := hashers.Get().(*hasher)
	defer h.release()
	h.data = data
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return "", ErrSyntax
	}
	end, err := h.value(i, pathTop, 0)
	if err != nil {
		return "", err
	}
	if skipSpace(data, end) != len(data) {
		return "", ErrSyntax
	}
	sum := sha256.Sum256(h.out)
	return hex.EncodeToString(sum[:16]), nil
}

// pathKind says where in an object a value is, for the fields ObjectHash
// leaves out.
type pathKind uint8

const (
	pathOther pathKind = iota
	pathTop
	pathMetadata
	pathManagedFields
	pathManagedEntry
)

// child returns where the value of key is in an object at p, and whether
// it is left out.
func (p pathKind) child(key []byte) (pathKind, bool) {
	switch p {
	case pathTop:
		switch string(key) {
		case "apiVersion":
			return pathOther, true
		case "metadata":
			return pathMetadata, false
		}
	case pathMetadata:
		switch string(key) {
		case "resourceVersion", "generation":
			return pathOther, true
		case "managedFields":
			return pathManagedFields, false
		}
	case pathManagedEntry:
		return pathOther, string(key) == "time"
	}
	return pathOther, false
}

// hasher writes the canonical form of an object into out.
type hasher struct {
	data []byte
	out  []byte
	// members are the canonical bytes in out of the members of the
	// objects being written, outermost first, to sort them.
	members []member
	scratch []byte
}

type member struct {
	key        []byte
	start, end int
}

var hashers = sync.Pool{New: func() any { return &hasher{} }}

// maxPooled bounds the buffers a hasher keeps for the next object.
const maxPooled = 1 << 20

func (h *hasher) release() {
	h.data = nil
	if cap(h.out) > maxPooled || cap(h.scratch) > maxPooled {
		return
	}
	h.out, h.members, h.scratch = h.out[:0], h.members[:0], h.scratch[:0]
	hashers.Put(h)
}

// The canonical form's tags.
const (
	tagObject = 'o'
	tagArray  = 'a'
	tagEnd    = 'e'
	tagString = 's'
	tagNumber = 'n'
	tagTrue   = 't'
	tagFalse  = 'f'
	tagNull   = 'z'
)

var errHashDepth = errors.New("json: exceeded max depth")

// value writes the value at i (no white space before it) and returns
// where it ends.
func (h *hasher) value(i int, p pathKind, depth int) (int, error) {
	data := h.data
	if i >= len(data) {
		return 0, ErrSyntax
	}
	if depth > maxDepth {
		return 0, errHashDepth
	}
	switch c := data[i]; {
	case c == '{':
		return h.object(i, p, depth)
	case c == '[':
		return h.array(i, p, depth)
	case c == '"':
		end, err := skipString(data, i)
		if err != nil {
			return 0, err
		}
		s, err := unquoted(data[i:end])
		if err != nil {
			return 0, err
		}
		h.bytes(tagString, s)
		return end, nil
	case c == 't' || c == 'f' || c == 'n':
		end, err := skipValue(data, i)
		if err != nil {
			return 0, err
		}
		switch string(data[i:end]) {
		case "true":
			h.out = append(h.out, tagTrue)
		case "false":
			h.out = append(h.out, tagFalse)
		case "null":
			h.out = append(h.out, tagNull)
		default:
			return 0, ErrSyntax
		}
		return end, nil
	case c == '-' || '0' <= c && c <= '9':
		end, err := skipValue(data, i)
		if err != nil {
			return 0, err
		}
		h.bytes(tagNumber, data[i:end])
		return end, nil
	}
	return 0, ErrSyntax
}

// bytes writes a tagged, length-prefixed value.
func (h *hasher) bytes(tag byte, b []byte) {
	h.out = append(h.out, tag)
	h.out = binary.AppendUvarint(h.out, uint64(len(b)))
	h.out = append(h.out, b...)
}

func (h *hasher) object(i int, p pathKind, depth int) (int, error) {
	data := h.data
	h.out = append(h.out, tagObject)
	base := len(h.members)
	defer func() { h.members = h.members[:base] }()
	sorted := true
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		h.out = append(h.out, tagEnd)
		return i + 1, nil
	}
	for {
		if i >= len(data) || data[i] != '"' {
			return 0, ErrSyntax
		}
		kend, err := skipString(data, i)
		if err != nil {
			return 0, err
		}
		key, err := unquoted(data[i:kend])
		if err != nil {
			return 0, err
		}
		i = skipSpace(data, kend)
		if i >= len(data) || data[i] != ':' {
			return 0, ErrSyntax
		}
		i = skipSpace(data, i+1)
		cp, skip := p.child(key)
		var vend int
		if skip {
			vend, err = skipValue(data, i)
		} else {
			start := len(h.out)
			h.bytes(tagString, key)
			vend, err = h.value(i, cp, depth+1)
			if n := len(h.members); n > base && bytes.Compare(h.members[n-1].key, key) >= 0 {
				sorted = false
			}
			h.members = append(h.members, member{key: key, start: start, end: len(h.out)})
		}
		if err != nil {
			return 0, err
		}
		i = skipSpace(data, vend)
		if i >= len(data) {
			return 0, ErrSyntax
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
			continue
		case '}':
		default:
			return 0, ErrSyntax
		}
		break
	}
	if !sorted {
		h.sortMembers(h.members[base:])
	}
	h.out = append(h.out, tagEnd)
	return i + 1, nil
}

// sortMembers puts the members of one object, written one after the other
// in out, in the order of their keys (a repeated key's values in their
// order).
func (h *hasher) sortMembers(ms []member) {
	from := ms[0].start
	slices.SortStableFunc(ms, func(a, b member) int { return bytes.Compare(a.key, b.key) })
	h.scratch = h.scratch[:0]
	for _, m := range ms {
		h.scratch = append(h.scratch, h.out[m.start:m.end]...)
	}
	copy(h.out[from:], h.scratch)
}

func (h *hasher) array(i int, p pathKind, depth int) (int, error) {
	data := h.data
	h.out = append(h.out, tagArray)
	elem := pathOther
	if p == pathManagedFields {
		elem = pathManagedEntry
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == ']' {
		h.out = append(h.out, tagEnd)
		return i + 1, nil
	}
	for {
		end, err := h.value(i, elem, depth+1)
		if err != nil {
			return 0, err
		}
		i = skipSpace(data, end)
		if i >= len(data) {
			return 0, ErrSyntax
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case ']':
			h.out = append(h.out, tagEnd)
			return i + 1, nil
		default:
			return 0, ErrSyntax
		}
	}
}

// unquoted returns the bytes of the JSON string s (quotes included):
// s's own when it has no escapes, otherwise decoded.
func unquoted(s []byte) ([]byte, error) {
	inner := s[1 : len(s)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return inner, nil
	}
	k, err := Key(s)
	if err != nil {
		return nil, err
	}
	return []byte(k), nil
}
