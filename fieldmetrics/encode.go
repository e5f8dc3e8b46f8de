package fieldmetrics

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// The series of one object are kept encoded in one byte slice (an entry
// of the memo, see Scraper): for each family of its resource in order, a
// section
//
//	uvarint length of the rest of the section
//	uvarint n, then n base labels (labelsFromPath of the resource and metric)
//	uvarint m, then m series: uvarint k, k labels, 8 bytes of float64 bits
//
// where a series' labels are in their final order (sorted by name, each
// name once) and each is a uvarint tag x<<2|kind: refName, a name of the
// configuration (x, an index in Set.names) then the value (uvarint
// length, bytes); refLiteral, the name then the value; refBase, the
// section's base label x; refDefault, the family's default label x
// (commonLabels and the resource labels, the same for every object). A
// scrape decodes a series without merging nor sorting; the values are
// copied, so an entry holds no reference into the object it was made of.
const (
	refName = iota
	refLiteral
	refBase
	refDefault
)

// appendLabel appends l with its value: refName or refLiteral.
func appendLabel(b []byte, _ *Set, l *label) []byte {
	if l.name >= 0 {
		b = binary.AppendUvarint(b, uint64(l.name)<<2) // kind refName, 0
	} else {
		b = binary.AppendUvarint(b, refLiteral)
		b = appendString(b, l.literal)
	}
	return appendString(b, l.value)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// reader decodes an entry. Its strings share the entry's bytes, which
// never change once written: they stay valid as long as the entry is
// referenced.
type reader struct {
	b   []byte
	off int
	bad bool
}

func (r *reader) uvarint() int {
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.bad = true
		r.off = len(r.b)
		return 0
	}
	r.off += n
	return int(v)
}

func (r *reader) str() string {
	n := r.uvarint()
	if n > len(r.b)-r.off {
		r.bad = true
		r.off = len(r.b)
		return ""
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	if n == 0 {
		return ""
	}
	return unsafe.String(&s[0], n)
}

func (r *reader) float() float64 {
	if len(r.b)-r.off < 8 {
		r.bad = true
		r.off = len(r.b)
		return 0
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(r.b[r.off:]))
	r.off += 8
	return v
}

// outLabel is a label of a series as exposed.
type outLabel struct {
	Name, Value string
}

// label reads a label written by appendLabel.
func (r *reader) label(s *Set) outLabel {
	return r.ref(s, nil, nil)
}

// ref reads a label of a series, resolving references to base and
// defaults.
func (r *reader) ref(s *Set, base, defaults []outLabel) outLabel {
	tag := r.uvarint()
	x := tag >> 2
	switch tag & 3 {
	case refName:
		if x < len(s.names) {
			return outLabel{Name: s.names[x], Value: r.str()}
		}
	case refLiteral:
		return outLabel{Name: r.str(), Value: r.str()}
	case refBase:
		if x < len(base) {
			return base[x]
		}
	case refDefault:
		if x < len(defaults) {
			return defaults[x]
		}
	}
	r.bad = true
	r.off = len(r.b)
	return outLabel{}
}

// skipSections moves past k sections.
func (r *reader) skipSections(k int) {
	for range k {
		n := r.uvarint()
		r.off = min(r.off+n, len(r.b))
	}
}
