package rules

import (
	"testing"
)

func TestActor(t *testing.T) {
	entry := func(manager, op, time string, fields string) string {
		e := `{"manager":"` + manager + `","operation":"` + op + `","time":"` + time + `"`
		if fields != "" {
			e += `,"fieldsType":"FieldsV1","fieldsV1":` + fields
		}
		return e + "}"
	}
	object := func(entries ...string) string {
		l := ""
		for i, e := range entries {
			if i > 0 {
				l += ","
			}
			l += e
		}
		return `{"metadata":{"managedFields":[` + l + `]},"spec":{"size":2,"containers":[{"name":"web","image":"b"}],"args":["x"]},"status":{"phase":"Ready"}}`
	}
	tests := []struct {
		name    string
		obj     string
		changed []string // JSON pointers
		want    string   // manager/operation, "" for none
	}{
		{"no managedFields", `{"metadata":{}}`, []string{"/spec/size"}, ""},
		{"owner of the changed field", object(
			entry("kubectl", "Apply", "2026-01-01T00:00:00Z", `{"f:spec":{"f:size":{}}}`),
			entry("controller", "Update", "2026-01-02T00:00:00Z", `{"f:status":{"f:phase":{}}}`)),
			[]string{"/spec/size"}, "kubectl/Apply"},
		{"status owner", object(
			entry("kubectl", "Apply", "2026-01-01T00:00:00Z", `{"f:spec":{"f:size":{}}}`),
			entry("controller", "Update", "2026-01-01T00:00:00Z", `{"f:status":{"f:phase":{}}}`)),
			[]string{"/status/phase"}, "controller/Update"},
		{"keyed list item", object(
			entry("a", "Update", "2026-01-02T00:00:00Z", `{"f:spec":{"f:size":{}}}`),
			entry("b", "Apply", "2026-01-01T00:00:00Z", `{"f:spec":{"f:containers":{"k:{\"name\":\"web\"}":{".":{},"f:image":{}}}}}`)),
			[]string{"/spec/containers/0/image"}, "b/Apply"},
		{"set item by value", object(
			entry("a", "Update", "2026-01-02T00:00:00Z", `{"f:spec":{"f:size":{}}}`),
			entry("b", "Update", "2026-01-01T00:00:00Z", `{"f:spec":{"f:args":{"v:\"x\"":{}}}}`)),
			[]string{"/spec/args/0"}, "b/Update"},
		{"atomic field owns below", object(
			entry("a", "Update", "2026-01-02T00:00:00Z", `{"f:status":{}}`),
			entry("b", "Update", "2026-01-03T00:00:00Z", `{"f:spec":{"f:size":{}}}`)),
			[]string{"/status/phase"}, "a/Update"},
		{"most changes owned wins", object(
			entry("a", "Update", "2026-01-03T00:00:00Z", `{"f:spec":{"f:size":{}}}`),
			entry("b", "Update", "2026-01-01T00:00:00Z", `{"f:spec":{"f:size":{},"f:args":{}}}`)),
			[]string{"/spec/size", "/spec/args"}, "b/Update"},
		{"tie: newest", object(
			entry("a", "Update", "2026-01-01T00:00:00Z", `{"f:spec":{"f:size":{}}}`),
			entry("b", "Update", "2026-01-03T00:00:00Z", `{"f:spec":{"f:size":{}}}`)),
			[]string{"/spec/size"}, "b/Update"},
		{"no owner: newest", object(
			entry("a", "Update", "2026-01-02T00:00:00Z", ""),
			entry("b", "Update", "2026-01-01T00:00:00Z", "")),
			[]string{"/spec/size"}, "a/Update"},
		{"removal: newest", object(
			entry("a", "Update", "2026-01-01T00:00:00Z", `{"f:spec":{"f:size":{}}}`),
			entry("b", "Update", "2026-01-02T00:00:00Z", `{"f:status":{}}`)),
			[]string{"/spec/gone"}, "b/Update"},
		{"no changes: newest", object(
			entry("a", "Update", "2026-01-01T00:00:00Z", ""),
			entry("b", "Update", "2026-01-02T00:00:00Z", "")),
			nil, "b/Update"},
		{"malformed entries", `{"metadata":{"managedFields":["x",{"operation":"Update"}]}}`, []string{"/spec"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ops []Op
			for _, p := range tt.changed {
				toks := splitPointer(p)
				ops = append(ops, Op{Op: "replace", toks: toks})
			}
			a := actorOf(obj(t, tt.obj), ops)
			got := ""
			if a != nil {
				got = a.Manager + "/" + a.Operation
			}
			if got != tt.want {
				t.Errorf("actor = %q, want %q", got, tt.want)
			}
		})
	}
}

// splitPointer splits an unescaped JSON Pointer into tokens (tests only).
func splitPointer(p string) []string {
	var toks []string
	start := 1
	for i := 1; i <= len(p); i++ {
		if i == len(p) || p[i] == '/' {
			toks = append(toks, p[start:i])
			start = i + 1
		}
	}
	return toks
}
