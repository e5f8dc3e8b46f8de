package payloadtest

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/fieldwatch/fieldwatch/payload"
)

// Paths returns the JSON key paths of payload.Payload in field order:
// "id", "resource", "resource.group", "changes", "changes[].op",
// "actor.user.username", "crd.impact[].objects[].name" ...: a key inside
// an object is written after a dot, the items of a list as []. Values kept
// as raw JSON (change values, objects) are leaves.
func Paths() []string { return PathsOf(payload.Payload{}) }

// PathsOf returns the JSON key paths of the struct v, as Paths does for
// payload.Payload: to compare a type that writes a part of a payload
// (crd/diff.Result) with that part of Payload.
func PathsOf(v any) []string {
	var out []string
	walkType(reflect.TypeOf(v), "", func(path string, _ bool) { out = append(out, path) })
	return out
}

// walkType calls fn with each key path of the struct type t, prefixed,
// and whether the value there is itself made of keys (a struct or a list
// of structs).
func walkType(t reflect.Type, prefix string, fn func(path string, inner bool)) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			walkType(ft, prefix, fn)
			continue
		}
		if name == "" {
			name = f.Name
		}
		path := prefix + name
		switch {
		case isStruct(ft):
			fn(path, true)
			walkType(ft, path+".", fn)
		case ft.Kind() == reflect.Slice && isStruct(ft.Elem()):
			fn(path, true)
			walkType(ft.Elem(), path+"[].", fn)
		default:
			fn(path, false)
		}
	}
}

// isStruct reports whether t is a struct that JSON encodes key by key.
func isStruct(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && t != reflect.TypeFor[time.Time]() && t != reflect.TypeFor[json.RawMessage]()
}

// KeyPaths returns the key paths (as Paths writes them) that the JSON
// payload data uses, sorted, without descending into the values the type
// keeps as raw JSON; keys the type does not have are listed, not entered.
func KeyPaths(data []byte) ([]string, error) {
	var v map[string]any
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	inner := map[string]bool{}
	walkType(reflect.TypeFor[payload.Payload](), "", func(path string, in bool) { inner[path] = in })
	seen := map[string]bool{}
	var walk func(v any, path string)
	walk = func(v any, path string) {
		switch x := v.(type) {
		case map[string]any:
			for k, item := range x {
				p := k
				if path != "" {
					p = path + "." + k
				}
				seen[p] = true
				if inner[p] {
					walk(item, p)
				}
			}
		case []any:
			for _, item := range x {
				walk(item, path+"[]")
			}
		}
	}
	walk(v, "")
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	slices.Sort(out)
	return out, nil
}
