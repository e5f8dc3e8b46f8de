package fieldpath

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Kind is what a segment of a path selects.
type Kind uint8

const (
	// Field is a map key: .name or ["name"].
	Field Kind = iota
	// Index is a list item by index: [n].
	Index
	// All is every item of a list or every value of a map: [*].
	All
	// Match is the list items whose key field equals a value:
	// [key=value].
	Match
)

// Segment is one step of a path.
type Segment struct {
	Kind Kind
	// Name is the map key of a Field, or the key field of a Match.
	Name string
	// Index is the list index of an Index.
	Index int
	// Value is the value of a Match.
	Value string
	// Quoted is true when the value of a Match was quoted: it then
	// matches strings only.
	Quoted bool
}

// MaxLen bounds the length of a path's text.
const MaxLen = 1024

// Parse parses a path into its segments. A path starts with a field name.
func Parse(src string) ([]Segment, error) {
	if src == "" {
		return nil, errors.New("empty path")
	}
	if len(src) > MaxLen {
		return nil, fmt.Errorf("path longer than %d characters", MaxLen)
	}
	if src[0] == '.' {
		return nil, fmt.Errorf("a path starts with a field name, not %q (write %q)", ".", strings.TrimLeft(src, "."))
	}
	var segs []Segment
	i := 0
	for i < len(src) {
		switch {
		case src[i] == '[':
			seg, n, err := parseBracket(src, i)
			if err != nil {
				return nil, err
			}
			if len(segs) == 0 && seg.Kind != Field {
				return nil, fmt.Errorf("a path starts with a field name, not %q", src[i:i+n])
			}
			segs = append(segs, seg)
			i += n
		case i > 0 && src[i] == '.':
			i++
			if i == len(src) {
				return nil, fmt.Errorf("path ends with %q", ".")
			}
			if !isNameByte(src[i]) {
				return nil, fmt.Errorf("expected a field name at offset %d, found %q", i, src[i])
			}
		case isNameByte(src[i]) && (i == 0 || src[i-1] == '.'):
			j := i
			for j < len(src) && isNameByte(src[j]) {
				j++
			}
			segs = append(segs, Segment{Kind: Field, Name: src[i:j]})
			i = j
		default:
			return nil, fmt.Errorf("unexpected %q at offset %d (a field name follows a dot; quote keys with special characters: [%q])", src[i], i, "a.b")
		}
	}
	return segs, nil
}

// isNameByte reports whether c may appear in an unquoted field name.
func isNameByte(c byte) bool {
	switch c {
	case '.', '[', ']', '"', '\'', '=', ' ', '\t', '\n', '\r':
		return false
	}
	return c >= 0x20 && c != 0x7f
}

// parseBracket parses the bracket at src[i] and returns its segment and
// length.
func parseBracket(src string, i int) (Segment, int, error) {
	start := i
	i++ // '['
	if i >= len(src) {
		return Segment{}, 0, fmt.Errorf("unterminated %q at offset %d", "[", start)
	}
	var seg Segment
	switch c := src[i]; {
	case c == '"' || c == '\'':
		s, n, err := parseQuoted(src, i)
		if err != nil {
			return Segment{}, 0, err
		}
		i += n
		if i < len(src) && src[i] == '=' {
			seg.Kind = Match
			seg.Name = s
			break
		}
		seg = Segment{Kind: Field, Name: s}
	case c == '*':
		seg.Kind = All
		i++
	case c >= '0' && c <= '9':
		j := i
		for j < len(src) && src[j] >= '0' && src[j] <= '9' {
			j++
		}
		n, err := strconv.Atoi(src[i:j])
		if err != nil || n > math.MaxInt32 {
			return Segment{}, 0, fmt.Errorf("list index %q out of range", src[i:j])
		}
		seg = Segment{Kind: Index, Index: n}
		i = j
	case c == '-':
		return Segment{}, 0, fmt.Errorf("negative list index at offset %d", i)
	default:
		j := i
		for j < len(src) && isNameByte(src[j]) {
			j++
		}
		if j == i || j >= len(src) || src[j] != '=' {
			return Segment{}, 0, fmt.Errorf("bad selector at offset %d: use [n], [*], [key=value] or [\"key\"]", start)
		}
		seg = Segment{Kind: Match, Name: src[i:j]}
		i = j
	}
	if seg.Kind == Match {
		i++ // '='
		if i >= len(src) {
			return Segment{}, 0, fmt.Errorf("unterminated %q at offset %d", "[", start)
		}
		if c := src[i]; c == '"' || c == '\'' {
			s, n, err := parseQuoted(src, i)
			if err != nil {
				return Segment{}, 0, err
			}
			seg.Value, seg.Quoted = s, true
			i += n
		} else {
			j := i
			for j < len(src) && src[j] != ']' && src[j] != '[' {
				j++
			}
			if j == i {
				return Segment{}, 0, fmt.Errorf("empty value in selector at offset %d (write [%s=\"\"] for the empty string)", start, seg.Name)
			}
			seg.Value = src[i:j]
			i = j
		}
	}
	if i >= len(src) || src[i] != ']' {
		return Segment{}, 0, fmt.Errorf("unterminated %q at offset %d", "[", start)
	}
	return seg, i + 1 - start, nil
}

