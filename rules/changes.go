package rules

import "github.com/fieldwatch/fieldwatch/change"

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
func (r *Rule) changes(st *evalState) []Op {
	c := st.c
	if c.Type != change.Updated {
		if len(r.fields) == 0 {
			return []Op{}
		}
		return r.snapshotChanges(c)
	}
	if len(r.fields) == 0 {
		return st.updateDiff(r)
	}
	exclude := r.excluded(c)
	var include [][]string
	add := func(toks []string) { include = append(include, toks) }
	for _, f := range r.fields {
		f.path.locations(c.OldObject, add)
		f.path.locations(c.Object, add)
	}
	if include == nil {
		return nil
	}
	return diff(c.OldObject, c.Object, &pruner{include: include, exclude: exclude})
}

// excluded returns the locations r leaves out of an update's changes: its
// noise paths and what its ignoreFields select in either object.
func (r *Rule) excluded(c *Change) [][]string {
	if len(r.ignore) == 0 {
		return r.noise
	}
	ex := append([][]string(nil), r.noise...)
	add := func(toks []string) { ex = append(ex, toks) }
	for _, p := range r.ignore {
		p.locations(c.OldObject, add)
		p.locations(c.Object, add)
	}
	return ex
}

// snapshotChanges returns the adds (create) or removes (delete) of the
// values r's fields select in the object.
func (r *Rule) snapshotChanges(c *Change) []Op {
	obj, op := c.Object, "add"
	if c.Type == change.Deleted {
		obj, op = c.OldObject, "remove"
	}
	pr := &pruner{exclude: r.noise}
	add := func(toks []string) { pr.exclude = append(pr.exclude, toks) }
	for _, p := range r.ignore {
		p.locations(obj, add)
	}
	ops := []Op{}
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
			for i := 0; i < len(ops); i++ {
				switch {
				case hasPrefix(toks, ops[i].toks):
					return // already inside an earlier change
				case hasPrefix(ops[i].toks, toks):
					ops = append(ops[:i], ops[i+1:]...) // inside this one
					i--
				}
			}
			if op == "add" {
				ops = append(ops, Op{Op: op, toks: toks, Value: v})
			} else {
				ops = append(ops, Op{Op: op, toks: toks, OldValue: v})
			}
		})
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
