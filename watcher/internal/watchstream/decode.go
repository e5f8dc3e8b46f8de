package watchstream

import (
	"bytes"
	"fmt"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/jsonscan"
)

// DecodeProjected decodes of raw, an object's JSON, what p keeps: all of
// it when p is Full, otherwise its metadata and the subtrees its paths
// name, each subtree decoded as apimachinery's json.Unmarshal does
// (integral numbers int64; jsonscan.Decode). What it skips is scanned,
// never built (its strings and brackets are checked, its numbers and
// literals are not): a CRD whose rules read its group and names is not
// decoded down its schemas. Any projection of p's paths gives the same
// of the result as of the whole object decoded.
func DecodeProjected(p change.Projection, raw []byte) (map[string]any, error) {
	if p.Full {
		return jsonscan.DecodeObject(raw)
	}
	top, err := fieldsOf(raw)
	if err != nil {
		return nil, err
	}
	m := map[string]any{}
	if meta, ok := top["metadata"]; ok {
		v, err := jsonscan.DecodeObject(meta)
		if err != nil {
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

// fieldsOf returns the fields of the JSON object raw, each value's bytes
// found, not decoded (a repeated key's last); JSON null has none.
func fieldsOf(raw []byte) (map[string][]byte, error) {
	if string(bytes.TrimSpace(raw)) == "null" {
		return nil, nil
	}
	fields := map[string][]byte{}
	err := jsonscan.EachKey(raw, func(key string, value []byte) error {
		fields[key] = value
		return nil
	})
	return fields, err
}

// decodePath decodes into dst what path selects of src, a JSON object's
// fields: the value at its end, or the first value on the way that is not
// an object.
func decodePath(src map[string][]byte, dst map[string]any, path []string) error {
	for i, name := range path {
		raw, ok := src[name]
		if !ok {
			return nil
		}
		if i < len(path)-1 && isJSONObject(raw) {
			if _, done := dst[name].(map[string]any); !done && dst[name] != nil {
				return nil // decoded whole by a shorter path
			}
			next, err := fieldsOf(raw)
			if err != nil {
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
		v, err := jsonscan.Decode(raw)
		if err != nil {
			return err
		}
		dst[name] = v
		return nil
	}
	return nil
}

// isJSONObject reports whether raw is a JSON object.
func isJSONObject(raw []byte) bool {
	for _, c := range raw {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return c == '{'
	}
	return false
}
