package rules

import (
	"slices"

	"github.com/fieldwatch/fieldwatch/change"
)

// changes returns the changes a firing of r on st.c carries:
//
//   - update, rule without fields: every change of the object, noise
//     (noisePaths) and ignoreFields left out;
//   - update, rule with fields: the changes at, under or above the
//     locations its fields select in the old or the new object (a change
//     above, such as a whole list replaced, is kept whole), noise and
//     ignoreFields left out;
//   - create / delete, rule without fields: none (an empty list);
//   - create / delete, rule with fields: one add (create) or remove
//     (delete) per location its fields select in the object, with the
//     value.
//
// Values of changes above an ignored location have it removed, with the
// maps that held nothing else (map keys only: list items are never
// removed from a value, that would shift the others); a change of a map
// key whose value held only ignored parts is no change (pruner.strip).
func (r *Rule) changes(st *evalState) []patchOp {
	c := st.c
	if c.Type != change.Updated {
		if len(r.fields) == 0 {
			return []patchOp{}
		}
		return r.snapshotChanges(c)
	}
	if len(r.fields) == 0 {
		return st.updateDiff(r)
	}
	pr := r.pruner(c)
	for _, f := range r.fields {
		f.path.locations(c.Old, pr.includeLoc)
		f.path.locations(c.New, pr.includeLoc)
	}
	if pr.include == nil {
		return nil
	}
	return diffObjects(c.Old, c.New, pr)
}

// pruner returns a pruner that leaves out of an update's changes what r
// leaves out: its noise paths and what its ignoreFields select in either
// object.
func (r *Rule) pruner(c *Change) *pruner {
	if len(r.ignore) == 0 {
		return &pruner{exclude: r.noiseTree}
	}
	pr := newPruner(r.noise)
	for _, p := range r.ignore {
		p.locations(c.Old, pr.excludeLoc)
		p.locations(c.New, pr.excludeLoc)
	}
	return pr
}

// snapshotChanges returns the adds (create) or removes (delete) of the
// values r's fields select in the object.
func (r *Rule) snapshotChanges(c *Change) []patchOp {
	obj, op := c.New, "add"
	if c.Type == change.Deleted {
		obj, op = c.Old, "remove"
	}
	pr := newPruner(r.noise)
	for _, p := range r.ignore {
		p.locations(obj, pr.excludeLoc)
	}
	ops := []patchOp{}
	var taken locTree // the locations of ops, each node's op its index
	dropped := 0      // ops inside a later one, their Op emptied
	for _, f := range r.fields {
		f.path.locations(obj, func(toks []string) {
			v, ok := valueAt(obj, toks)
			if !ok || pr.skip(toks) {
				return
			}
			v, gone := pr.strip(toks, v)
			if gone {
				return // it holds only ignored parts
			}
			covered, inside := taken.at(toks)
			if covered {
				return // already inside an earlier change
			}
			if inside != nil {
				dropped += inside.drop(ops) // inside this one
			}
			taken.add(toks).op = len(ops)
			if op == "add" {
				ops = append(ops, patchOp{Op: op, toks: toks, Value: v})
			} else {
				ops = append(ops, patchOp{Op: op, toks: toks, OldValue: v})
			}
		})
	}
	if dropped > 0 {
		ops = slices.DeleteFunc(ops, func(o patchOp) bool { return o.Op == "" })
	}
	return ops
}

// valueAt returns the value at JSON Pointer tokens in obj.
func valueAt(obj map[string]any, toks []string) (any, bool) {
	var cur any = obj
	for _, t := range toks {
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[t]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, ok := listIndex(t, len(c))
			if !ok {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}
