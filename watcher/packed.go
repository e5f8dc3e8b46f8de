package watcher

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"io"
	"sync"
	"sync/atomic"
)

// Large projected objects are kept compressed: a CRD that CRD rules read
// keeps its schemas (JSON that compresses well), and thousands of CRDs
// would otherwise hold most of the cache. Below packThreshold an object's JSON is kept as the differences
// from one object of its resource (its template, see packDict):
// objects of one resource share their keys, most of their metadata and
// many values, so a small object is kept in a fraction of its JSON
// (BenchmarkCacheBytesPerObject). Reading one back is a copy of those pieces; an object whose
// delta would save less than an eighth is kept whole (deltaMaxShare).
const packThreshold = 8 << 10

// packedMark starts a flate-compressed rest, deltaMark a rest kept as
// differences from the template: JSON starts with neither.
const (
	packedMark = 0
	deltaMark  = 1
)

// deltaMinMatch is the shortest piece of the template a delta copies (a
// copy costs two to four bytes).
const deltaMinMatch = 4

var (
	packers = sync.Pool{New: func() any {
		w, _ := flate.NewWriter(nil, flate.BestSpeed) // BestSpeed is a valid level
		return w
	}}
	unpackers = sync.Pool{New: func() any { return flate.NewReader(nil) }}
)

// packDict is the template of one resource's objects: the projected JSON
// of the templateAfter-th of them under packThreshold (a resource with
// fewer, as most custom resources are, makes none and pays nothing), set
// once and never changed, with a hash table of where each four bytes of
// it first are (2 bytes a slot, a slot for every two bytes of it: a
// template costs at most twice its size, 16 KiB).
type packDict struct {
	seen atomic.Int32
	p    atomic.Pointer[template]
}

// templateAfter is how many objects of a resource are kept whole before
// one of them becomes its template.
const templateAfter = 8

type template struct {
	b     []byte
	shift uint
	table []uint16 // by hash of four bytes: their first offset in b, plus one
}

// get returns the template, made of b when there is none yet; nil for
// the first objects.
func (d *packDict) get(b []byte) *template {
	if t := d.p.Load(); t != nil {
		return t
	}
	if d.seen.Add(1) < templateAfter {
		return nil
	}
	bits := uint(5)
	for 2<<bits < len(b) {
		bits++
	}
	t := &template{b: bytes.Clone(b), shift: 32 - bits, table: make([]uint16, 1<<bits)}
	for i := 0; i+deltaMinMatch <= len(t.b); i++ {
		if h := t.hash(t.b[i:]); t.table[h] == 0 {
			t.table[h] = uint16(i + 1)
		}
	}
	if d.p.CompareAndSwap(nil, t) {
		return t
	}
	return d.p.Load()
}

// hash is the table's slot of the four bytes b starts with.
func (t *template) hash(b []byte) uint32 {
	return binary.LittleEndian.Uint32(b) * 2654435761 >> t.shift
}

// setRest keeps b, the object's projected JSON: as the differences from
// its resource's template when it is small, compressed when it is large,
// as it is when neither saves something. The same JSON always gives the
// same bytes within one resource's objects, but for the first few.
func (o *Object) setRest(b []byte) {
	o.rest = b
	if len(b) < packThreshold {
		if o.typ != nil && o.typ.dict != nil && len(b) > deltaMinMatch {
			if t := o.typ.dict.get(b); t != nil {
				if d := t.encode(b); d != nil {
					o.rest = d
				}
			}
		}
		return
	}
	var buf bytes.Buffer
	buf.WriteByte(packedMark)
	w := packers.Get().(*flate.Writer)
	defer packers.Put(w)
	w.Reset(&buf)
	if _, err := w.Write(b); err != nil || w.Close() != nil || buf.Len() >= len(b) {
		return
	}
	o.rest = bytes.Clone(buf.Bytes())
}

