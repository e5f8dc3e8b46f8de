package fieldmetrics

import (
	"encoding/binary"
	"math"
	"slices"
	"strings"
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
// where a label is uvarint name+1 (an index in Set.names) or 0 followed
// by the name (uvarint length, bytes), then the value (uvarint length,
// bytes). Names of the configuration cost a byte or two; the values are
// copied, so an entry holds no reference into the object it was made of.

// appendLabel appends l's encoding.
func appendLabel(b []byte, l *label) []byte {
	if l.name >= 0 {
		b = binary.AppendUvarint(b, uint64(l.name)+1)
	} else {
		b = binary.AppendUvarint(b, 0)
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

// readLabel reads one label into names and values, resolving indices with
// s.
func (r *reader) label(s *Set) outLabel {
	idx := r.uvarint()
	var name string
	if idx == 0 {
		name = r.str()
	} else if idx-1 < len(s.names) {
		name = s.names[idx-1]
	} else {
		r.bad = true
	}
	return outLabel{Name: name, Value: r.str()}
}

// skipSections moves past k sections.
func (r *reader) skipSections(k int) {
	for range k {
		n := r.uvarint()
		r.off = min(r.off+n, len(r.b))
	}
}

// setDefault adds l to labels unless a label of its name is there.
func setDefault(labels []outLabel, l outLabel) []outLabel {
	for i := range labels {
		if labels[i].Name == l.Name {
			return labels
		}
	}
	return append(labels, l)
}

// sortLabels sorts labels by name, as kube-state-metrics writes them.
func sortLabels(labels []outLabel) {
	slices.SortFunc(labels, func(a, b outLabel) int { return strings.Compare(a.Name, b.Name) })
}
