package impact

import (
	"fmt"
	"strconv"
	"strings"
)

// wildcard is the segment of a check's field path that matches any key or
// index ([*]).
const wildcard = "\x00*"

// splitField splits a check's field path (package diff's rules path syntax:
// spec.items[*].name, spec["a.b"]) into segments.
func splitField(path string) ([]string, error) {
	var segs []string
	for i := 0; i < len(path); {
		switch path[i] {
		case '.':
			i++
		case '[':
			switch {
			case strings.HasPrefix(path[i:], "[*]"):
				segs = append(segs, wildcard)
				i += 3
			case strings.HasPrefix(path[i:], `["`):
				q, err := strconv.QuotedPrefix(path[i+1:])
				if err != nil {
					return nil, fmt.Errorf("field %q: %w", path, err)
				}
				name, _ := strconv.Unquote(q)
				segs = append(segs, name)
				i += 1 + len(q)
				if i >= len(path) || path[i] != ']' {
					return nil, fmt.Errorf("field %q: missing ]", path)
				}
				i++
			default:
				return nil, fmt.Errorf("field %q: unexpected [ at %d", path, i)
			}
		default:
			j := i
			for j < len(path) && path[j] != '.' && path[j] != '[' {
				j++
			}
			segs = append(segs, path[i:j])
			i = j
		}
	}
	return segs, nil
}

// splitErrorPath splits a field path as the apiserver reports it in errors
// and pruned fields (spec.items[2].name, spec.labels[key], spec.labels.key)
// into segments. A key containing dots or brackets splits into more
// segments than it is; such errors then match no check and are reported
// as invalid.
func splitErrorPath(path string) []string {
	var segs []string
	for i := 0; i < len(path); {
		switch path[i] {
		case '.':
			i++
		case '[':
			j := strings.IndexByte(path[i:], ']')
			if j < 0 {
				return append(segs, path[i+1:])
			}
			segs = append(segs, path[i+1:i+j])
			i += j + 1
		default:
			j := i
			for j < len(path) && path[j] != '.' && path[j] != '[' {
				j++
			}
			segs = append(segs, path[i:j])
			i = j
		}
	}
	return segs
}
