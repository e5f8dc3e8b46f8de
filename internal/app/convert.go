package app

import (
	"github.com/fieldwatch/fieldwatch/rules"
	"github.com/fieldwatch/fieldwatch/watcher"
)

// watcherSelectors translates the rules' resource selectors for the
// watcher. In rules files group "" is the core group and "*" any group.
func watcherSelectors(sels []rules.Selector) []watcher.Selector {
	out := make([]watcher.Selector, 0, len(sels))
	for _, s := range sels {
		out = append(out, watcher.Selector{
			Group:    s.Group,
			Core:     s.Group == "",
			Version:  s.Version,
			Kind:     s.Kind,
			Resource: s.Resource,
			Custom:   s.Custom,
		})
	}
	return out
}

// rulesResource describes a watched resource to the rules.
func rulesResource(r watcher.Resource) rules.Resource {
	return rules.Resource{
		Group:        r.Group,
		Version:      r.Version,
		Resource:     r.Resource,
		Kind:         r.Kind,
		Namespaced:   r.Namespaced,
		Custom:       r.Custom,
		OtherVersion: !r.Preferred,
	}
}

// projection returns what the watcher must cache of r's objects for set.
func projection(set *rules.Set, r watcher.Resource) watcher.Projection {
	p := set.Projection(rulesResource(r))
	return watcher.Projection{Full: p.Full, Paths: p.Paths}
}

// rulesChange turns a watcher change into what the rules evaluate. The
// maps are fresh copies: rules never see the cache.
func rulesChange(c *watcher.Change) *rules.Change {
	rc := &rules.Change{
		Type:     rules.ChangeType(c.Type),
		Resource: rulesResource(c.Resource),
		Time:     c.Time,
	}
	if c.New != nil {
		rc.Object = c.New.Map()
	}
	if c.Old != nil {
		rc.OldObject = c.Old.Map()
	}
	return rc
}
