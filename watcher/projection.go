package watcher

import (
	"unique"

	"github.com/fieldwatch/fieldwatch/change"
)

// The watcher's cache keeps, of each object, what its change.Projection
// says, and always the identity (name, namespace, uid, resourceVersion)
// and metadata.generation, creationTimestamp, deletionTimestamp and
// labels, as well as the metadata.managedFields entries, each reduced to
// manager, operation, subresource, time and change.FieldsHash of its field
// set (fieldsHash): who wrote what last.

// alwaysKeptMeta are the metadata fields every projection keeps besides the
// identity and managedFields.
var alwaysKeptMeta = []string{"generation", "creationTimestamp", "deletionTimestamp", "labels"}

// identityMeta are kept as strings on Object, not in its JSON.
var identityMeta = map[string]bool{"name": true, "namespace": true, "uid": true, "resourceVersion": true}

// project returns the part of obj that p keeps as a new map. It does not
// modify obj but shares its leaves, so obj must not be modified afterwards
// either. apiVersion, kind and the identity fields are left out: Object
// holds them.
func project(p change.Projection, obj map[string]any) map[string]any {
	out := make(map[string]any, 4)
	meta, _ := obj["metadata"].(map[string]any)
	if p.Full {
		for k, v := range obj {
			if k != "apiVersion" && k != "kind" && k != "metadata" {
				out[k] = v
			}
		}
		outMeta := make(map[string]any, len(meta))
		for k, v := range meta {
			if !identityMeta[k] && k != "managedFields" && k != "selfLink" {
				outMeta[k] = v
			}
		}
		keepManagedFields(meta, outMeta)
		if len(outMeta) > 0 {
			out["metadata"] = outMeta
		}
		return out
	}
	out["metadata"] = map[string]any{}
	for _, k := range alwaysKeptMeta {
		copyPath(obj, out, []string{"metadata", k})
	}
	for _, path := range p.Paths {
		copyPath(obj, out, path)
	}
	delete(out, "apiVersion")
	delete(out, "kind")
	// A path may have copied obj's own metadata map (path "metadata"):
	// rebuild it rather than delete from it.
	kept, _ := out["metadata"].(map[string]any)
	outMeta := make(map[string]any, len(kept))
	for k, v := range kept {
		if !identityMeta[k] && k != "managedFields" && k != "selfLink" && v != nil {
			outMeta[k] = v
		}
	}
	keepManagedFields(meta, outMeta)
	if len(outMeta) > 0 {
		out["metadata"] = outMeta
	} else {
		delete(out, "metadata")
	}
	return out
}

// copyPath copies the subtree of src at path into dst, creating the maps on
// the way. A path that ends early at a non-map value copies that value.
func copyPath(src, dst map[string]any, path []string) {
	for i, name := range path {
		v, ok := src[name]
		if !ok {
			return
		}
		next, isMap := v.(map[string]any)
		if i == len(path)-1 || !isMap {
			dst[name] = v
			return
		}
		d, ok := dst[name].(map[string]any)
		if !ok {
			d = map[string]any{}
			dst[name] = d
		}
		src, dst = next, d
	}
}

// keepManagedFields copies the managedFields entries of meta into out,
// each reduced to manager, operation, subresource, time and fieldsHash (the
// change.FieldsHash of its fieldsV1): enough to tell which
// writer changed between two versions of an object, at a fraction of the
// field sets' size.
func keepManagedFields(meta, out map[string]any) {
	entries, _ := meta["managedFields"].([]any)
	if len(entries) == 0 {
		return
	}
	reduced := make([]any, 0, len(entries))
	for _, e := range entries {
		entry, ok := e.(map[string]any)
		if !ok {
			continue
		}
		r := make(map[string]any, 5)
		for _, k := range []string{"manager", "operation", "subresource", "time"} {
			if v, ok := entry[k]; ok {
				r[k] = v
			}
		}
		if f, ok := entry["fieldsV1"]; ok {
			r["fieldsHash"] = change.FieldsHash(f)
		}
		reduced = append(reduced, r)
	}
	out["managedFields"] = reduced
}

// intern returns the handle of namespace s, so that the thousands of
// objects of one namespace share one string; the zero handle for "".
func intern(s string) unique.Handle[string] {
	if s == "" {
		return unique.Handle[string]{}
	}
	return unique.Make(s)
}
