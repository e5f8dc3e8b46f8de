package rules

import "maps"

// locTree is a set of locations in an object (JSON Pointer tokens), kept
// as a tree of their tokens so that every question asked of it costs the
// length of the location asked about, not the number of locations: an
// ignoreFields or redact path with [*] over a list of 30,000 items gives
// 30,000 locations, and the diff and the payload ask about each place
// they visit. A location at or under another one adds nothing (the tree
// keeps the outer one). The zero value and nil are empty sets.
type locTree struct {
	// end is set when the tokens leading here are a location.
	end  bool
	kids map[string]*locTree
	// op is the index of the operation at this location, for the
	// operations snapshotChanges collects.
	op int
}

// add adds the location toks and returns its node.
func (t *locTree) add(toks []string) *locTree {
	n := t
	for _, tok := range toks {
		if n.end {
			return n // inside a location already there
		}
		kid := n.kids[tok]
		if kid == nil {
			if n.kids == nil {
				n.kids = map[string]*locTree{}
			}
			kid = &locTree{}
			n.kids[tok] = kid
		}
		n = kid
	}
	n.end, n.kids = true, nil
	return n
}

// at returns how toks stands to the set: covered when a location is at or
// above toks, and otherwise the node at toks, whose descendants are the
// locations under toks (nil when there are none).
func (t *locTree) at(toks []string) (covered bool, n *locTree) {
	n = t
	for _, tok := range toks {
		if n == nil {
			return false, nil
		}
		if n.end {
			return true, n
		}
		n = n.kids[tok]
	}
	if n == nil {
		return false, nil
	}
	if n.end {
		return true, n
	}
	if len(n.kids) == 0 {
		return false, nil
	}
	return false, n
}

// below returns the node whose descendants are the locations strictly
// under toks, or nil when there are none or toks itself is covered.
func (t *locTree) below(toks []string) *locTree {
	covered, n := t.at(toks)
	if covered {
		return nil
	}
	return n
}

// each calls fn with every kid of t present in m, iterating over the
// smaller of the two.
func (t *locTree) each(m map[string]any, fn func(k string, v any, kid *locTree)) {
	if len(t.kids) <= len(m) {
		for k, kid := range t.kids {
			if v, ok := m[k]; ok {
				fn(k, v, kid)
			}
		}
		return
	}
	for k, v := range m {
		if kid := t.kids[k]; kid != nil {
			fn(k, v, kid)
		}
	}
}

// removeUnder returns v without the map keys at the locations under t,
// nor the maps on the way to them that held nothing else, in one pass
// over v: changed says whether anything was removed and emptied whether v
// itself was such a map (out is then an empty map). List items are never
// removed (that would shift the others). Maps and lists on the way are
// copied, never changed: v may be a shared cache.
func (t *locTree) removeUnder(v any) (out any, changed, emptied bool) {
	switch c := v.(type) {
	case map[string]any:
		var cp map[string]any
		t.each(c, func(k string, old any, kid *locTree) {
			drop := kid.end
			var child any
			if !drop {
				var ch bool
				if child, ch, drop = kid.removeUnder(old); !ch {
					return
				}
			}
			if cp == nil {
				cp = maps.Clone(c)
			}
			if drop {
				delete(cp, k)
			} else {
				cp[k] = child
			}
		})
		if cp == nil {
			return v, false, false
		}
		return cp, true, len(cp) == 0
	case []any:
		var cp []any
		for k, kid := range t.kids {
			i, ok := listIndex(k, len(c))
			if !ok || kid.end {
				continue
			}
			child, ch, _ := kid.removeUnder(c[i])
			if !ch {
				continue
			}
			if cp == nil {
				cp = append([]any(nil), c...)
			}
			cp[i] = child
		}
		if cp == nil {
			return v, false, false
		}
		return cp, true, false
	}
	return v, false, false
}

// replaceUnder returns v with the value at every location under t
// replaced by with, in one pass over v; changed says whether anything
// was. Locations that v lacks are left alone. Maps and lists on the way
// are copied, never changed.
func (t *locTree) replaceUnder(v any, with any) (out any, changed bool) {
	switch c := v.(type) {
	case map[string]any:
		var cp map[string]any
		t.each(c, func(k string, old any, kid *locTree) {
			nv := with
			if !kid.end {
				var ch bool
				if nv, ch = kid.replaceUnder(old, with); !ch {
					return
				}
			}
			if cp == nil {
				cp = maps.Clone(c)
			}
			cp[k] = nv
		})
		if cp == nil {
			return v, false
		}
		return cp, true
	case []any:
		var cp []any
		for k, kid := range t.kids {
			i, ok := listIndex(k, len(c))
			if !ok {
				continue
			}
			nv := with
			if !kid.end {
				var ch bool
				if nv, ch = kid.replaceUnder(c[i], with); !ch {
					continue
				}
			}
			if cp == nil {
				cp = append([]any(nil), c...)
			}
			cp[i] = nv
		}
		if cp == nil {
			return v, false
		}
		return cp, true
	}
	return v, false
}

// drop empties the Op of every operation at a location under t (their
// indexes in ops are the nodes' op) and returns how many it emptied.
func (t *locTree) drop(ops []patchOp) int {
	n := 0
	for _, kid := range t.kids {
		if kid.end {
			ops[kid.op].Op = ""
			n++
			continue
		}
		n += kid.drop(ops)
	}
	return n
}
