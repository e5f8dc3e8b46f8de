package fieldmetrics

import "github.com/fieldwatch/fieldwatch/change"

// Projection returns what of the objects of res the set reads (empty when
// it reads none of res): for each metric, the fields its labelsFromPath
// read and what its each.path points to, whole (an each iterates the keys
// of a map or the items of a list, and reads under them). A path is kept
// up to its first part that is not a field name (a list lookup, an index,
// a key=value test); a path that starts with one, or is empty, needs the
// whole object.
func (s *Set) Projection(res change.Resource) change.Projection {
	var p change.Projection
	if s == nil {
		return p
	}
	add := func(vp valuePath) {
		pre := vp.prefix()
		if len(pre) == 0 {
			p.Full = true
			return
		}
		p.Paths = append(p.Paths, pre)
	}
	for _, r := range s.resources {
		if !r.sel.Matches(res) {
			continue
		}
		for _, f := range r.families {
			for _, st := range f.base.stars {
				add(st.path)
			}
			for _, pl := range f.base.plain {
				add(pl.path)
			}
			add(f.each.eachPath())
		}
	}
	return p.Minimal()
}
