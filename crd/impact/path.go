package impact

import (
	"fmt"
	"strings"

	"github.com/fieldwatch/fieldwatch/internal/fieldpath"
)

// wildcard is the segment of a check's field path that matches any key or
// index ([*]).
const wildcard = "\x00*"

// splitField splits a check's field path (package diff writes it in the
// rules path syntax, internal/fieldpath: spec.items[*].name,
// spec["a.b"]) into segments: map keys, and wildcard for [*]. "" is the
// object root, with no segment. A check names no list index nor
// [key=value]: such a path is an error.
func splitField(path string) ([]string, error) {
	if path == "" {
		return nil, nil
	}
	parsed, err := fieldpath.Parse(path)
	if err != nil {
		return nil, fmt.Errorf("field %q: %w", path, err)
	}
	segs := make([]string, len(parsed))
	for i, s := range parsed {
		switch s.Kind {
		case fieldpath.Field:
			segs[i] = s.Name
		case fieldpath.All:
			segs[i] = wildcard
		default:
			return nil, fmt.Errorf("field %q: a check's field has map keys and [*] only", path)
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
