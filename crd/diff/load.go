package diff

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	yamlv3 "gopkg.in/yaml.v3"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/fieldwatch/fieldwatch/fileerr"
	"github.com/fieldwatch/fieldwatch/internal/fieldpath"
)

// Manifest is one object of a YAML or JSON file.
type Manifest struct {
	// Object is the object as plain JSON values (int64 for integers, as
	// Kubernetes' unstructured decoder gives them).
	Object map[string]any
	// File and Line say where its document starts.
	File string
	Line int
	// doc is the YAML document, docLine its first line and prefix the
	// object's path inside it (items.N for a List item), to locate errors.
	doc     []byte
	docLine int
	prefix  []string
}

// ParseManifests reads every object of a multi-document YAML (or JSON)
// stream named name, the way kubectl does (YAML 1.1 scalars, as
// sigs.k8s.io/yaml reads them). Empty documents are skipped; the items of
// a List (kind List or any kind ending in List with an items list) are
// returned one by one. Errors carry name and line.
func ParseManifests(name string, data []byte) ([]Manifest, error) {
	var out []Manifest
	for _, d := range splitDocuments(data) {
		if len(bytes.TrimSpace(d.data)) == 0 {
			continue
		}
		js, err := yaml.YAMLToJSONStrict(d.data)
		if err != nil {
			line, msg := yamlErrorLine(err)
			return nil, &fileerr.Error{File: name, Line: d.line + max(line, 1) - 1, Msg: msg}
		}
		var v any
		if err := utiljson.Unmarshal(js, &v); err != nil {
			return nil, &fileerr.Error{File: name, Line: d.line, Msg: err.Error()}
		}
		if v == nil {
			continue
		}
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, &fileerr.Error{File: name, Line: d.line, Msg: fmt.Sprintf("a document must be an object, not %s", jsonKind(v))}
		}
		m := Manifest{Object: obj, File: name, Line: d.line, doc: d.data, docLine: d.line}
		items, isList := listItems(obj)
		if !isList {
			out = append(out, m)
			continue
		}
		for i, it := range items {
			o, ok := it.(map[string]any)
			if !ok {
				return nil, &fileerr.Error{File: name, Line: d.line, Path: fieldpath.Item("items", i), Msg: fmt.Sprintf("a list item must be an object, not %s", jsonKind(it))}
			}
			prefix := []string{"items", strconv.Itoa(i)}
			line := d.line
			if l := locate(d.data, prefix, "object"); l > 0 {
				line = d.line + l - 1
			}
			out = append(out, Manifest{Object: o, File: name, Line: line, doc: d.data, docLine: d.line, prefix: prefix})
		}
	}
	return out, nil
}

func listItems(obj map[string]any) ([]any, bool) {
	kind, _ := obj["kind"].(string)
	items, ok := obj["items"].([]any)
	if !ok || !strings.HasSuffix(kind, "List") {
		return nil, false
	}
	return items, true
}

// ReadManifests reads the objects of files and directories, in the order
// given: a file's objects (see ParseManifests: multi-document YAML or
// JSON, the items of a List such as `kubectl get -o yaml` writes), and
// under a directory those of every *.yaml, *.yml and *.json file, in
// lexical order. It is the file walker of `fieldwatch crd-diff` and
// `fieldwatch rbac --crds`.
func ReadManifests(paths ...string) ([]Manifest, error) {
	var out []Manifest
	for _, path := range paths {
		files, err := manifestFiles(path)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				return nil, err
			}
			ms, err := ParseManifests(f, data)
			if err != nil {
				return nil, err
			}
			out = append(out, ms...)
		}
	}
	return out, nil
}

// manifestFiles returns path when it is a file and, when it is a
// directory, every *.yaml, *.yml and *.json file under it, in lexical
// order.
func manifestFiles(path string) ([]string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return []string{path}, nil
	}
	var files []string
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		switch strings.ToLower(filepath.Ext(p)) {
		case ".yaml", ".yml", ".json":
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return files, nil
}

