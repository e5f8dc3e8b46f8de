package jsonscan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// ErrSyntax is the error of data that is not a JSON object.
var ErrSyntax = errors.New("not a JSON object")

// EachKey calls fn with each key of the JSON object data and the bytes
// of its value, in order, finding where each value ends without decoding
// it: large values (a payload's changes, an event's object) cost one pass
// over their bytes.
// It returns fn's first error, or an error when data is not one JSON
// object (what it checks: the object's own punctuation, strings and the
// nesting of brackets; values are checked by whoever decodes them).
func EachKey(data []byte, fn func(key string, value []byte) error) error {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return ErrSyntax
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return trailing(data, i+1)
	}
	for {
		if i >= len(data) || data[i] != '"' {
			return ErrSyntax
		}
		end, err := skipString(data, i)
		if err != nil {
			return err
		}
		key, err := Key(data[i:end])
		if err != nil {
			return err
		}
		i = skipSpace(data, end)
		if i >= len(data) || data[i] != ':' {
			return ErrSyntax
		}
		i = skipSpace(data, i+1)
		vend, err := skipValue(data, i)
		if err != nil {
			return err
		}
		if err := fn(key, data[i:vend]); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		i = skipSpace(data, vend)
		if i >= len(data) {
			return ErrSyntax
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			return trailing(data, i+1)
		default:
			return ErrSyntax
		}
	}
}

// Key returns the string of the JSON string s (quotes included).
func Key(s []byte) (string, error) {
	for _, c := range s[1 : len(s)-1] {
		if c == '\\' {
			var k string
			if err := json.Unmarshal(s, &k); err != nil {
				return "", err
			}
			return k, nil
		}
	}
	return string(s[1 : len(s)-1]), nil
}

func trailing(data []byte, i int) error {
	if skipSpace(data, i) != len(data) {
		return ErrSyntax
	}
	return nil
}

func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the index after the JSON string that starts at i.
// It finds each quote with bytes.IndexByte, which looks at many bytes at
// a time, and tells an escaped one by the backslashes before it
// (BenchmarkAdmissionReview spent most of its time here byte by byte;
// FuzzSkipString holds it to that loop).
func skipString(data []byte, i int) (int, error) {
	for j := i + 1; j < len(data); {
		k := bytes.IndexByte(data[j:], '"')
		if k < 0 {
			break
		}
		q := j + k
		escaped := false
		for p := q - 1; p > i && data[p] == '\\'; p-- {
			escaped = !escaped
		}
		if !escaped {
			return q + 1, nil
		}
		j = q + 1
	}
	return 0, ErrSyntax
}

// skipValue returns the index after the JSON value that starts at i.
func skipValue(data []byte, i int) (int, error) {
	if i >= len(data) {
		return 0, ErrSyntax
	}
	switch data[i] {
	case '"':
		return skipString(data, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(data); j++ {
			switch data[j] {
			case '"':
				end, err := skipString(data, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, ErrSyntax
	}
	// A number, true, false or null: up to the next delimiter.
	j := i
	for j < len(data) {
		switch data[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			if j == i {
				return 0, ErrSyntax
			}
			return j, nil
		}
		j++
	}
	if j == i {
		return 0, ErrSyntax
	}
	return j, nil
}
