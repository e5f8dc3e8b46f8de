package rules

import (
	"slices"
	"strconv"
	"strings"
)

// patchOp is one change of a payload's changes: an RFC 6902 operation (add,
// remove or replace) at a JSON Pointer path, with the value it replaced or
// removed beside it (OldValue, which RFC 6902 does not have). Applied in
// order to the old object, the operations of a change give the new one
// (except for what was left out as noise or ignored).
type patchOp struct {
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
func (o patchOp) MarshalJSON() ([]byte, error) { return o.appendJSON(nil) }

func (o patchOp) appendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"op":`...)
	b = appendJSONString(b, o.Op)
	b = append(b, `,"path":`...)
	b = appendJSONString(b, o.Path)
	var err error
	if o.Op != "remove" {
		b = append(b, `,"value":`...)
		if b, err = appendJSON(b, o.Value); err != nil {
			return nil, err
		}
	}
	if o.Op != "add" {
		b = append(b, `,"oldValue":`...)
		if b, err = appendJSON(b, o.OldValue); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// pruner limits a diff: nothing at or under an excluded location counts,
// and when include is not nil only what is at, under or above one of its
// locations does. Both are trees of locations, so that what a place
// counts for costs the depth of the place, however many locations an
// ignoreFields or fields path with [*] gives.
type pruner struct {
	include *locTree
	exclude *locTree
}

// newPruner returns a pruner that excludes the locations exclude (and
// includes everything).
func newPruner(exclude [][]string) *pruner {
	p := &pruner{exclude: &locTree{}}
	for _, ex := range exclude {
		p.exclude.add(ex)
	}
	return p
}

// excludeLoc adds toks to the excluded locations.
func (p *pruner) excludeLoc(toks []string) { p.exclude.add(toks) }

// includeLoc adds toks to the included locations.
func (p *pruner) includeLoc(toks []string) {
	if p.include == nil {
		p.include = &locTree{}
	}
	p.include.add(toks)
}

// skip reports whether nothing at or under toks counts.
func (p *pruner) skip(toks []string) bool { return p.visit(toks) == skipped }

// visit says how much of the value at toks counts.
type visit uint8

const (
	whole   visit = iota // everything at and under toks
	partial              // only some of what is under toks
	skipped              // nothing
)

func (p *pruner) visit(toks []string) visit {
	if p == nil {
		return whole
	}
	covered, under := p.exclude.at(toks)
	if covered {
		return skipped
	}
	above := under != nil // toks is above an excluded location
	if p.include == nil {
		if above {
			return partial
		}
		return whole
	}
	if covered, under := p.include.at(toks); covered {
		if above {
			return partial
		}
		return whole
	} else if under != nil {
		return partial
	}
	return skipped
}

// strip removes the excluded locations below toks from v, a whole value
// an operation at toks carries, and with them the maps that held nothing
// else (so that an ignored key does not leave an empty map behind to
// show). gone is true when v itself is such a map: once ignored parts are
// left out it is as good as absent. A map that was empty to begin with is
// not gone, and list items are never removed (that would shift the
// others): a list item that held only ignored keys stays, as {}. It is
// one pass over v, however many locations are excluded.
func (p *pruner) strip(toks []string, v any) (out any, gone bool) {
	if p == nil {
		return v, false
	}
	n := p.exclude.below(toks)
	if n == nil {
		return v, false
	}
	out, _, gone = n.removeUnder(v)
	return out, gone
}

// differ computes the operations that turn one object into another, in
// one pass over both. Operations come in key order (maps are compared key
// by key, and the operations of each key are put in key order once the
// map is done, so the result is stable). Lists of equal length are
// compared item by item; a list that only grew at its end gives adds, one
// that only shrank at its end gives removes (last first, so the
// operations apply in order); any other list change is one replace of the
// whole list.
type differ struct {
	ops  []patchOp
	pr   *pruner
	toks []string
}

// diff returns the operations from old to new, limited by pr (nil: all).
func diffObjects(old, new map[string]any, pr *pruner) []patchOp {
	d := differ{pr: pr, toks: make([]string, 0, 16)}
	d.walk(old, new, old != nil, new != nil, false)
	return d.ops
}

// walk diffs the values at d.toks, a map key or (item) a list item.
func (d *differ) walk(old, new any, hasOld, hasNew, item bool) {
	switch {
	case !hasOld && !hasNew:
	case !hasOld:
		d.emit("add", nil, new, item)
	case !hasNew:
		d.emit("remove", old, nil, item)
	default:
		switch o := old.(type) {
		case map[string]any:
			if n, ok := new.(map[string]any); ok {
				d.maps(o, n)
				return
			}
		case []any:
			if n, ok := new.([]any); ok {
				d.lists(o, n)
				return
			}
		}
		if !equal(old, new) {
			d.emit("replace", old, new, item)
		}
	}
}

func (d *differ) pop() { d.toks = d.toks[:len(d.toks)-1] }

// keySpan is the range of operations one map key produced.
type keySpan struct {
	key        string
	start, end int
}

// maps diffs two maps. A key whose values are wholly counted is first
// compared with equal, which stops at the first difference and allocates
// nothing; only keys that differ are walked. A partially counted key
// (above an included location) is walked directly, so that what is not
// counted is never compared.
func (d *differ) maps(om, nm map[string]any) {
	var buf [4]keySpan
	spans := buf[:0]
	base := len(d.ops)
	for k, ov := range om {
		nv, hasNew := nm[k]
		switch d.visitKey(k) {
		case skipped:
			continue
		case whole:
			if hasNew && equal(ov, nv) {
				continue
			}
		}
		start := len(d.ops)
		d.toks = append(d.toks, k)
		d.walk(ov, nv, true, hasNew, false)
		d.pop()
		if len(d.ops) > start {
			spans = append(spans, keySpan{k, start, len(d.ops)})
		}
	}
	for k, nv := range nm {
		if _, ok := om[k]; ok || d.visitKey(k) == skipped {
			continue
		}
		start := len(d.ops)
		d.toks = append(d.toks, k)
		d.walk(nil, nv, false, true, false)
		d.pop()
		if len(d.ops) > start {
			spans = append(spans, keySpan{k, start, len(d.ops)})
		}
	}
	if len(spans) < 2 || slices.IsSortedFunc(spans, cmpSpan) {
		return
	}
	slices.SortFunc(spans, cmpSpan)
	sorted := make([]patchOp, 0, len(d.ops)-base)
	for _, s := range spans {
		sorted = append(sorted, d.ops[s.start:s.end]...)
	}
	copy(d.ops[base:], sorted)
}

func cmpSpan(a, b keySpan) int { return strings.Compare(a.key, b.key) }

// visitKey says how much of key k of the current map counts.
func (d *differ) visitKey(k string) visit {
	if d.pr == nil {
		return whole
	}
	d.toks = append(d.toks, k)
	v := d.pr.visit(d.toks)
	d.pop()
	return v
}

func (d *differ) push(tok string) bool {
	d.toks = append(d.toks, tok)
	if d.pr.skip(d.toks) {
		d.pop()
		return false
	}
	return true
}

func (d *differ) lists(ol, nl []any) {
	if len(ol) == len(nl) {
		for i := range ol {
			d.toks = append(d.toks, strconv.Itoa(i))
			switch v := d.pr.visit(d.toks); {
			case v == partial || v == whole && !equal(ol[i], nl[i]):
				d.walk(ol[i], nl[i], true, true, true)
			}
			d.pop()
		}
		return
	}
	for i := range min(len(ol), len(nl)) {
		if !d.sameItem(i, ol[i], nl[i]) {
			d.emit("replace", ol, nl, false)
			return
		}
	}
	if len(nl) > len(ol) {
		for i := len(ol); i < len(nl); i++ {
			if d.push(strconv.Itoa(i)) {
				d.emit("add", nil, nl[i], true)
				d.pop()
			}
		}
		return
	}
	for i := len(ol) - 1; i >= len(nl); i-- {
		if d.push(strconv.Itoa(i)) {
			d.emit("remove", ol[i], nil, true)
			d.pop()
		}
	}
}

// sameItem reports whether item i of a list that changed length is the
// same in the old and the new list once its excluded parts are left out
// (ignored parts never count as a change).
func (d *differ) sameItem(i int, old, new any) bool {
	if equal(old, new) {
		return true
	}
	if d.pr == nil {
		return false
	}
	d.toks = append(d.toks, strconv.Itoa(i))
	defer d.pop()
	if covered, _ := d.pr.exclude.at(d.toks); covered {
		return true
	}
	o, _ := d.pr.strip(d.toks, old)
	n, _ := d.pr.strip(d.toks, new)
	return equal(o, n)
}

// emit records an operation at d.toks, a map key or (item) a list item,
// with its values stripped of excluded parts. A map key's value that held
// only excluded parts is as good as absent: adding or removing it is no
// change, and replacing it (or replacing something by it) is a remove
// (an add). A list item's is not: the list's length changed.
func (d *differ) emit(op string, old, new any, item bool) {
	old, oldGone := d.pr.strip(d.toks, old)
	new, newGone := d.pr.strip(d.toks, new)
	if !item {
		switch {
		case op == "add" && newGone, op == "remove" && oldGone, oldGone && newGone:
			return
		case op == "replace" && oldGone:
			op, old = "add", nil
		case op == "replace" && newGone:
			op, new = "remove", nil
		}
	}
	d.ops = append(d.ops, patchOp{Op: op, toks: slices.Clone(d.toks), Value: new, OldValue: old})
}