// Document is one CustomResourceDefinition read from a file.
type Document struct {
	CRD *apiextensionsv1.CustomResourceDefinition
	// File and Line say where its document starts.
	File string
	Line int
	// doc, docLine and prefix are the manifest's (not its decoded
	// Object, which would keep a second copy of the CRD alive), to
	// locate fields.
	doc     []byte
	docLine int
	prefix  []string
}

// Locate returns the line and column in File of the field at path, a
// field path as the apiserver's validation reports it
// (spec.versions[0].schema.openAPIV3Schema.properties[spec].type), or of
// the closest enclosing field the file has (a missing field is reported
// at its parent); the document's first line and column 0 when none is
// found.
func (d Document) Locate(path string) (line, col int) {
	if d.doc == nil {
		return d.Line, 0
	}
	l, c := locateExact(d.doc, append(slices.Clip(d.prefix), splitPath(path)...))
	if l == 0 {
		return d.Line, 0
	}
	return d.docLine + l - 1, c
}

// locateExact returns the line and column (1-based, inside doc) of the
// node at path, matching every key exactly, or of its closest ancestor:
// a scalar value's own position, the key's for a mapping or a list. 0, 0
// when doc does not parse.
func locateExact(doc []byte, path []string) (line, col int) {
	var root yamlv3.Node
	if yamlv3.Unmarshal(doc, &root) != nil || len(root.Content) == 0 {
		return 0, 0
	}
	n := root.Content[0]
	best := n
	for _, seg := range path {
		for n.Kind == yamlv3.AliasNode && n.Alias != nil {
			n = n.Alias
		}
		var next *yamlv3.Node
		switch n.Kind {
		case yamlv3.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == seg {
					best, next = n.Content[i], n.Content[i+1]
					if next.Kind == yamlv3.ScalarNode {
						best = next
					}
					break
				}
			}
		case yamlv3.SequenceNode:
			if i, err := strconv.Atoi(seg); err == nil && i >= 0 && i < len(n.Content) {
				best, next = n.Content[i], n.Content[i]
			}
		}
		if next == nil {
			break
		}
		n = next
	}
	return best.Line, best.Column
}

// Parse reads every apiextensions.k8s.io/v1 CustomResourceDefinition of a
// YAML or JSON stream; documents of other kinds are skipped, a
// CustomResourceDefinition of another version is an error. Fields the
// type does not have, and values of the wrong type, are errors with their
// FILE:LINE:COL and path.
func Parse(name string, data []byte) ([]Document, error) {
	ms, err := ParseManifests(name, data)
	if err != nil {
		return nil, err
	}
	return documents(ms)
}

// ReadCRDs reads the CustomResourceDefinitions of files and directories
// (ReadManifests reads them; see Parse).
func ReadCRDs(paths ...string) ([]Document, error) {
	ms, err := ReadManifests(paths...)
	if err != nil {
		return nil, err
	}
	return documents(ms)
}

// documents decodes the CustomResourceDefinitions among ms, skipping
// other kinds.
func documents(ms []Manifest) ([]Document, error) {
	var out []Document
	var errs []error
	for _, m := range ms {
		if kind, _ := m.Object["kind"].(string); kind != "CustomResourceDefinition" {
			continue
		}
		crd, err := decodeManifest(m)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, Document{CRD: crd, File: m.File, Line: m.Line, doc: m.doc, docLine: m.docLine, prefix: m.prefix})
	}
	return out, errors.Join(errs...)
}

// FromMap converts a CustomResourceDefinition given as plain JSON values
// (as the watcher hands objects to rules) into the API type. Fields the
// type does not know are ignored, as client-go does, so that a CRD from a
// newer apiserver still converts.
func FromMap(obj map[string]any) (*apiextensionsv1.CustomResourceDefinition, error) {
	if err := checkKind(obj); err != nil {
		return nil, err
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encode CustomResourceDefinition: %w", err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := json.Unmarshal(b, crd); err != nil {
		return nil, fmt.Errorf("decode CustomResourceDefinition: %w", err)
	}
	return crd, nil
}

