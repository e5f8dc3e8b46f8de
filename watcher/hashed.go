package watcher

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/jsonscan"
)

// The restart baseline never holds the values a projection's Hashed paths
// select (a Secret's data, what rules redact): each scalar under them is
// stored as hashPrefix and the hex SHA-256 of the file's salt and the
// value's JSON. At the next start, a stored hash that matches the hash of
// the object's value now is put back as that value (unhash): an unchanged
// value is no change, and a changed one is reported with its hash as the
// old value, which the payload redacts anyway.

// hashPrefix starts every hashed value.
const hashPrefix = "sha256:"

// hashValue returns the hash of the scalar v under salt.
func hashValue(salt []byte, v any) string {
	raw, _ := json.Marshal(v)
	h := sha256.New()
	h.Write(salt)
	h.Write(raw)
	return hashPrefix + hex.EncodeToString(h.Sum(nil))
}

// hashRest returns rest, an Object's JSON, with every scalar under the
// paths replaced by its hash. rest is returned as is when nothing is
// hashed.
func hashRest(salt, rest []byte, paths [][]string) ([]byte, error) {
	m, err := jsonscan.DecodeObject(rest)
	if err != nil {
		return nil, err
	}
	changed := false
	for _, p := range paths {
		under(m, p, func(v any) any {
			return mapScalars(v, func(x any) any {
				changed = true
				return hashValue(salt, x)
			})
		})
	}
	if !changed {
		return rest, nil
	}
	return json.Marshal(m)
}

// unhash returns old, a stored Object whose Hashed values are hashes,
// with every hash that matches the hash of cur's value at the same place
// put back as that value. It returns old itself when there is nothing to
// put back.
func unhash(salt []byte, old, cur *Object) *Object {
	paths := old.typ.projection.Hashed
	if len(paths) == 0 || len(salt) == 0 || !bytes.Contains(old.json(), []byte(hashPrefix)) {
		return old
	}
	om, err := jsonscan.DecodeObject(old.json())
	if err != nil {
		return old
	}
	cm, err := jsonscan.DecodeObject(cur.json())
	if err != nil {
		return old
	}
	changed := false
	var restore func(o, c any) any
	restore = func(o, c any) any {
		switch ov := o.(type) {
		case string:
			if strings.HasPrefix(ov, hashPrefix) && isScalar(c) && hashValue(salt, c) == ov {
				changed = true
				return c
			}
		case map[string]any:
			cv, ok := c.(map[string]any)
			if !ok {
				return o
			}
			for k, x := range ov {
				if y, ok := cv[k]; ok {
					ov[k] = restore(x, y)
				}
			}
		case []any:
			cv, ok := c.([]any)
			if !ok {
				return o
			}
			for i := range min(len(ov), len(cv)) {
				ov[i] = restore(ov[i], cv[i])
			}
		}
		return o
	}
	for _, p := range paths {
		pairs(om, cm, p, restore)
	}
	if !changed {
		return old
	}
	rest, err := json.Marshal(om)
	if err != nil {
		return old
	}
	o := *old
	o.setRest(rest)
	return &o
}

// under replaces each value path selects in v (a decoded JSON object) by
// f of it, in place.
func under(v any, path []string, f func(any) any) any {
	if len(path) == 0 {
		return f(v)
	}
	switch c := v.(type) {
	case map[string]any:
		if path[0] == change.AnyKey {
			for k, x := range c {
				c[k] = under(x, path[1:], f)
			}
		} else if x, ok := c[path[0]]; ok {
			c[path[0]] = under(x, path[1:], f)
		}
	case []any:
		if path[0] == change.AnyKey {
			for i, x := range c {
				c[i] = under(x, path[1:], f)
			}
		}
	}
	return v
}

// pairs calls f with the values path selects in o and c at the same
// places, replacing o's by what f returns.
func pairs(o, c any, path []string, f func(o, c any) any) any {
	if len(path) == 0 {
		return f(o, c)
	}
	switch ov := o.(type) {
	case map[string]any:
		cv, ok := c.(map[string]any)
		if !ok {
			return o
		}
		for k, x := range ov {
			if path[0] != change.AnyKey && k != path[0] {
				continue
			}
			if y, ok := cv[k]; ok {
				ov[k] = pairs(x, y, path[1:], f)
			}
		}
	case []any:
		cv, ok := c.([]any)
		if !ok || path[0] != change.AnyKey {
			return o
		}
		for i := range min(len(ov), len(cv)) {
			ov[i] = pairs(ov[i], cv[i], path[1:], f)
		}
	}
	return o
}

// mapScalars returns v with every scalar (string, number, bool) under it
// replaced by f of it, in place; null stays null.
func mapScalars(v any, f func(any) any) any {
	switch c := v.(type) {
	case map[string]any:
		for k, x := range c {
			c[k] = mapScalars(x, f)
		}
		return c
	case []any:
		for i, x := range c {
			c[i] = mapScalars(x, f)
		}
		return c
	case nil:
		return nil
	}
	return f(v)
}

func isScalar(v any) bool {
	switch v.(type) {
	case map[string]any, []any, nil:
		return false
	}
	return true
}
