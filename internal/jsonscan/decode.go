package jsonscan

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
	"unsafe"
)

// maxDepth bounds the nesting Decode follows, as encoding/json's does.
const maxDepth = 10000

// errDepth is Decode's error for JSON nested deeper than maxDepth.
var errDepth = errors.New("json: exceeded max depth")

// Decode decodes data, one JSON value, as k8s.io/apimachinery's
// json.Unmarshal does into an any: objects as map[string]any, arrays as
// []any, integral numbers (no decimal point) that fit as int64, other
// numbers as float64, strings as encoding/json unquotes them (invalid
// UTF-8 and lone surrogates become U+FFFD), a repeated key's last value.
// It checks all of data and returns an error where that json.Unmarshal
// does. It is one pass over the bytes, where json.Unmarshal makes two
// (it checks all of its input before it decodes), and a string without
// escapes is copied as it is, for speed on objects with long strings
// (BenchmarkDecode). FuzzDecode holds it to json.Unmarshal.
func Decode(data []byte) (any, error) {
	return decode(data, false)
}

// DecodeShared is Decode whose strings without escapes share data's bytes
// instead of copying them: data must never change afterwards, and any of
// the strings keeps all of data in memory. For immutable bytes decoded
// into a value that lives briefly (a cached object's JSON, decoded for one
// change's evaluation).
func DecodeShared(data []byte) (any, error) {
	return decode(data, true)
}

func decode(data []byte, share bool) (any, error) {
	d := decoder{data: data, share: share}
	v, err := d.value(skipSpace(data, 0), 0)
	if err != nil {
		return nil, err
	}
	if skipSpace(data, d.end) != len(data) {
		return nil, d.syntax(skipSpace(data, d.end), "after top-level value")
	}
	return v, nil
}

// DecodeObject is Decode of a JSON object, or of null (a nil map, as
// json.Unmarshal leaves a map given null); any other value is an error.
func DecodeObject(data []byte) (map[string]any, error) {
	return asObject(Decode(data))
}

// DecodeObjectShared is DecodeObject sharing data's bytes, as DecodeShared.
func DecodeObjectShared(data []byte) (map[string]any, error) {
	return asObject(DecodeShared(data))
}

func asObject(v any, err error) (map[string]any, error) {
	if err != nil {
		return nil, err
	}
	switch m := v.(type) {
	case map[string]any:
		return m, nil
	case nil:
		return nil, nil
	}
	return nil, fmt.Errorf("json: cannot unmarshal %s into a map", kindOf(v))
}

func kindOf(v any) string {
	switch v.(type) {
	case []any:
		return "array"
	case string:
		return "string"
	case bool:
		return "bool"
	}
	return "number"
}

// decoder holds the input; end is where the last value decoded ends.
type decoder struct {
	data  []byte
	end   int
	share bool // strings share data's bytes (DecodeShared)
}

func (d *decoder) syntax(i int, where string) error {
	if i >= len(d.data) {
		return errors.New("json: unexpected end of JSON input")
	}
	return fmt.Errorf("json: invalid character %q %s at offset %d", d.data[i], where, i)
}

// value decodes the value at i (white space skipped) and sets d.end
// after it.
func (d *decoder) value(i, depth int) (any, error) {
	data := d.data
	if i >= len(data) {
		return nil, d.syntax(i, "looking for beginning of value")
	}
	switch c := data[i]; {
	case c == '{':
		return d.object(i, depth+1)
	case c == '[':
		return d.array(i, depth+1)
	case c == '"':
		s, end, err := d.str(i)
		d.end = end
		return s, err
	case c == '-' || ('0' <= c && c <= '9'):
		return d.number(i)
	case c == 't':
		return true, d.literal(i, "true")
	case c == 'f':
		return false, d.literal(i, "false")
	case c == 'n':
		return nil, d.literal(i, "null")
	}
	return nil, d.syntax(i, "looking for beginning of value")
}

func (d *decoder) literal(i int, lit string) error {
	if len(d.data)-i < len(lit) || string(d.data[i:i+len(lit)]) != lit {
		for k := 0; k < len(lit); k++ {
			if i+k >= len(d.data) || d.data[i+k] != lit[k] {
				return d.syntax(i+k, "in literal "+lit)
			}
		}
	}
	d.end = i + len(lit)
	return nil
}

func (d *decoder) object(i, depth int) (any, error) {
	if depth > maxDepth {
		return nil, errDepth
	}
	data := d.data
	m := map[string]any{}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		d.end = i + 1
		return m, nil
	}
	for {
		if i >= len(data) || data[i] != '"' {
			return nil, d.syntax(i, "looking for beginning of object key string")
		}
		key, end, err := d.str(i)
		if err != nil {
			return nil, err
		}
		i = skipSpace(data, end)
		if i >= len(data) || data[i] != ':' {
			return nil, d.syntax(i, "after object key")
		}
		v, err := d.value(skipSpace(data, i+1), depth)
		if err != nil {
			return nil, err
		}
		m[key] = v
		var done bool
		if i, done, err = d.next('}', "after object key:value pair"); err != nil || done {
			return m, err
		}
	}
}

func (d *decoder) array(i, depth int) (any, error) {
	if depth > maxDepth {
		return nil, errDepth
	}
	data := d.data
	a := []any{}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == ']' {
		d.end = i + 1
		return a, nil
	}
	for {
		v, err := d.value(i, depth)
		if err != nil {
			return nil, err
		}
		a = append(a, v)
		var done bool
		if i, done, err = d.next(']', "after array element"); err != nil || done {
			return a, err
		}
	}
}

