package rules

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// A field path names values inside an object. Syntax (doc.go has the user
// documentation):
//
//	spec.size                         map keys separated by dots
//	metadata.annotations["a.b/c"]     a quoted key: any characters ('single' quotes work too)
//	spec.containers[0].image          list item by index
//	spec.containers[*].image          every item of a list (or every value of a map, by key order)
//	spec.containers[name=web].image   the first list item whose key field equals the value
//	spec.ports[port=80]               unquoted values also match numbers and booleans by their text
//	spec.ports[name="80"]             quoted values match strings only
//
// A path is compiled once (compilePath) into a list of segments; reading a
// value is then a loop over the segments with no parsing and, for paths
// without [*], no allocation.

// fieldPath is a compiled field path.
type fieldPath struct {
	src  string
	segs []segment
	// multi is true when the path has a [*]: its value is the list of
	// every selected value.
	multi bool
}

type segKind uint8

const (
	segField segKind = iota // .name or ["name"]
	segIndex                // [n]
	segAll                  // [*]
	segMatch                // [key=value]
)

type segment struct {
	kind  segKind
	name  string // field name, or the key of [key=value]
	index int    // [n]
	value string // value of [key=value]
	// quoted is true when the value of [key=value] was quoted: it then
	// matches strings only.
	quoted bool
}

// maxPathLen bounds the length of a path's source text.
const maxPathLen = 1024

