package rules

import (
	"strings"
	"testing"

	"github.com/fieldwatch/fieldwatch/change"
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
			// An update from an object without managedFields: every
			// entry is a candidate, and these cases are about the choice
			// among candidates (TestActorCandidates: which are).
			c := &Change{Type: change.Updated, Old: obj(t, `{"metadata":{}}`), New: obj(t, tt.obj)}
			if got := actorString(c, changedOps(tt.changed)); got != tt.want {
				t.Errorf("actor = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestActorCandidates checks which managedFields entries may be the
// actor: on create any, on update only those the write touched (new, or
// with a new time or field set), on delete none.
func TestActorCandidates(t *testing.T) {
	// e renders a managedFields entry; fields is its fieldsV1, or a
	// fieldsHash when it starts with "#".
	e := func(manager, op, sub, time, fields string) string {
		s := `{"manager":"` + manager + `","operation":"` + op + `","time":"` + time + `"`
		if sub != "" {
			s += `,"subresource":"` + sub + `"`
		}
		switch {
		case strings.HasPrefix(fields, "#"):
			s += `,"fieldsHash":"` + fields[1:] + `"`
		case fields != "":
			s += `,"fieldsType":"FieldsV1","fieldsV1":` + fields
		}
		return s + "}"
	}
	mf := func(entries ...string) string {
		return `{"metadata":{"managedFields":[` + strings.Join(entries, ",") + `]},"spec":{"size":2},"status":{"phase":"Ready"}}`
	}
	const (
		t1, t2, t3 = "2026-01-01T00:00:01Z", "2026-01-01T00:00:02Z", "2026-01-01T00:00:03Z"
		size       = `{"f:spec":{"f:size":{}}}`
		phase      = `{"f:status":{"f:phase":{}}}`
	)
	sizeHash := "#" + change.FieldsHash(map[string]any{"f:spec": map[string]any{"f:size": map[string]any{}}}) // the watcher's fieldsHash of size
	tests := []struct {
		name     string
		typ      change.Type
		old, new string
		changed  []string
		want     string
	}{
		{"created: the newest", change.Created, "", mf(e("a", "Apply", "", t1, ""), e("b", "Update", "", t3, ""), e("c", "Update", "", t2, "")), nil, "b/Update"},
		{"created: a tie goes to the last", change.Created, "", mf(e("b", "Apply", "", t1, ""), e("a", "Update", "", t1, "")), nil, "a/Update"},
		{"created: the newest, whatever it owns", change.Created, "", mf(e("a", "Update", "", t1, size), e("b", "Update", "", t2, phase)), []string{"/spec/size"}, "b/Update"},
		{"created: no managedFields", change.Created, "", `{"metadata":{}}`, nil, ""},
		{"created: no manager", change.Created, "", mf(e("", "Update", "", t1, "")), nil, ""},
		{"deleted: never", change.Deleted, mf(e("a", "Update", "", t1, "")), "", []string{"/spec/size"}, ""},

		{"untouched entries are not candidates",
			change.Updated, mf(e("kubectl", "Apply", "", t1, ""), e("ctrl", "Update", "status", t3, "")),
			mf(e("kubectl", "Apply", "", t2, ""), e("ctrl", "Update", "status", t3, "")), []string{"/spec/size"}, "kubectl/Apply"},
		{"nothing touched: no actor (a /scale write)",
			change.Updated, mf(e("kubectl", "Apply", "", t1, size), e("ctrl", "Update", "status", t3, phase)),
			mf(e("kubectl", "Apply", "", t1, size), e("ctrl", "Update", "status", t3, phase)), []string{"/spec/size"}, ""},
		{"the writer's entry left: no actor",
			change.Updated, mf(e("kubectl", "Apply", "", t1, ""), e("hpa", "Update", "scale", t2, "")),
			mf(e("kubectl", "Apply", "", t1, "")), []string{"/spec/size"}, ""},
		{"a new entry, of the same time",
			change.Updated, mf(e("kubectl", "Apply", "", t2, "")),
			mf(e("kubectl", "Apply", "", t2, ""), e("kubectl-edit", "Update", "", t2, "")), []string{"/spec/size"}, "kubectl-edit/Update"},
		{"keyed by operation",
			change.Updated, mf(e("m", "Apply", "", t2, "#1")),
			mf(e("m", "Apply", "", t2, "#1"), e("m", "Update", "", t1, "#1")), []string{"/spec/size"}, "m/Update"},
		{"keyed by subresource",
			change.Updated, mf(e("kubelet", "Update", "", t1, "#1"), e("other", "Update", "", t3, "#2")),
			mf(e("kubelet", "Update", "", t1, "#1"), e("kubelet", "Update", "status", t1, "#1"), e("other", "Update", "", t3, "#2")), []string{"/status/phase"}, "kubelet/Update"},
		{"the writer's stamped entry over one that only lost fields to it, later in the list",
			change.Updated, mf(e("writer", "Update", "", t1, "#1"), e("loser", "Update", "", t2, "#2")),
			mf(e("writer", "Update", "", t2, "#3"), e("loser", "Update", "", t2, "#4")), []string{"/spec/size"}, "writer/Update"},
		{"a new fieldsHash in the same second",
			change.Updated, mf(e("a", "Update", "", t1, "#1"), e("b", "Update", "", t2, "#2")),
			mf(e("a", "Update", "", t1, "#3"), e("b", "Update", "", t2, "#2")), []string{"/spec/size"}, "a/Update"},
		{"a new fieldsV1 in the same second",
			change.Updated, mf(e("a", "Update", "", t1, size), e("b", "Update", "", t2, phase)),
			mf(e("a", "Update", "", t1, `{"f:spec":{"f:size":{},"f:color":{}}}`), e("b", "Update", "", t2, phase)), []string{"/spec/size"}, "a/Update"},
		{"fieldsV1 before, its fieldsHash after: the same",
			change.Updated, mf(e("a", "Update", "", t1, size), e("b", "Update", "", t1, phase)),
			mf(e("a", "Update", "", t1, sizeHash), e("b", "Update", "", t2, "#9")), []string{"/spec/size"}, "b/Update"},
		{"fieldsHash before, another fieldsV1 after",
			change.Updated, mf(e("a", "Update", "", t1, sizeHash), e("b", "Update", "", t2, phase)),
			mf(e("a", "Update", "", t1, phase), e("b", "Update", "", t2, phase)), []string{"/status/phase"}, "a/Update"},
		{"the newest candidate",
			change.Updated, mf(e("a", "Update", "", t1, "#1"), e("b", "Update", "", t1, "#2"), e("c", "Update", "", t1, "#3")),
			mf(e("a", "Update", "", t3, "#1"), e("b", "Update", "", t2, "#2"), e("c", "Update", "", t1, "#3")), []string{"/spec/size"}, "a/Update"},
		{"a tie goes to the last candidate",
			change.Updated, mf(e("a", "Update", "", t1, "#1"), e("b", "Update", "", t1, "#2"), e("c", "Update", "", t1, "#3")),
			mf(e("a", "Update", "", t3, "#1"), e("b", "Update", "", t3, "#2"), e("c", "Update", "", t1, "#3")), []string{"/spec/size"}, "b/Update"},
		{"the owner among candidates, though older",
			change.Updated, mf(e("a", "Update", "", t1, size), e("b", "Update", "", t1, phase)),
			mf(e("a", "Update", "", t2, size), e("b", "Update", "", t3, phase)), []string{"/spec/size"}, "a/Update"},
		{"an owner that is no candidate does not count",
			change.Updated, mf(e("a", "Update", "", t1, size), e("b", "Update", "", t1, phase)),
			mf(e("a", "Update", "", t1, size), e("b", "Update", "", t2, phase)), []string{"/spec/size"}, "b/Update"},
		{"the old object has no managedFields: every entry",
			change.Updated, `{"metadata":{}}`, mf(e("a", "Update", "", t2, ""), e("b", "Update", "", t1, "")), []string{"/spec/size"}, "a/Update"},
		{"malformed old entries are skipped",
			change.Updated, `{"metadata":{"managedFields":["x",{"manager":"a"}]}}`, mf(e("a", "Update", "", t1, "")), []string{"/spec/size"}, "a/Update"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Change{Type: tt.typ}
			if tt.old != "" {
				c.Old = obj(t, tt.old)
			}
			if tt.new != "" {
				c.New = obj(t, tt.new)
			}
			if got := actorString(c, changedOps(tt.changed)); got != tt.want {
				t.Errorf("actor = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestActorAllocs keeps the actor off the heap: it runs for every firing.
func TestActorAllocs(t *testing.T) {
	c := &Change{
		Type: change.Updated,
		Old:  benchWidget(3, "100"),
		New:  benchWidget(4, "101"),
	}
	ops := changedOps([]string{"/spec/size"})
	if got := actorString(c, ops); got != "widget-controller/Update" {
		t.Fatalf("actor = %q", got)
	}
	if n := testing.AllocsPerRun(100, func() { actorOf(c, ops) }); n != 0 {
		t.Errorf("actorOf allocates %v times", n)
	}
}

// actorString runs actorOf and renders its result as manager/operation,
// "" for none.
func actorString(c *Change, ops []patchOp) string {
	a, ok := actorOf(c, ops)
	if !ok {
		return ""
	}
	return a.Manager + "/" + a.Operation
}

// changedOps makes replace operations at JSON pointers (tests only).
func changedOps(pointers []string) []patchOp {
	var ops []patchOp
	for _, p := range pointers {
		ops = append(ops, patchOp{Op: "replace", toks: splitPointer(p)})
	}
	return ops
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