// json returns the object's projected JSON (see Object.rest).
func (o *Object) json() []byte {
	if len(o.rest) == 0 {
		return o.rest
	}
	switch o.rest[0] {
	case deltaMark:
		return o.typ.dict.p.Load().decode(o.rest)
	case packedMark:
	default:
		return o.rest
	}
	r := unpackers.Get().(io.ReadCloser)
	defer unpackers.Put(r)
	if err := r.(flate.Resetter).Reset(bytes.NewReader(o.rest[1:]), nil); err != nil {
		return nil
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil // written by setRest: never
	}
	return b
}

// deltaMaxShare is the largest share of an object's JSON a delta may
// take, in eighths: a delta that saves less than an eighth is not kept.
// Reading an object kept as a delta copies its JSON out (the rules read
// every changed object, old and new); one kept whole is read in place. An
// object that is mostly values its resource's template does not have (a
// large certificate, a long status message) would cost that copy on every
// read for little memory, and its encoding stops as soon as it is clear.
const deltaMaxShare = 7

// encode returns b as differences from the template: deltaMark, the
// length of b, then pieces, each a uvarint n<<1 followed by n literal
// bytes, or n<<1|1 and the uvarint offset of n bytes of the template. It
// returns nil when that saves less than an eighth of b (deltaMaxShare),
// giving up as soon as the pieces reach that. Matches are greedy: at
// each position the longer of the template's continuation of the last
// copy and the first place of the next four bytes.
func (t *template) encode(b []byte) []byte {
	limit := len(b) * deltaMaxShare / 8
	out := make([]byte, 0, len(b)/2)
	out = append(out, deltaMark)
	out = binary.AppendUvarint(out, uint64(len(b)))
	lit := 0   // start of the pending literal
	next := -1 // the template's offset after the last copy
	for i := 0; i+deltaMinMatch <= len(b); {
		if len(out)+i-lit >= limit {
			return nil
		}
		off, n := -1, 0
		if next >= 0 && next < len(t.b) {
			if m := matchLen(t.b[next:], b[i:]); m >= deltaMinMatch {
				off, n = next, m
			}
		}
		if c := int(t.table[t.hash(b[i:])]) - 1; c >= 0 {
			if m := matchLen(t.b[c:], b[i:]); m > n {
				off, n = c, m
			}
		}
		if n < deltaMinMatch {
			i++
			if next >= 0 {
				next++ // a changed byte: the template likely goes on after it
			}
			continue
		}
		if i > lit {
			out = binary.AppendUvarint(out, uint64(i-lit)<<1)
			out = append(out, b[lit:i]...)
		}
		out = binary.AppendUvarint(out, uint64(n)<<1|1)
		out = binary.AppendUvarint(out, uint64(off))
		i += n
		lit, next = i, off+n
	}
	if lit < len(b) {
		out = binary.AppendUvarint(out, uint64(len(b)-lit)<<1)
		out = append(out, b[lit:]...)
	}
	if len(out) >= limit || !bytes.Equal(t.decode(out), b) {
		return nil
	}
	return bytes.Clone(out)
}

// decode returns the JSON d (from encode) stands for; nil when d is not
// well formed, which encode never writes.
func (t *template) decode(d []byte) []byte {
	d = d[1:]
	size, k := binary.Uvarint(d)
	if k <= 0 || size > packThreshold {
		return nil
	}
	d = d[k:]
	out := make([]byte, 0, size)
	for len(d) > 0 {
		op, k := binary.Uvarint(d)
		if k <= 0 {
			return nil
		}
		d = d[k:]
		n := op >> 1
		if op&1 == 0 {
			if n > uint64(len(d)) {
				return nil
			}
			out = append(out, d[:n]...)
			d = d[n:]
			continue
		}
		off, k := binary.Uvarint(d)
		if k <= 0 || off > uint64(len(t.b)) || n > uint64(len(t.b))-off {
			return nil
		}
		d = d[k:]
		out = append(out, t.b[off:off+n]...)
	}
	if uint64(len(out)) != size {
		return nil
	}
	return out
}

// matchLen returns how many bytes a and b have in common from the start.
func matchLen(a, b []byte) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
