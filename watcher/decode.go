package watcher

import (
	"encoding/json"
	"fmt"

	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/fieldwatch/fieldwatch/change"
)

// rawObject is an object as a watch stream carries it, JSON not decoded
// yet: the informer decodes of it only what the projection keeps
// (decodeProjected).
type rawObject []byte

// decodeProjected decodes of raw, an object's JSON, what p keeps: all of
// it when p is Full, otherwise its metadata and the subtrees its paths
// name, each subtree decoded as utiljson does (integral numbers int64).
// What it skips is scanned, never built: a CRD whose rules read its group
// and names is not decoded down its schemas. project gives the same of
// the result as of the whole object.
func decodeProjected(p change.Projection, raw []byte) (map[string]any, error) {
	m := map[string]any{}
	if p.Full {
		if err := utiljson.Unmarshal(raw, &m); err != nil {
			return nil, err
		}
		return m, nil
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, err
	}
	if meta, ok := top["metadata"]; ok {
		var v map[string]any
		if err := utiljson.Unmarshal(meta, &v); err != nil {
			return nil, fmt.Errorf("metadata: %w", err)
		}
		m["metadata"] = v
	}
	for _, path := range p.Paths {
		if len(path) > 0 && path[0] == "metadata" {
			continue // decoded whole
		}
		if err := decodePath(top, m, path); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// decodePath decodes into dst what path selects of src, a JSON object's
// fields: the value at its end, or the first value on the way that is not
// an object.
func decodePath(src map[string]json.RawMessage, dst map[string]any, path []string) error {
	for i, name := range path {
		raw, ok := src[name]
		if !ok {
			return nil
		}
		if i < len(path)-1 && isJSONObject(raw) {
			if _, done := dst[name].(map[string]any); !done && dst[name] != nil {
				return nil // decoded whole by a shorter path
			}
			var next map[string]json.RawMessage
			if err := json.Unmarshal(raw, &next); err != nil {
				return err
			}
			d, ok := dst[name].(map[string]any)
			if !ok {
				d = map[string]any{}
				dst[name] = d
			}
			src, dst = next, d
			continue
		}
		var v any
		if err := utiljson.Unmarshal(raw, &v); err != nil {
			return err
		}
		dst[name] = v
		return nil
	}
	return nil
}

// isJSONObject reports whether raw is a JSON object.
func isJSONObject(raw json.RawMessage) bool {
	for _, c := range raw {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return c == '{'
	}
	return false
}
