package rules

import "github.com/fieldwatch/fieldwatch/change"

// fieldTrigger is one compiled entry of a rule's fields.
type fieldTrigger struct {
	path           *fieldPath
	from, to       any
	hasFrom, hasTo bool
	added, removed bool
}

// fires reports whether the trigger fires on a change of type t from old
// to new.
//
// On update, the value at the path must have changed (typed deep
// equality; presence counts), and then each condition that is set must
// hold: from (the old value equals it), to (the new value equals it),
// added (absent before, present now), removed (the reverse). from: null
// and to: null also accept an absent value.
//
// On create, the path must be present in the new object and to (if set)
// must hold; a trigger with from or removed never fires on create. On
// delete, symmetrically, the path must be present in the old object and
// from must hold; to and added never fire on delete.
func (f *fieldTrigger) fires(t change.Type, old, new map[string]any) bool {
	switch t {
	case change.Created:
		if f.hasFrom || f.removed {
			return false
		}
		nv, np := f.path.value(new)
		return np && (!f.hasTo || equal(nv, f.to))
	case change.Deleted:
		if f.hasTo || f.added {
			return false
		}
		ov, op := f.path.value(old)
		return op && (!f.hasFrom || equal(ov, f.from))
	}
	ov, op := f.path.value(old)
	nv, np := f.path.value(new)
	if op == np && (!op || equal(ov, nv)) {
		return false
	}
	switch {
	case f.added && (op || !np):
		return false
	case f.removed && (!op || np):
		return false
	case f.hasFrom && !matchValue(ov, op, f.from):
		return false
	case f.hasTo && !matchValue(nv, np, f.to):
		return false
	}
	return true
}

// matchValue reports whether a value (and whether it is present) equals
// want; a nil want also accepts an absent value.
func matchValue(v any, present bool, want any) bool {
	if !present {
		return want == nil
	}
	return equal(v, want)
}
