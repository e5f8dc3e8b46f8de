package fieldmetrics

import (
	"fmt"
	"strconv"
	"strings"
)

// A valuePath is a path of kube-state-metrics' CRS configuration, compiled
// once: a list of parts, each a map key, a list index (negative counts
// from the end), a map key=value test, or a list lookup [key=value] that
// picks the first map item whose key equals value (as a string, a number
// or a boolean). Get follows it through an object; anything that does not
// resolve gives nil. The semantics are kube-state-metrics'
// (pkg/customresourcestate compilePath), quirks included, so that the same
// file gives the same series.
type valuePath []pathOp

// pathOp is one compiled part of a valuePath.
type pathOp struct {
	part string
	// key and val are the key and value of a [key=value] lookup or a
	// key=value test; index is a part read as a list index.
	key, val string
	kind     opKind
	index    int
	isIndex  bool
	// num and isBool are val read as a number and as a boolean (lookups).
	num     float64
	isNum   bool
	boolVal bool
	isBool  bool
}

type opKind uint8

const (
	opField  opKind = iota // a map key or a list index
	opTest                 // key=value on a map, else a map key
	opLookup               // [key=value] on a list
)

// compilePath compiles the parts of a path.
func compilePath(parts []string) (valuePath, error) {
	out := make(valuePath, 0, len(parts))
	for _, part := range parts {
		op := pathOp{part: part}
		switch {
		case strings.HasPrefix(part, "[") && strings.HasSuffix(part, "]"):
			key, val, ok := strings.Cut(part[1:len(part)-1], "=")
			if !ok {
				return nil, fmt.Errorf("invalid list lookup %q: expected [key=value]", part)
			}
			op.kind, op.key, op.val = opLookup, key, val
			if n, err := toFloat64(val, false); err == nil {
				op.num, op.isNum = n, true
			}
			if b, err := strconv.ParseBool(val); err == nil {
				op.boolVal, op.isBool = b, true
			}
		default:
			if kv := strings.Split(part, "="); len(kv) == 2 {
				op.kind, op.key, op.val = opTest, kv[0], kv[1]
			}
			if i, err := strconv.Atoi(part); err == nil {
				op.index, op.isIndex = i, true
			}
		}
		out = append(out, op)
	}
	return out, nil
}

// Get returns what p points to in obj, nil when it does not resolve.
func (p valuePath) Get(obj any) any {
	for i := range p {
		if obj == nil {
			return nil
		}
		obj = p[i].apply(obj)
	}
	return obj
}

func (op *pathOp) apply(obj any) any {
	if op.kind == opLookup {
		return op.lookup(obj)
	}
	switch o := obj.(type) {
	case map[string]any:
		if op.kind == opTest {
			if v, ok := o[op.key]; ok {
				if s, ok := v.(string); ok && s == op.val {
					return v
				}
			}
		}
		return o[op.part]
	case []any:
		if !op.isIndex {
			return nil
		}
		i := op.index
		if i < 0 {
			i += len(o)
		}
		if i < 0 || i >= len(o) {
			return nil
		}
		return o[i]
	}
	return nil
}

// lookup is [key=value] on a list: the first map item whose key equals
// value as a string, as a number (toFloat64 on both sides) or as a
// boolean.
func (op *pathOp) lookup(obj any) any {
	items, ok := obj.([]any)
	if !ok {
		return nil
	}
	for _, it := range items {
		m, ok := it.(map[string]any)
		if !ok {
			continue
		}
		candidate, set := m[op.key]
		if !set {
			continue
		}
		if s, ok := candidate.(string); ok && s == op.val {
			return m
		}
		if op.isNum {
			if n, err := toFloat64(candidate, false); err == nil && n == op.num {
				return m
			}
		}
		if op.isBool {
			if b, ok := candidate.(bool); ok && b == op.boolVal {
				return m
			}
		}
	}
	return nil
}

// String formats p as kube-state-metrics does in its errors: [a,b,c].
func (p valuePath) String() string {
	var b strings.Builder
	b.WriteByte('[')
	for i, op := range p {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(op.part)
	}
	b.WriteByte(']')
	return b.String()
}

// prefix returns the field names p starts with, up to its first part that
// is not a plain map key (a lookup, an index, a key=value test): what of an
// object p can read, for the watcher's projection.
func (p valuePath) prefix() []string {
	var out []string
	for _, op := range p {
		if op.kind != opField || op.isIndex {
			break
		}
		out = append(out, op.part)
	}
	return out
}
