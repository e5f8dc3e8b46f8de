package rules

import (
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/fieldwatch/fieldwatch/internal/fieldpath"
)

// A field path names values inside an object, in the syntax of package
// internal/fieldpath (docs/rules.md has the user documentation). A path is
// compiled once (compilePath) into a list of segments; reading a value is
// then a loop over the segments with no parsing and, for paths without
// [*], no allocation.

// fieldPath is a compiled field path.
type fieldPath struct {
	segs []fieldpath.Segment
	// multi is true when the path has a [*]: its value is the list of
	// every selected value.
	multi bool
}

// compilePath parses a field path.
func compilePath(src string) (*fieldPath, error) {
	segs, err := fieldpath.Parse(src)
	if err != nil {
		return nil, err
	}
	p := &fieldPath{segs: segs}
	for _, s := range segs {
		p.multi = p.multi || s.Kind == fieldpath.All
	}
	return p, nil
}

// String returns the path's canonical text (which compiles to the same
// path).
func (p *fieldPath) String() string { return fieldpath.Format(p.segs) }

// prefix returns the leading field names of p, up to its first list
// selector: the part of objects a projection must keep for p.
func (p *fieldPath) prefix() []string {
	var out []string
	for _, s := range p.segs {
		if s.Kind != fieldpath.Field {
			break
		}
		out = append(out, s.Name)
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
func walk(cur any, present bool, segs []fieldpath.Segment, toks []string, allMatches bool, visit func(v any, present bool, toks []string)) {
	for i := range segs {
		s := &segs[i]
		switch s.Kind {
		case fieldpath.Field:
			var next any
			ok := false
			if present {
				m, isMap := cur.(map[string]any)
				if !isMap {
					return
				}
				next, ok = m[s.Name]
			}
			toks = appendTok(toks, s.Name)
			cur, present = next, ok
		case fieldpath.Index:
			var next any
			ok := false
			if present {
				l, isList := cur.([]any)
				if !isList {
					return
				}
				if s.Index < len(l) {
					next, ok = l[s.Index], true
				}
			}
			if toks != nil {
				toks = append(toks, strconv.Itoa(s.Index))
			}
			cur, present = next, ok
		case fieldpath.Match:
			l, isList := cur.([]any)
			if !present || !isList {
				return
			}
			j := find(s, l, 0)
			if j < 0 {
				return
			}
			if allMatches {
				for ; j >= 0; j = find(s, l, j+1) {
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
		case fieldpath.All:
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
// the [key=value] s selects, or -1.
func find(s *fieldpath.Segment, l []any, from int) int {
	for i := from; i < len(l); i++ {
		item := l[i]
		m, ok := item.(map[string]any)
		if !ok {
			continue
		}
		v, ok := m[s.Name]
		if !ok {
			continue
		}
		if str, isStr := v.(string); isStr {
			if str == s.Value {
				return i
			}
			continue
		}
		if !s.Quoted && scalarText(v) == s.Value {
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
