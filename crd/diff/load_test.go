package diff

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/fieldwatch/fieldwatch/fileerr"
)

func TestParseManifests(t *testing.T) {
	src := `# a comment
---
apiVersion: v1
kind: ConfigMap
metadata: {name: a}
data: {n: "1"}
---
---   # an empty document
apiVersion: v1
kind: List
items:
  - {apiVersion: example.com/v1, kind: Widget, metadata: {name: w1}, spec: {size: 3, ratio: 0.5}}
  - apiVersion: example.com/v1
    kind: Widget
    metadata: {name: w2}
{"apiVersion": "v1", "kind": "Secret"}
`
	src = strings.Replace(src, `{"apiVersion": "v1", "kind": "Secret"}`, "---\n{\"apiVersion\": \"v1\", \"kind\": \"Secret\", \"metadata\": {\"name\": \"s\"}}", 1)
	ms, err := ParseManifests("m.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		name := m.Object["metadata"].(map[string]any)["name"]
		got = append(got, m.Object["kind"].(string)+"/"+name.(string)+"@"+m.File+":"+strconv.Itoa(m.Line))
	}
	want := "ConfigMap/a@m.yaml:3 Widget/w1@m.yaml:12 Widget/w2@m.yaml:13 Secret/s@m.yaml:17"
	if strings.Join(got, " ") != want {
		t.Errorf("manifests %q, want %q", strings.Join(got, " "), want)
	}
	spec := ms[1].Object["spec"].(map[string]any)
	if spec["size"] != int64(3) || spec["ratio"] != 0.5 {
		t.Errorf("numbers %#v, want int64(3) and 0.5", spec)
	}
}

