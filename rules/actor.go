package rules

import (
	"encoding/json"
	"strconv"
	"strings"
)

// Actor is who made a change, as the object's metadata.managedFields tells:
// the field manager (kubectl, a controller's name) and the operation
// (Apply or Update).
type Actor struct {
	Manager   string `json:"manager"`
	Operation string `json:"operation"`
}

// actorOf finds who made the changes ops to obj. The managedFields entry
// whose fieldsV1 owns the most of the changed paths wins (the newest
// `time` breaks ties); when no entry owns any (fieldsV1 absent, or the
// changes are removals, which nobody owns afterwards), the entry with the
// newest time; when there is no entry, nil (the payload then has no
// actor).
func actorOf(obj map[string]any, ops []Op) *Actor {
	meta, _ := obj["metadata"].(map[string]any)
	entries, _ := meta["managedFields"].([]any)
	best, bestScore, bestTime := -1, 0, ""
	for i, e := range entries {
		entry, ok := e.(map[string]any)
		if !ok {
			continue
		}
		t, _ := entry["time"].(string)
		score := 0
		if fv, ok := entry["fieldsV1"].(map[string]any); ok {
			for _, op := range ops {
				if owns(fv, obj, op.toks) {
					score++
				}
			}
		}
		if best < 0 || score > bestScore || (score == bestScore && t > bestTime) {
			best, bestScore, bestTime = i, score, t
		}
	}
	if best < 0 {
		return nil
	}
	entry := entries[best].(map[string]any)
	a := &Actor{}
	a.Manager, _ = entry["manager"].(string)
	a.Operation, _ = entry["operation"].(string)
	if a.Manager == "" {
		return nil
	}
	return a
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