// compilePath parses a field path.
func compilePath(src string) (*fieldPath, error) {
	if src == "" {
		return nil, errors.New("empty path")
	}
	if len(src) > maxPathLen {
		return nil, fmt.Errorf("path longer than %d characters", maxPathLen)
	}
	if src[0] == '.' {
		return nil, fmt.Errorf("a path starts with a field name, not %q (write %q)", ".", strings.TrimLeft(src, "."))
	}
	p := &fieldPath{src: src}
	i := 0
	for i < len(src) {
		switch {
		case src[i] == '[':
			seg, n, err := parseBracket(src, i)
			if err != nil {
				return nil, err
			}
			if len(p.segs) == 0 && seg.kind != segField {
				return nil, fmt.Errorf("a path starts with a field name, not %q", src[i:i+n])
			}
			p.segs = append(p.segs, seg)
			p.multi = p.multi || seg.kind == segAll
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
			p.segs = append(p.segs, segment{kind: segField, name: src[i:j]})
			i = j
		default:
			return nil, fmt.Errorf("unexpected %q at offset %d (a field name follows a dot; quote keys with special characters: [%q])", src[i], i, "a.b")
		}
	}
	return p, nil
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
func parseBracket(src string, i int) (segment, int, error) {
	start := i
	i++ // '['
	if i >= len(src) {
		return segment{}, 0, fmt.Errorf("unterminated %q at offset %d", "[", start)
	}
	var seg segment
	switch c := src[i]; {
	case c == '"' || c == '\'':
		s, n, err := parseQuoted(src, i)
		if err != nil {
			return segment{}, 0, err
		}
		i += n
		if i < len(src) && src[i] == '=' {
			seg.kind = segMatch
			seg.name = s
			break
		}
		seg = segment{kind: segField, name: s}
	case c == '*':
		seg.kind = segAll
		i++
	case c >= '0' && c <= '9':
		j := i
		for j < len(src) && src[j] >= '0' && src[j] <= '9' {
			j++
		}
		n, err := strconv.Atoi(src[i:j])
		if err != nil || n > math.MaxInt32 {
			return segment{}, 0, fmt.Errorf("list index %q out of range", src[i:j])
		}
		seg = segment{kind: segIndex, index: n}
		i = j
	case c == '-':
		return segment{}, 0, fmt.Errorf("negative list index at offset %d", i)
	default:
		j := i
		for j < len(src) && isNameByte(src[j]) {
			j++
		}
		if j == i || j >= len(src) || src[j] != '=' {
			return segment{}, 0, fmt.Errorf("bad selector at offset %d: use [n], [*], [key=value] or [\"key\"]", start)
		}
		seg = segment{kind: segMatch, name: src[i:j]}
		i = j
	}
	if seg.kind == segMatch {
		i++ // '='
		if i >= len(src) {
			return segment{}, 0, fmt.Errorf("unterminated %q at offset %d", "[", start)
		}
		if c := src[i]; c == '"' || c == '\'' {
			s, n, err := parseQuoted(src, i)
			if err != nil {
				return segment{}, 0, err
			}
			seg.value, seg.quoted = s, true
			i += n
		} else {
			j := i
			for j < len(src) && src[j] != ']' && src[j] != '[' {
				j++
			}
			if j == i {
				return segment{}, 0, fmt.Errorf("empty value in selector at offset %d (write [%s=\"\"] for the empty string)", start, seg.name)
			}
			seg.value = src[i:j]
			i = j
		}
	}
	if i >= len(src) || src[i] != ']' {
		return segment{}, 0, fmt.Errorf("unterminated %q at offset %d", "[", start)
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

// String returns the path's canonical text (which compiles to the same
// path).
func (p *fieldPath) String() string {
	var b strings.Builder
	for i, s := range p.segs {
		switch s.kind {
		case segField:
			if isPlainName(s.name) {
				if i > 0 {
					b.WriteByte('.')
				}
				b.WriteString(s.name)
			} else {
				b.WriteString("[" + strconv.Quote(s.name) + "]")
			}
		case segIndex:
			b.WriteString("[" + strconv.Itoa(s.index) + "]")
		case segAll:
			b.WriteString("[*]")
		case segMatch:
			b.WriteByte('[')
			if isPlainName(s.name) && !strings.ContainsAny(s.name[:1], "*-0123456789") {
				b.WriteString(s.name)
			} else {
				b.WriteString(strconv.Quote(s.name))
			}
			b.WriteByte('=')
			if s.quoted || !isPlainValue(s.value) {
				b.WriteString(strconv.Quote(s.value))
			} else {
				b.WriteString(s.value)
			}
			b.WriteByte(']')
		}
	}
	return b.String()
}

func isPlainName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isNameByte(s[i]) {
			return false
		}
	}
	return true
}

func isPlainValue(s string) bool {
	if s == "" || s[0] == '"' || s[0] == '\'' {
		return false
	}
	return !strings.ContainsAny(s, "[]")
}

// prefix returns the leading field names of p, up to its first list
// selector: the part of objects a projection must keep for p.
func (p *fieldPath) prefix() []string {
	var out []string
	for _, s := range p.segs {
		if s.kind != segField {
			break
		}
		out = append(out, s.name)
	}
	return out
}

// value returns what p selects in obj: for a path without [*] the value
// and whether it is present; with [*] the list of every selected value,
// present when it is not empty.
func (p *fieldPath) value(obj map[string]any) (v any, ok bool) {
	if obj == nil {
		return nil, false
	}
	if p.multi {
		var vals []any
		walk(obj, true, p.segs, nil, false, func(x any, present bool, _ []string) {
			if present {
				vals = append(vals, x)
			}
		})
		return vals, len(vals) > 0
	}
	walk(obj, true, p.segs, nil, false, func(x any, present bool, _ []string) { v, ok = x, present })
	return v, ok
}

// locations calls fn with the JSON Pointer tokens of every place p selects
// in obj. Where obj lacks a map key or list index that the path names, the
// pointer is still formed from the path's remaining field names and
// indexes (so an added or removed field has a location); a [*] or
// [key=value] that selects nothing ends the path there.
func (p *fieldPath) locations(obj map[string]any, fn func(toks []string)) {
	walk(obj, obj != nil, p.segs, make([]string, 0, len(p.segs)), false, func(_ any, _ bool, toks []string) { fn(toks) })
}

// everyLocation is locations with every list item a [key=value] selects,
// not only the first: what redact paths select (a value redacted in one
// item must not show in another with the same key).
func (p *fieldPath) everyLocation(obj map[string]any, fn func(toks []string)) {
	walk(obj, obj != nil, p.segs, make([]string, 0, len(p.segs)), true, func(_ any, _ bool, toks []string) { fn(toks) })
}

// walk is the one walker over a path's segments: it visits the places
// segs select in cur (which is there when present is set), calling visit
// with each place's value, whether it is there and, when toks is not nil,
// its JSON Pointer tokens (a copy visit may keep).
//
// Where cur lacks a map key or list index that a segment names, the walk
// goes on with present false, so that the place still has tokens; a [*]
// or [key=value] selects nothing in what is not there, and a value of the
// wrong kind for a segment (a string where a map key is named) ends the
// walk there. [*] visits list items in order and map values in key order;
// [key=value] visits the first item it selects, or every one when
// allMatches is set.
func walk(cur any, present bool, segs []segment, toks []string, allMatches bool, visit func(v any, present bool, toks []string)) {
	for i := range segs {
		s := &segs[i]
		switch s.kind {
		case segField:
			var next any
			ok := false
			if present {
				m, isMap := cur.(map[string]any)
				if !isMap {
					return
				}
				next, ok = m[s.name]
			}
			toks = appendTok(toks, s.name)
			cur, present = next, ok
		case segIndex:
			var next any
			ok := false
			if present {
				l, isList := cur.([]any)
				if !isList {
					return
				}
				if s.index < len(l) {
					next, ok = l[s.index], true
				}
			}
			if toks != nil {
				toks = append(toks, strconv.Itoa(s.index))
			}
			cur, present = next, ok
		case segMatch:
			l, isList := cur.([]any)
			if !present || !isList {
				return
			}
			j := s.find(l, 0)
			if j < 0 {
				return
			}
			if allMatches {
				for ; j >= 0; j = s.find(l, j+1) {
					var next []string
					if toks != nil {
						next = append(toks, strconv.Itoa(j))
					}
					walk(l[j], true, segs[i+1:], next, true, visit)
				}
				return
			}
			if toks != nil {
				toks = append(toks, strconv.Itoa(j))
			}
			cur = l[j]
		case segAll:
			if !present {
				return
			}
			switch c := cur.(type) {
			case []any:
				for j, item := range c {
					var next []string
					if toks != nil {
						next = append(toks, strconv.Itoa(j))
					}
					walk(item, true, segs[i+1:], next, allMatches, visit)
				}
			case map[string]any:
				for _, k := range slices.Sorted(maps.Keys(c)) {
					walk(c[k], true, segs[i+1:], appendTok(toks, k), allMatches, visit)
				}
			}
			return
		}
	}
	// A copy (nil stays nil): visit may keep it, while toks is reused
	// by the caller and stays on its stack.
	visit(cur, present, slices.Clone(toks))
}

// appendTok appends tok to toks unless tokens are not tracked (nil).
func appendTok(toks []string, tok string) []string {
	if toks == nil {
		return nil
	}
	return append(toks, tok)
}

// find returns the index of the first item of l from index from on that
// [key=value] selects, or -1.
func (s *segment) find(l []any, from int) int {
	for i := from; i < len(l); i++ {
		item := l[i]
		m, ok := item.(map[string]any)
		if !ok {
			continue
		}
		v, ok := m[s.name]
		if !ok {
			continue
		}
		if str, isStr := v.(string); isStr {
			if str == s.value {
				return i
			}
			continue
		}
		if !s.quoted && scalarText(v) == s.value {
			return i
		}
	}
	return -1
}

// scalarText renders a number or bool as a selector value compares it:
// 80, 1.5, true. Other values render as "".
func scalarText(v any) string {
	if b, ok := v.(bool); ok {
		return strconv.FormatBool(b)
	}
	if n, ok := toNumber(v); ok {
		if n.isInt {
			return strconv.FormatInt(n.i, 10)
		}
		if n.f == math.Trunc(n.f) && math.Abs(n.f) < 1e15 {
			return strconv.FormatInt(int64(n.f), 10)
		}
		return strconv.FormatFloat(n.f, 'g', -1, 64)
	}
	return ""
}

// pointer renders JSON Pointer tokens (RFC 6901): "/spec/size".
func pointer(toks []string) string {
	n := 0
	for _, t := range toks {
		n += len(t) + 1
	}
	var b strings.Builder
	b.Grow(n)
	for _, t := range toks {
		b.WriteByte('/')
		if strings.ContainsAny(t, "~/") {
			t = strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1")
		}
		b.WriteString(t)
	}
	return b.String()
}

// hasPrefix reports whether toks starts with prefix.
func hasPrefix(toks, prefix []string) bool {
	if len(prefix) > len(toks) {
		return false
	}
	for i, t := range prefix {
		if toks[i] != t {
			return false
		}
	}
	return true
}
