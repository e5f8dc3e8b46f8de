package rules

import (
	"bytes"
	"encoding/json"
	"slices"
	"sort"
	"strconv"
)

// Op is one change of a payload's changes: an RFC 6902 operation (add,
// remove or replace) at a JSON Pointer path, with the value it replaced or
// removed beside it (OldValue, which RFC 6902 does not have). Applied in
// order to the old object, the operations of a change give the new one
// (except for what was left out as noise or ignored).
type Op struct {
	// Op is add, remove or replace.
	Op string
	// Path is a JSON Pointer (RFC 6901): "/spec/size",
	// "/metadata/annotations/example.com~1x".
	Path string
	// Value is the new value (add and replace).
	Value any
	// OldValue is the previous value (remove and replace).
	OldValue any

	toks []string
}

// MarshalJSON renders {"op", "path", "value", "oldValue"} in that order;
// value is left out of a remove and oldValue out of an add.
func (o Op) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"op":`)
	b.WriteString(strconv.Quote(o.Op))
	b.WriteString(`,"path":`)
	if err := writeJSON(&b, o.Path); err != nil {
		return nil, err
	}
	if o.Op != "remove" {
		b.WriteString(`,"value":`)
		if err := writeJSON(&b, o.Value); err != nil {
			return nil, err
		}
	}
	if o.Op != "add" {
		b.WriteString(`,"oldValue":`)
		if err := writeJSON(&b, o.OldValue); err != nil {
			return nil, err
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// writeJSON appends v as compact JSON without HTML escaping ("<redacted>"
// stays readable).
func writeJSON(b *bytes.Buffer, v any) error {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	b.Truncate(b.Len() - 1) // Encode's newline
	return nil
}

// pruner limits a diff: nothing at or under an excluded location counts,
// and when include is not nil only what is at, under or above one of its
// locations does.
type pruner struct {
	include [][]string
	exclude [][]string
}

// skip reports whether nothing at or under toks counts.
func (p *pruner) skip(toks []string) bool {
	if p == nil {
		return false
	}
	for _, ex := range p.exclude {
		if hasPrefix(toks, ex) {
			return true
		}
	}
	if p.include == nil {
		return false
	}
	for _, in := range p.include {
		if hasPrefix(toks, in) || hasPrefix(in, toks) {
			return false
		}
	}
	return true
}

// strip removes the excluded locations below toks from v, a whole value
// an operation at toks carries.
func (p *pruner) strip(toks []string, v any) any {
	if p == nil {
		return v
	}
	for _, ex := range p.exclude {
		if len(ex) > len(toks) && hasPrefix(ex, toks) {
			v = rewriteAt(v, ex[len(toks):], nil)
		}
	}
	return v
}

// differ computes the operations that turn one object into another.
// Maps are compared key by key (in key order, so the result is stable).
// Lists of equal length are compared item by item; a list that only grew
// at its end gives adds, one that only shrank at its end gives removes
// (last first, so the operations apply in order); any other list change is
// one replace of the whole list.
type differ struct {
	ops  []Op
	pr   *pruner
	toks []string
}

// diff returns the operations from old to new, limited by pr (nil: all).
func diff(old, new map[string]any, pr *pruner) []Op {
	d := differ{pr: pr, toks: make([]string, 0, 16)}
	d.walk(old, new, old != nil, new != nil)
	return d.ops
}

func (d *differ) walk(old, new any, hasOld, hasNew bool) {
	switch {
	case !hasOld && !hasNew:
	case !hasOld:
		d.emit("add", nil, new)
	case !hasNew:
		d.emit("remove", old, nil)
	default:
		if om, ok := old.(map[string]any); ok {
			if nm, ok := new.(map[string]any); ok {
				d.maps(om, nm)
				return
			}
		}
		if ol, ok := old.([]any); ok {
			if nl, ok := new.([]any); ok {
				d.lists(ol, nl)
				return
			}
		}
		if !equal(old, new) {
			d.emit("replace", old, new)
		}
	}
}

func (d *differ) push(tok string) bool {
	d.toks = append(d.toks, tok)
	if d.pr.skip(d.toks) {
		d.toks = d.toks[:len(d.toks)-1]
		return false
	}
	return true
}

func (d *differ) pop() { d.toks = d.toks[:len(d.toks)-1] }

func (d *differ) maps(om, nm map[string]any) {
	var buf [8]string
	keys := buf[:0]
	for k, ov := range om {
		nv, ok := nm[k]
		if ok && equal(ov, nv) {
			continue
		}
		keys = append(keys, k)
	}
	for k := range nm {
		if _, ok := om[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !d.push(k) {
			continue
		}
		ov, hasOld := om[k]
		nv, hasNew := nm[k]
		d.walk(ov, nv, hasOld, hasNew)
		d.pop()
	}
}

func (d *differ) lists(ol, nl []any) {
	if len(ol) == len(nl) {
		for i := range ol {
			if equal(ol[i], nl[i]) || !d.push(strconv.Itoa(i)) {
				continue
			}
			d.walk(ol[i], nl[i], true, true)
			d.pop()
		}
		return
	}
	for i := range min(len(ol), len(nl)) {
		if !equal(ol[i], nl[i]) {
			d.emit("replace", ol, nl)
			return
		}
	}
	if len(nl) > len(ol) {
		for i := len(ol); i < len(nl); i++ {
			if d.push(strconv.Itoa(i)) {
				d.emit("add", nil, nl[i])
				d.pop()
			}
		}
		return
	}
	for i := len(ol) - 1; i >= len(nl); i-- {
		if d.push(strconv.Itoa(i)) {
			d.emit("remove", ol[i], nil)
			d.pop()
		}
	}
}

func (d *differ) emit(op string, old, new any) {
	toks := slices.Clone(d.toks)
	d.ops = append(d.ops, Op{Op: op, toks: toks, Value: d.pr.strip(toks, new), OldValue: d.pr.strip(toks, old)})
}