// parseQuoted parses a quoted string at src[i]: "double" with Go escapes,
// or 'single' taken literally. It returns the string and the quoted
// length.
func parseQuoted(src string, i int) (string, int, error) {
	q := src[i]
	for j := i + 1; j < len(src); j++ {
		switch src[j] {
		case '\\':
			if q == '"' {
				j++
			}
		case q:
			if q == '\'' {
				return src[i+1 : j], j + 1 - i, nil
			}
			s, err := strconv.Unquote(src[i : j+1])
			if err != nil {
				return "", 0, fmt.Errorf("bad quoted key %s at offset %d", src[i:j+1], i)
			}
			return s, j + 1 - i, nil
		}
	}
	return "", 0, fmt.Errorf("unterminated quote at offset %d", i)
}

// Format returns the canonical text of segs, which parses back to the
// same segments: plain names after dots, other names quoted with Go
// escapes.
func Format(segs []Segment) string {
	var b strings.Builder
	for _, s := range segs {
		switch s.Kind {
		case Field:
			appendChild(&b, s.Name)
		case Index:
			b.WriteString("[" + strconv.Itoa(s.Index) + "]")
		case All:
			b.WriteString("[*]")
		case Match:
			b.WriteByte('[')
			if isPlain(s.Name) && !strings.ContainsAny(s.Name[:1], "*-0123456789") {
				b.WriteString(s.Name)
			} else {
				b.WriteString(strconv.Quote(s.Name))
			}
			b.WriteByte('=')
			if s.Quoted || !isPlainValue(s.Value) {
				b.WriteString(strconv.Quote(s.Value))
			} else {
				b.WriteString(s.Value)
			}
			b.WriteByte(']')
		}
	}
	return b.String()
}

// Child appends a map key to a path: path.name, or path["name"] when the
// name is empty, is *, or has characters a plain name cannot (dots,
// brackets, quotes, =, spaces, control characters). Child("", name) is the
// path of a top-level key.
func Child(path, name string) string {
	var b strings.Builder
	b.Grow(len(path) + len(name) + 4)
	b.WriteString(path)
	appendChild(&b, name)
	return b.String()
}

// Item appends a list index to a path: path[i].
func Item(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// Every appends [*] to a path: every item of the list, or every value of
// the map, at path.
func Every(path string) string { return path + "[*]" }

func appendChild(b *strings.Builder, name string) {
	if !isPlain(name) {
		b.WriteString("[" + strconv.Quote(name) + "]")
		return
	}
	if b.Len() > 0 {
		b.WriteByte('.')
	}
	b.WriteString(name)
}

// isPlain reports whether a map key can be written without quotes. * can
// (spec.* is the key "*"), but reads as [*]: it is quoted.
func isPlain(name string) bool {
	if name == "" || name == "*" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !isNameByte(name[i]) {
			return false
		}
	}
	return true
}

// isPlainValue reports whether the value of a [key=value] can be written
// without quotes (it then also matches numbers and booleans by their
// text).
func isPlainValue(s string) bool {
	if s == "" || s[0] == '"' || s[0] == '\'' {
		return false
	}
	return !strings.ContainsAny(s, "[]")
}
