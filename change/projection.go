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
// The watcher's restart baseline stores projections as JSON with the keys
// Full and Paths: the field names are part of that file format.
type Projection struct {
	Full  bool
	Paths [][]string
}

// Equal reports whether p and q keep the same fields (Paths compared as
// sets).
func (p Projection) Equal(q Projection) bool { return p.key() == q.key() }

// key is a canonical string for the projection.
func (p Projection) key() string {
	if p.Full {
		return "*"
	}
	paths := make([]string, len(p.Paths))
	for i, path := range p.Paths {
		paths[i] = strings.Join(path, "\x00")
	}
	slices.Sort(paths)
	return strings.Join(slices.Compact(paths), "\x01")
}

// Union returns a projection that keeps what either keeps.
func (p Projection) Union(q Projection) Projection {
	if p.Full || q.Full {
		return Projection{Full: true}
	}
	return Projection{Paths: append(slices.Clone(p.Paths), q.Paths...)}
}

// Minimal returns p with its Paths sorted and without duplicates nor paths
// below another: the same fields, written the shortest way.
func (p Projection) Minimal() Projection {
	if p.Full {
		return Projection{Full: true}
	}
	if len(p.Paths) == 0 {
		return Projection{}
	}
	sorted := slices.Clone(p.Paths)
	slices.SortFunc(sorted, slices.Compare)
	out := sorted[:0:0]
	for _, path := range sorted {
		if len(out) > 0 && hasPrefix(path, out[len(out)-1]) {
			continue
		}
		out = append(out, path)
	}
	return Projection{Paths: out}
}

// String renders p for logs: "full" or "spec.size,status".
func (p Projection) String() string {
	if p.Full {
		return "full"
	}
	parts := make([]string, len(p.Paths))
	for i, path := range p.Paths {
		parts[i] = strings.Join(path, ".")
	}
	return strings.Join(parts, ",")
}

// hasPrefix reports whether path starts with prefix (field by field).
func hasPrefix(path, prefix []string) bool {
	return len(prefix) <= len(path) && slices.Equal(path[:len(prefix)], prefix)
}