func checkKind(obj map[string]any) error {
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	if kind != "CustomResourceDefinition" {
		return fmt.Errorf("kind is %q, not CustomResourceDefinition", kind)
	}
	if apiVersion != apiextensionsv1.SchemeGroupVersion.String() {
		return fmt.Errorf("apiVersion is %q: only %s CustomResourceDefinitions are compared", apiVersion, apiextensionsv1.SchemeGroupVersion)
	}
	return nil
}

// goStructField finds the path in encoding/json's type errors.
var goStructField = regexp.MustCompile(`^json: cannot unmarshal (\w+) into Go struct field \w+\.(\S+) of type (.+)$`)

// decodeManifest decodes one CRD manifest strictly, locating errors.
func decodeManifest(m Manifest) (*apiextensionsv1.CustomResourceDefinition, error) {
	fail := func(path, kind, msg string) error {
		e := &fileerr.Error{File: m.File, Line: m.Line, Path: path, Msg: msg}
		if path != "" && m.doc != nil {
			if l := locate(m.doc, append(slices.Clip(m.prefix), splitPath(path)...), kind); l > 0 {
				e.Line = m.docLine + l - 1
			}
		}
		return e
	}
	if err := checkKind(m.Object); err != nil {
		return nil, fail("", "", err.Error())
	}
	b, err := json.Marshal(m.Object)
	if err != nil {
		return nil, fail("", "", err.Error())
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := json.Unmarshal(b, crd); err != nil {
		if g := goStructField.FindStringSubmatch(err.Error()); g != nil {
			return nil, fail(g[2], g[1], fmt.Sprintf("cannot be %s: must be %s", articled(g[1]), g[3]))
		}
		return nil, fail("", "", err.Error())
	}
	strict, err := sigsjson.UnmarshalStrict(b, &apiextensionsv1.CustomResourceDefinition{})
	if err != nil {
		return nil, fail("", "", err.Error())
	}
	if len(strict) > 0 {
		var errs []error
		for _, s := range strict {
			path, msg := "", s.Error()
			var fe sigsjson.FieldError
			if errors.As(s, &fe) {
				path = fe.FieldPath()
				msg = strings.TrimSuffix(strings.Replace(msg, strconv.Quote(path), "", 1), " ")
			}
			errs = append(errs, fail(path, "", msg))
		}
		return nil, errors.Join(errs...)
	}
	return crd, nil
}

func articled(kind string) string {
	switch kind {
	case "array", "object":
		return "an " + kind
	}
	return "a " + kind
}

// document is one YAML document and the line it starts on.
type document struct {
	data []byte
	line int
}

// splitDocuments splits a YAML stream at lines starting with "---", as
// Kubernetes' YAML reader does, keeping each document's first line.
func splitDocuments(data []byte) []document {
	var docs []document
	start, startLine, line := 0, 1, 1
	for i := 0; i <= len(data); {
		end := bytes.IndexByte(data[i:], '\n')
		next := len(data) + 1
		lineEnd := len(data)
		if end >= 0 {
			lineEnd = i + end
			next = lineEnd + 1
		}
		text := data[i:lineEnd]
		if bytes.HasPrefix(text, []byte("---")) && (len(text) == 3 || text[3] == ' ' || text[3] == '\t' || text[3] == '\r') {
			docs = append(docs, document{data: data[start:i], line: startLine})
			start, startLine = min(next, len(data)), line+1
		}
		i = next
		line++
	}
	return append(docs, document{data: data[start:], line: startLine})
}

var yamlLine = regexp.MustCompile(`line (\d+): `)

// yamlErrorLine returns the line a YAML error names and its message
// without the line.
func yamlErrorLine(err error) (int, string) {
	msg := strings.TrimPrefix(err.Error(), "error converting YAML to JSON: ")
	msg = strings.TrimPrefix(msg, "error unmarshaling JSON: while decoding JSON: ")
	msg = strings.TrimPrefix(msg, "yaml: ")
	if m := yamlLine.FindStringSubmatchIndex(msg); m != nil {
		n, _ := strconv.Atoi(msg[m[2]:m[3]])
		msg = msg[:m[0]] + msg[m[1]:]
		return n, strings.TrimSpace(strings.TrimPrefix(msg, "unmarshal errors:\n"))
	}
	return 0, msg
}

// splitPath splits a field path such as spec.versions[1].schema or
// spec.versions.served into its keys and indexes.
func splitPath(path string) []string {
	var segs []string
	for _, part := range strings.Split(path, ".") {
		for part != "" {
			i := strings.IndexByte(part, '[')
			if i < 0 {
				segs = append(segs, part)
				break
			}
			if i > 0 {
				segs = append(segs, part[:i])
			}
			j := strings.IndexByte(part[i:], ']')
			if j < 0 {
				segs = append(segs, part[i:])
				break
			}
			segs = append(segs, part[i+1:i+j])
			part = part[i+j+1:]
		}
	}
	return segs
}

// locate returns the line (1-based, inside doc) of the node at path; at a
// sequence a segment that is not an index tries every item. kind, when
// set, is the JSON kind the node must have ("string", "number", "bool",
// "object", "array"); the first node found wins. 0 when nothing matches.
func locate(doc []byte, path []string, kind string) int {
	var root yamlv3.Node
	if err := yamlv3.Unmarshal(doc, &root); err != nil || len(root.Content) == 0 {
		return 0
	}
	n := find(root.Content[0], path, kind)
	if n == nil {
		return 0
	}
	return n.Line
}

func find(n *yamlv3.Node, path []string, kind string) *yamlv3.Node {
	for n.Kind == yamlv3.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if len(path) == 0 {
		if kind == "" || nodeKind(n) == kind {
			return n
		}
		return nil
	}
	switch n.Kind {
	case yamlv3.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == path[0] {
				if len(path) == 1 && kind == "" {
					return n.Content[i]
				}
				return find(n.Content[i+1], path[1:], kind)
			}
		}
		// encoding/json's paths leave out map keys (properties.type for
		// properties.a.type): try every value.
		for i := 1; i < len(n.Content); i += 2 {
			if n.Content[i].Kind == yamlv3.MappingNode {
				if f := find(n.Content[i], path, kind); f != nil {
					return f
				}
			}
		}
	case yamlv3.SequenceNode:
		if i, err := strconv.Atoi(path[0]); err == nil {
			if i >= 0 && i < len(n.Content) {
				return find(n.Content[i], path[1:], kind)
			}
			return nil
		}
		for _, item := range n.Content {
			if f := find(item, path, kind); f != nil {
				return f
			}
		}
	}
	return nil
}

// nodeKind names the JSON kind of a node as encoding/json's type errors
// do (object, array, number, bool, null, string), so that find can pick
// the node such an error is about. It is not yamlstrict.KindName, which
// names YAML node kinds for messages ("a mapping", "a list", "a scalar")
// and does not tell scalars apart by their tag.
func nodeKind(n *yamlv3.Node) string {
	switch n.Kind {
	case yamlv3.MappingNode:
		return "object"
	case yamlv3.SequenceNode:
		return "array"
	case yamlv3.ScalarNode:
		switch n.Tag {
		case "!!int", "!!float":
			return "number"
		case "!!bool":
			return "bool"
		case "!!null":
			return "null"
		}
		return "string"
	}
	return ""
}

func jsonKind(v any) string {
	switch v.(type) {
	case []any:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a bool"
	case int64, float64:
		return "a number"
	}
	return fmt.Sprintf("%T", v)
}