// next reads what follows an object's or array's element (which ends at
// d.end): a comma, and i is where the next element starts, or the closing
// bracket, and the object or array is done (d.end after it).
func (d *decoder) next(closing byte, where string) (i int, done bool, err error) {
	i = skipSpace(d.data, d.end)
	if i >= len(d.data) {
		return 0, false, d.syntax(i, "")
	}
	switch d.data[i] {
	case ',':
		return skipSpace(d.data, i+1), false, nil
	case closing:
		d.end = i + 1
		return 0, true, nil
	}
	return 0, false, d.syntax(i, where)
}

// str decodes the string whose quote is at i; end is after its closing
// quote. A string of printable ASCII and valid UTF-8 without escapes (the
// common case) is copied as it is; any other goes through encoding/json's
// unquoting, so that escapes, lone surrogates and invalid UTF-8 come out
// as json.Unmarshal has them.
func (d *decoder) str(i int) (s string, end int, err error) {
	data := d.data
	plain := true
	for j := i + 1; j < len(data); j++ {
		for j+8 <= len(data) && !special8(binary.LittleEndian.Uint64(data[j:])) {
			j += 8
		}
		if j >= len(data) {
			break
		}
		switch c := data[j]; {
		case c == '"':
			if plain || utf8.Valid(data[i+1:j]) {
				if d.share && j > i+1 {
					return unsafe.String(&data[i+1], j-i-1), j + 1, nil
				}
				return string(data[i+1 : j]), j + 1, nil
			}
			return d.unquote(i, j+1)
		case c == '\\':
			if j+1 >= len(data) {
				return "", 0, d.syntax(len(data), "")
			}
			j++ // an escaped quote does not end the string
			end, err := d.stringEnd(j + 1)
			if err != nil {
				return "", 0, err
			}
			return d.unquote(i, end)
		case c < 0x20:
			return "", 0, d.syntax(j, "in string literal")
		case c >= utf8.RuneSelf:
			plain = false
		}
	}
	return "", 0, d.syntax(len(data), "")
}

// special8 reports whether any of the 8 bytes of w is one a string's
// scan must look at: a quote, a backslash, a control character or a byte
// of a multi-byte UTF-8 sequence (each test is the classic "has a zero
// byte" of a word, exact as to whether there is one).
func special8(w uint64) bool {
	const lsb, msb = 0x0101010101010101, 0x8080808080808080
	quote := w ^ (lsb * '"')
	backslash := w ^ (lsb * '\\')
	control := (w - lsb*0x20) & ^w
	return ((quote-lsb)&^quote|(backslash-lsb)&^backslash|control|w)&msb != 0
}

// PlainASCII reports whether s goes into JSON as it is, between quotes:
// printable ASCII without a quote or a backslash (encoding/json writes
// DEL as it is too), what no JSON encoder escapes. It looks at 8 bytes at
// a time.
func PlainASCII(s string) bool {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		w := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		if special8(w) {
			return false
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// stringEnd returns the index after the closing quote of a string whose
// bytes from j on are still to scan, checking its escapes and bytes.
func (d *decoder) stringEnd(j int) (int, error) {
	data := d.data
	for ; j < len(data); j++ {
		switch c := data[j]; {
		case c == '"':
			return j + 1, nil
		case c == '\\':
			j++
			if j >= len(data) {
				return 0, d.syntax(j, "")
			}
		case c < 0x20:
			return 0, d.syntax(j, "in string literal")
		}
	}
	return 0, d.syntax(len(data), "")
}

// unquote decodes the string data[i:end] (quotes included) with
// encoding/json, which checks its escapes.
func (d *decoder) unquote(i, end int) (string, int, error) {
	var s string
	if err := json.Unmarshal(d.data[i:end], &s); err != nil {
		return "", 0, err
	}
	return s, end, nil
}

// number decodes the number at i as apimachinery's json does: int64 when
// it has no decimal point and fits, float64 otherwise.
func (d *decoder) number(i int) (any, error) {
	data := d.data
	j := i
	if data[j] == '-' {
		j++
	}
	switch {
	case j < len(data) && data[j] == '0':
		j++
	case j < len(data) && '1' <= data[j] && data[j] <= '9':
		for j < len(data) && '0' <= data[j] && data[j] <= '9' {
			j++
		}
	default:
		return nil, d.syntax(j, "in numeric literal")
	}
	point := false
	if j < len(data) && data[j] == '.' {
		point = true
		j++
		k := j
		for j < len(data) && '0' <= data[j] && data[j] <= '9' {
			j++
		}
		if j == k {
			return nil, d.syntax(j, "after decimal point in numeric literal")
		}
	}
	if j < len(data) && (data[j] == 'e' || data[j] == 'E') {
		j++
		if j < len(data) && (data[j] == '+' || data[j] == '-') {
			j++
		}
		k := j
		for j < len(data) && '0' <= data[j] && data[j] <= '9' {
			j++
		}
		if j == k {
			return nil, d.syntax(j, "in exponent of numeric literal")
		}
	}
	d.end = j
	s := string(data[i:j])
	if !point {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return n, nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return nil, fmt.Errorf("json: cannot unmarshal number %s into a float64", s)
	}
	return f, nil
}
