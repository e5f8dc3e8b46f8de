package rules

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strconv"

	"github.com/fieldwatch/fieldwatch/internal/jsonscan"
)

// appendJSON appends v as compact JSON, as encoding/json would encode it
// with HTML escaping off (so "<redacted>" stays readable) and map keys
// sorted. JSON-like values (the types objects are made of) are encoded
// directly rather than by encoding/json's reflection, for speed on the
// payload path (BenchmarkPayloadJSON); anything else goes through
// encoding/json. FuzzAppendJSON holds it to encoding/json's bytes.
func appendJSON(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case string:
		return appendJSONString(b, x), nil
	case bool:
		return strconv.AppendBool(b, x), nil
	case int64:
		return strconv.AppendInt(b, x, 10), nil
	case int:
		return strconv.AppendInt(b, int64(x), 10), nil
	case float64:
		if a := math.Abs(x); x == 0 || (a >= 1e-6 && a < 1e21) {
			return strconv.AppendFloat(b, x, 'f', -1, 64), nil
		}
	case map[string]any:
		if x == nil {
			return append(b, "null"...), nil
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, k)
			b = append(b, ':')
			var err error
			if b, err = appendJSON(b, x[k]); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	case []any:
		if x == nil {
			return append(b, "null"...), nil
		}
		b = append(b, '[')
		for i, item := range x {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendJSON(b, item); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	}
	return appendStdJSON(b, v)
}

// appendStdJSON appends v encoded by encoding/json without HTML escaping.
func appendStdJSON(b []byte, v any) ([]byte, error) {
	buf := bytes.NewBuffer(b)
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	out := buf.Bytes()
	return out[:len(out)-1], nil // Encode's newline
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	if !jsonscan.PlainASCII(s) {
		out, _ := appendStdJSON(b, s) // strings always encode
		return out
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
