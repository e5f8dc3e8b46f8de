package watcher

import (
	"bytes"
	"compress/flate"
	"io"
	"sync"
)

// Large projected objects are kept compressed: a CRD that CRD rules read
// keeps its schemas (tens to hundreds of KiB of JSON, which compress
// about tenfold), and thousands of CRDs would otherwise hold most of the
// cache. Below packThreshold an object's JSON stays as it is, so that the
// objects most rules read cost no CPU to read.
const packThreshold = 8 << 10

// packedMark starts a compressed rest: JSON never starts with a NUL.
const packedMark = 0

var (
	packers = sync.Pool{New: func() any {
		w, _ := flate.NewWriter(nil, flate.BestSpeed) // BestSpeed is a valid level
		return w
	}}
	unpackers = sync.Pool{New: func() any { return flate.NewReader(nil) }}
)

// setRest keeps b, the object's projected JSON, compressed when it is
// large and compression saves something. The same JSON always gives the
// same bytes, so that objects compare by their bytes.
func (o *Object) setRest(b []byte) {
	o.rest = b
	if len(b) < packThreshold {
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
	if len(o.rest) == 0 || o.rest[0] != packedMark {
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
