package change

import (
	"slices"
	"strings"
)

// Projection says which parts of the objects of a resource are read (by
// the rules) and therefore kept (by the watcher's cache). Full means
// everything; otherwise Paths are field-name prefixes ({"spec", "size"},
// {"metadata", "annotations"}) whose whole subtrees are needed.
//
// What Paths never need to list, because the watcher keeps it for every
// object: apiVersion, kind, metadata name, namespace, uid,
// resourceVersion, generation, creationTimestamp, deletionTimestamp and
// labels, and the metadata.managedFields entries, each reduced to
// manager, operation, subresource, time and the FieldsHash of its field
// set (who wrote what last: the payload's actor comes from them).
//
// Hashed are the parts whose values payloads redact (a Secret's data, a
// rule's redact paths): the cache keeps them, but the watcher's restart
// baseline stores a salted hash of each value under them instead of the
// value (map keys are kept), so that no secret rests on disk. A path is
// field names, "*" standing for every key of a map or item of a list.
//
// The watcher's restart baseline stores projections as JSON with the keys
// Full, Paths and Hashed: the field names are part of that file format.
type Projection struct {
	Full   bool
	Paths  [][]string
	Hashed [][]string `json:",omitempty"`
}

// AnyKey in a Hashed path stands for every key of a map or item of a
// list.
const AnyKey = "*"

// Equal reports whether p and q keep the same fields (Paths compared as
// sets).
func (p Projection) Equal(q Projection) bool { return p.key() == q.key() }

// key is a canonical string for the projection.
func (p Projection) key() string {
	hashed := ""
	if len(p.Hashed) > 0 {
		hashed = "\x02" + pathsKey(p.Hashed)
	}
	if p.Full {
		return "*" + hashed
	}
	return pathsKey(p.Paths) + hashed
}

// pathsKey is a canonical string for a set of paths.
func pathsKey(paths [][]string) string {
	keys := make([]string, len(paths))
	for i, path := range paths {
		keys[i] = strings.Join(path, "\x00")
	}
	slices.Sort(keys)
	return strings.Join(slices.Compact(keys), "\x01")
}

// Union returns a projection that keeps what either keeps, and hashes
// what either hashes.
func (p Projection) Union(q Projection) Projection {
	var hashed [][]string
	if len(p.Hashed)+len(q.Hashed) > 0 {
		hashed = append(slices.Clone(p.Hashed), q.Hashed...)
	}
	if p.Full || q.Full {
		return Projection{Full: true, Hashed: hashed}
	}
	return Projection{Paths: append(slices.Clone(p.Paths), q.Paths...), Hashed: hashed}
}

// Minimal returns p with its Paths sorted and without duplicates nor paths
// below another: the same fields, written the shortest way.
// Hashed paths are minimised the same way (a "*" is not resolved: a path
// under a "*" of another stays).
func (p Projection) Minimal() Projection {
	return Projection{Full: p.Full, Paths: minimal(p.Paths, p.Full), Hashed: minimal(p.Hashed, false)}
}

// minimal returns paths sorted, without duplicates nor paths below
// another; nil for none (or when all is set).
func minimal(paths [][]string, all bool) [][]string {
	if all || len(paths) == 0 {
		return nil
	}
	sorted := slices.Clone(paths)
	slices.SortFunc(sorted, slices.Compare)
	out := sorted[:0:0]
	for _, path := range sorted {
		if len(out) > 0 && hasPrefix(path, out[len(out)-1]) {
			continue
		}
		out = append(out, path)
	}
	return out
}

// String renders p for logs: "full" or "spec.size,status", then
// " hashed data.*" when it hashes values.
func (p Projection) String() string {
	s := "full"
	if !p.Full {
		s = joinPaths(p.Paths)
	}
	if len(p.Hashed) > 0 {
		s += " hashed " + joinPaths(p.Hashed)
	}
	return s
}

func joinPaths(paths [][]string) string {
	parts := make([]string, len(paths))
	for i, path := range paths {
		parts[i] = strings.Join(path, ".")
	}
	return strings.Join(parts, ",")
}

// hasPrefix reports whether path starts with prefix (field by field).
func hasPrefix(path, prefix []string) bool {
	return len(prefix) <= len(path) && slices.Equal(path[:len(prefix)], prefix)
}
