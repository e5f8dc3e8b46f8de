package rules

import (
	"math"
	"reflect"
)

// Objects are JSON-like values: map[string]any, []any, string, bool, nil
// and numbers. Numbers come as int64 and float64 from Kubernetes'
// unstructured decoder, as float64 from encoding/json and as int from YAML,
// so every comparison here is numeric across Go types: 1, int64(1) and
// float64(1) are equal; 1 and "1" are not.

// number is a normalised number: an int64 or a float64.
type number struct {
	i     int64
	f     float64
	isInt bool
}

// toNumber returns v as a number when it is one.
func toNumber(v any) (number, bool) {
	switch x := v.(type) {
	case int64:
		return number{i: x, isInt: true}, true
	case float64:
		return number{f: x}, true
	case int:
		return number{i: int64(x), isInt: true}, true
	case int32:
		return number{i: int64(x), isInt: true}, true
	case int16:
		return number{i: int64(x), isInt: true}, true
	case int8:
		return number{i: int64(x), isInt: true}, true
	case uint8:
		return number{i: int64(x), isInt: true}, true
	case uint16:
		return number{i: int64(x), isInt: true}, true
	case uint32:
		return number{i: int64(x), isInt: true}, true
	case uint64:
		if x <= math.MaxInt64 {
			return number{i: int64(x), isInt: true}, true
		}
		return number{f: float64(x)}, true
	case uint:
		if uint64(x) <= math.MaxInt64 {
			return number{i: int64(x), isInt: true}, true
		}
		return number{f: float64(x)}, true
	case float32:
		return number{f: float64(x)}, true
	}
	return number{}, false
}

// equalNumbers compares two numbers exactly: an integer equals a float
// only when the float is that integer.
func equalNumbers(a, b number) bool {
	switch {
	case a.isInt && b.isInt:
		return a.i == b.i
	case !a.isInt && !b.isInt:
		return a.f == b.f
	case a.isInt:
		return floatIsInt(b.f, a.i)
	default:
		return floatIsInt(a.f, b.i)
	}
}

func floatIsInt(f float64, i int64) bool {
	if f != math.Trunc(f) || f < -(1<<63) || f >= 1<<63 {
		return false
	}
	return int64(f) == i
}

// equal reports whether a and b are the same JSON value, comparing numbers
// by value whatever their Go types.
func equal(a, b any) bool {
	switch x := a.(type) {
	case string:
		y, ok := b.(string)
		return ok && x == y
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, xv := range x {
			yv, ok := y[k]
			if !ok || !equal(xv, yv) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equal(x[i], y[i]) {
				return false
			}
		}
		return true
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case nil:
		return b == nil
	}
	if na, ok := toNumber(a); ok {
		nb, ok := toNumber(b)
		return ok && equalNumbers(na, nb)
	}
	return reflect.DeepEqual(a, b)
}

// listIndex parses a JSON Pointer list token.
func listIndex(tok string, n int) (int, bool) {
	if tok == "" || len(tok) > 10 || (len(tok) > 1 && tok[0] == '0') {
		return 0, false
	}
	i := 0
	for j := 0; j < len(tok); j++ {
		c := tok[j]
		if c < '0' || c > '9' {
			return 0, false
		}
		i = i*10 + int(c-'0')
	}
	return i, i < n
}