// TestReadManifests checks the file walker: files and directories in the
// order given, a directory's *.yaml, *.yml and *.json files (in
// subdirectories too) in lexical order and nothing else, Lists read item
// by item, and errors with their file.
func TestReadManifests(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cm := func(name string) string { return "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: " + name + "}\n" }
	write("objs/b.yaml", cm("b"))
	write("objs/a.json", `{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}`)
	write("objs/sub/c.YML", cm("c"))
	write("objs/notes.txt", "not a manifest")
	write("objs/list.yaml", "apiVersion: v1\nkind: List\nitems:\n  - "+strings.ReplaceAll(strings.TrimSpace(cm("l1")), "\n", "\n    ")+"\n  - {apiVersion: v1, kind: ConfigMap, metadata: {name: l2}}\n")
	single := write("single.manifest", cm("s"))
	ms, err := ReadManifests(single, filepath.Join(dir, "objs"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		rel, _ := filepath.Rel(dir, m.File)
		got = append(got, m.Object["metadata"].(map[string]any)["name"].(string)+"@"+filepath.ToSlash(rel)+":"+strconv.Itoa(m.Line))
	}
	want := "s@single.manifest:1 a@objs/a.json:1 b@objs/b.yaml:1 l1@objs/list.yaml:4 l2@objs/list.yaml:7 c@objs/sub/c.YML:1"
	if strings.Join(got, " ") != want {
		t.Errorf("manifests %s\nwant      %s", strings.Join(got, " "), want)
	}

	bad := write("bad/x.yaml", "- a\n")
	for _, tt := range []struct{ path, want string }{
		{filepath.Join(dir, "bad"), "^" + regexp.QuoteMeta(bad) + `:1:1: a document must be an object, not an array$`},
		{filepath.Join(dir, "missing"), `^stat .*missing: no such file or directory$`},
	} {
		_, err := ReadManifests(tt.path)
		if err == nil || !regexp.MustCompile(tt.want).MatchString(err.Error()) {
			t.Errorf("ReadManifests(%s) = %v, want an error matching %s", tt.path, err, tt.want)
		}
	}
	var e *fileerr.Error
	if _, err := ReadManifests(filepath.Join(dir, "bad")); !errors.As(err, &e) || e.File != bad {
		t.Errorf("error %v is not a *fileerr.Error of %s", err, bad)
	}

	crd := write("crds/list.yaml", "apiVersion: v1\nkind: List\nitems:\n"+indent(strings.TrimPrefix(baseCRD, "\n"), "  - ", "    "))
	write("crds/cm.yaml", cm("skipped"))
	docs, err := ReadCRDs(filepath.Join(dir, "crds"))
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != 1 || docs[0].File != crd || docs[0].CRD.Name != "widgets.example.com" {
		t.Errorf("ReadCRDs = %+v, want the one CRD of %s", docs, crd)
	}
}

// indent prefixes the first line of s with first and the others with rest.
func indent(s, first, rest string) string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	for i := range lines {
		if i == 0 {
			lines[i] = first + lines[i]
		} else {
			lines[i] = rest + lines[i]
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

func TestParseErrors(t *testing.T) {
	crd := strings.TrimPrefix(baseCRD, "\n")
	tests := []struct {
		name, src, want string
	}{
		{name: "YAML syntax", src: "a: b\n---\nc: [d\n", want: `^f\.yaml:3:1: did not find expected ',' or ']'$`},
		{name: "duplicate key", src: "---\na: 1\na: 2\n", want: `^f\.yaml:3:1: key "a" already set in map$`},
		{name: "not an object", src: "- a\n", want: `^f\.yaml:1:1: a document must be an object, not an array$`},
		{name: "a List item that is not an object", src: "kind: List\nitems: [1]\n", want: `^f\.yaml:1:1: items\[0\]: a list item must be an object, not a number$`},
		{name: "older CRD version", src: strings.Replace(crd, "apiextensions.k8s.io/v1", "apiextensions.k8s.io/v1beta1", 1),
			want: `^f\.yaml:1:1: apiVersion is "apiextensions.k8s.io/v1beta1": only apiextensions.k8s.io/v1 CustomResourceDefinitions are compared$`},
		{name: "wrong type", src: strings.Replace(crd, "storage: true", "storage: [true]", 1), want: `^f\.yaml:11:\d+: spec\.versions\.storage: cannot be an array: must be bool$`},
		{name: "wrong type deep in a schema", src: strings.Replace(crd, "openAPIV3Schema: {type: object}", "openAPIV3Schema: {type: object, properties: {a: {maxLength: x}}}", 1),
			want: `^f\.yaml:13:\d+: spec\.versions\.schema\.openAPIV3Schema\.properties\.maxLength: cannot be a string: must be int64$`},
		{name: "unknown fields", src: strings.Replace(crd, "scope: Namespaced", "scope: Namespaced\n  scopes: x\n  served: true", 1),
			want: `^f\.yaml:7:\d+: spec\.scopes: unknown field\nf\.yaml:8:\d+: spec\.served: unknown field$`},
		{name: "unknown field in a List item", src: "apiVersion: v1\nkind: List\nitems:\n- apiVersion: apiextensions.k8s.io/v1\n  kind: CustomResourceDefinition\n  spec: {foo: 1}\n",
			want: `^f\.yaml:6:\d+: spec\.foo: unknown field$`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(tt.src))
			if err == nil {
				t.Fatal("no error")
			}
			if !regexp.MustCompile(tt.want).MatchString(err.Error()) {
				t.Errorf("error %q does not match %q", err, tt.want)
			}
		})
	}
}

func TestFromMap(t *testing.T) {
	ms, err := ParseManifests("crd.yaml", []byte(baseCRD))
	if err != nil {
		t.Fatal(err)
	}
	obj := ms[0].Object
	obj["status"] = map[string]any{"storedVersions": []any{"v1"}, "futureField": true}
	crd, err := FromMap(obj)
	if err != nil {
		t.Fatal(err)
	}
	if crd.Name != "widgets.example.com" || crd.Status.StoredVersions[0] != "v1" || crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Type != "object" {
		t.Errorf("crd %+v", crd)
	}
	obj["kind"] = "Widget"
	if _, err := FromMap(obj); err == nil || err.Error() != `kind is "Widget", not CustomResourceDefinition` {
		t.Errorf("error %v", err)
	}
	obj["kind"] = "CustomResourceDefinition"
	obj["spec"] = map[string]any{"versions": "v1"}
	if _, err := FromMap(obj); err == nil || !strings.Contains(err.Error(), "decode CustomResourceDefinition") {
		t.Errorf("error %v", err)
	}
}

func TestCompareAll(t *testing.T) {
	a, b := mustCRD(t, baseCRD), mustCRD(t, baseCRD)
	c := mustCRD(t, strings.ReplaceAll(baseCRD, "widgets", "gadgets"))
	b.Spec.Scope = "Cluster"
	rs := CompareAll(nil, nil)
	if len(rs) != 0 {
		t.Errorf("nothing compared gives %v", rs)
	}
	rs = CompareAll([]*apiextensionsv1.CustomResourceDefinition{a}, []*apiextensionsv1.CustomResourceDefinition{c, b})
	var got []string
	for _, r := range rs {
		got = append(got, r.CRD+":"+strings.Join(summary(r), ","))
	}
	want := "widgets.example.com:scope-changed breaking  /spec/scope|gadgets.example.com:crd-added safe  "
	if strings.Join(got, "|") != want {
		t.Errorf("results %q, want %q", strings.Join(got, "|"), want)
	}
	rs = CompareAll([]*apiextensionsv1.CustomResourceDefinition{a}, nil)
	if len(rs) != 1 || rs[0].Checks[0].Check != "crd-removed" || rs[0].Breaking != 1 {
		t.Errorf("removed: %+v", rs[0])
	}
}
