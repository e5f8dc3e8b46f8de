package rules

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/fieldwatch/fieldwatch/change"
)

// managerActor is who made a change, as the object's
// metadata.managedFields tells: the field manager (kubectl, a
// controller's name) and the operation (Apply or Update).
type managerActor struct {
	Manager   string `json:"manager"`
	Operation string `json:"operation"`
}

// actorOf finds who made the change c, whose changes (for the rule that
// fires) are ops, from metadata.managedFields. The apiserver keeps those
// entries sorted by operation, time (in seconds) and manager, not by
// recency, and a write may leave no entry at all (a /scale write), so:
//
//   - created: the entry with the newest time (on a tie, the last one);
//   - updated: only the entries this write touched are candidates: those
//     of the new object that the old one lacks (keyed by manager,
//     operation and subresource) or whose time, fieldsHash or fieldsV1
//     differ from the old entry's. The candidate whose fieldsV1 owns the
//     most of the changed paths wins; when none owns any (the watcher
//     keeps fieldsHash, not fieldsV1; removals are owned by nobody
//     afterwards), the newest candidate (on a tie, the last). No
//     candidate, no actor: a previous writer is not guessed;
//   - deleted: no actor (managedFields says who wrote the object, not who
//     deleted it).
//
// Entries without a manager are skipped. ok is false when there is no
// actor.
func actorOf(c *Change, ops []patchOp) (a managerActor, ok bool) {
	var old []any
	switch c.Type {
	case change.Created:
		ops = nil // the newest entry, whatever it owns
	case change.Updated:
		old = managedFields(c.Old)
	default:
		return managerActor{}, false
	}
	obj := c.New
	var best map[string]any
	bestScore, bestLevel, bestTime := 0, 0, ""
	for _, e := range managedFields(obj) {
		entry, isMap := e.(map[string]any)
		if !isMap {
			continue
		}
		if m, _ := entry["manager"].(string); m == "" {
			continue
		}
		level := 2
		if c.Type == change.Updated {
			if level = touched(entry, old); level == 0 {
				continue
			}
		}
		t, _ := entry["time"].(string)
		score := 0
		if fv, isMap := entry["fieldsV1"].(map[string]any); isMap {
			for _, op := range ops {
				if owns(fv, obj, op.toks) {
					score++
				}
			}
		}
		// RFC 3339 times in UTC compare as strings.
		// Ownership first; then an entry the write stamped over one
		// that only lost fields to it; then the newest.
		better := best == nil || score > bestScore ||
			(score == bestScore && (level > bestLevel || (level == bestLevel && t >= bestTime)))
		if better {
			best, bestScore, bestLevel, bestTime = entry, score, level, t
		}
	}
	if best == nil {
		return managerActor{}, false
	}
	a.Manager, _ = best["manager"].(string)
	a.Operation, _ = best["operation"].(string)
	return a, true
}

// managedFields returns obj's metadata.managedFields entries.
func managedFields(obj map[string]any) []any {
	meta, _ := obj["metadata"].(map[string]any)
	entries, _ := meta["managedFields"].([]any)
	return entries
}

// touched says how a managedFields entry of the new object was touched by
// the change from an object whose entries are old: 2 when the write
// stamped it (the old object has no entry with its manager, operation and
// subresource, or that entry's time differs), 1 when only its field set
// changed (a writer in the same second took fields from it: more likely
// the loser than the writer), 0 when it is as it was.
func touched(entry map[string]any, old []any) int {
	for _, e := range old {
		o, isMap := e.(map[string]any)
		if !isMap || !sameString(entry, o, "manager") || !sameString(entry, o, "operation") || !sameString(entry, o, "subresource") {
			continue
		}
		switch {
		case !sameString(entry, o, "time"):
			return 2
		case !sameFields(entry, o):
			return 1
		}
		return 0
	}
	return 2
}

// sameString reports whether a[key] and b[key] are the same string (or
// both not strings).
func sameString(a, b map[string]any, key string) bool {
	x, _ := a[key].(string)
	y, _ := b[key].(string)
	return x == y
}

// sameFields reports whether two managedFields entries have the same field
// set, given as fieldsV1 (what the apiserver writes) or fieldsHash (what
// the watcher's cache keeps instead, change.FieldsHash), in any mix.
func sameFields(a, b map[string]any) bool {
	av, aV1 := a["fieldsV1"]
	bv, bV1 := b["fieldsV1"]
	ah, aHash := a["fieldsHash"].(string)
	bh, bHash := b["fieldsHash"].(string)
	switch {
	case aV1 && bV1:
		return equal(av, bv) && (!aHash || !bHash || ah == bh)
	case aHash && bHash:
		return ah == bh
	case aV1 && bHash:
		return change.FieldsHash(av) == bh
	case aHash && bV1:
		return ah == change.FieldsHash(bv)
	}
	return !aV1 && !bV1 && !aHash && !bHash
}

// owns reports whether a fieldsV1 set (the structured-merge-diff format:
// "f:<field>", "k:<key fields as JSON>", "v:<value as JSON>", "i:<index>")
// contains the path toks of obj or a part of it.
func owns(set map[string]any, obj any, toks []string) bool {
	node, cur := set, obj
	for _, t := range toks {
		if len(node) == 0 || (len(node) == 1 && node["."] != nil) {
			return true // a leaf: the whole value below is owned
		}
		var child any
		switch c := cur.(type) {
		case []any:
			i, ok := listIndex(t, len(c))
			if !ok {
				return false
			}
			cur = c[i]
			child = listItemKey(node, c[i], i)
		case map[string]any:
			child = node["f:"+t]
			cur = c[t]
		default:
			return false
		}
		next, ok := child.(map[string]any)
		if !ok {
			return false
		}
		node = next
	}
	return true
}

// listItemKey returns the fieldsV1 node of a list item: by key fields,
// by value or by index.
func listItemKey(node map[string]any, item any, index int) any {
	if n, ok := node["i:"+strconv.Itoa(index)]; ok {
		return n
	}
	for k, n := range node {
		switch {
		case strings.HasPrefix(k, "k:"):
			var keys map[string]any
			m, isMap := item.(map[string]any)
			if !isMap || json.Unmarshal([]byte(k[2:]), &keys) != nil {
				continue
			}
			match := len(keys) > 0
			for kk, kv := range keys {
				if !equal(m[kk], kv) {
					match = false
					break
				}
			}
			if match {
				return n
			}
		case strings.HasPrefix(k, "v:"):
			var v any
			if json.Unmarshal([]byte(k[2:]), &v) == nil && equal(v, item) {
				return n
			}
		}
	}
	return nil
}
