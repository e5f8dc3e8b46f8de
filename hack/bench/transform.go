package main

import (
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/fieldwatch/fieldwatch/change"
)

// keptMeta are the metadata fields the watcher's cache keeps of every
// object besides managedFields (see package watcher's projection.go).
var keptMeta = []string{"name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp", "labels"}

// projectTransform is the fair peer's transform: a client-go
// TransformFunc that keeps of each object what fieldwatch's cache keeps
// under a rule reading paths (dotted, "data.key1"): its apiVersion, kind,
// the metadata of keptMeta, each managedFields entry reduced to its
// manager, operation, subresource, time and a hash of its field set, and
// the subtrees at paths.
func projectTransform(paths []string) cache.TransformFunc {
	var split [][]string
	for _, p := range paths {
		split = append(split, strings.Split(p, "."))
	}
	return func(obj any) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return obj, nil // a tombstone
		}
		meta, _ := u.Object["metadata"].(map[string]any)
		outMeta := make(map[string]any, len(keptMeta)+1)
		for _, k := range keptMeta {
			if v, ok := meta[k]; ok {
				outMeta[k] = v
			}
		}
		if entries, _ := meta["managedFields"].([]any); len(entries) > 0 {
			reduced := make([]any, 0, len(entries))
			for _, e := range entries {
				entry, _ := e.(map[string]any)
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
			outMeta["managedFields"] = reduced
		}
		out := map[string]any{"apiVersion": u.Object["apiVersion"], "kind": u.Object["kind"], "metadata": outMeta}
		for _, path := range split {
			copyPath(u.Object, out, path)
		}
		return &unstructured.Unstructured{Object: out}, nil
	}
}

// copyPath copies the subtree of src at path into dst, making the maps
// on the way.
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
