package rules

import (
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"
)

// The YAML decoder walks yaml.v3 nodes itself instead of using
// yaml.Unmarshal so that it can (1) reject unknown keys with the field path
// and the key's position, (2) keep going after an error and report every
// problem of a file in one run and (3) remember where each field was, so
// that validation errors found after decoding still point at the line.

// position is a 1-based line and column in a YAML file.
type position struct{ line, col int }

// yamlDecoder decodes YAML nodes into Go values, collecting errors.
type yamlDecoder struct {
	file string
	errs ErrorList
	// pos maps a field path (rules[0].match.names[1]) to its value node.
	pos map[string]position
	// work counts decoded nodes, to stop alias bombs (anchors that
	// expand exponentially) instead of running out of memory.
	work int
}

// maxWork bounds the number of YAML nodes one file decodes to, aliases
// expanded.
const maxWork = 200_000

// tooMuch counts one node of work and reports (once, as an error at n)
// when the file has exceeded maxWork.
func (d *yamlDecoder) tooMuch(n *yaml.Node, path string) bool {
	d.work++
	if d.work == maxWork+1 {
		d.errorf(n, path, "too many values: more than %d YAML nodes once aliases are expanded", maxWork)
	}
	return d.work > maxWork
}

func newYAMLDecoder(file string) *yamlDecoder {
	return &yamlDecoder{file: file, pos: map[string]position{}}
}

// errorf records an error about the field at path, located at node n.
func (d *yamlDecoder) errorf(n *yaml.Node, path, format string, args ...any) {
	d.errs = append(d.errs, &Error{File: d.file, Line: n.Line, Col: n.Column, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// errorAt records an error about the field at path, located where that
// field (or, when it is missing, its closest present parent) was written.
func (d *yamlDecoder) errorAt(path, format string, args ...any) {
	p := d.at(path)
	d.errs = append(d.errs, &Error{File: d.file, Line: p.line, Col: p.col, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// at returns the position of path or of its closest recorded parent.
func (d *yamlDecoder) at(path string) position {
	for {
		if p, ok := d.pos[path]; ok {
			return p
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			if p, ok := d.pos[""]; ok {
				return p
			}
			return position{1, 1}
		}
		path = path[:i]
	}
}

// parseDocument parses data as exactly one YAML document. It returns nil
// (and records an error) when data is not valid YAML.
func (d *yamlDecoder) parseDocument(data []byte) *yaml.Node {
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			d.errs = append(d.errs, &Error{File: d.file, Line: 1, Col: 1, Msg: "empty file"})
			return nil
		}
		d.syntaxError(err)
		return nil
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		d.errorf(&extra, "", "a file holds one YAML document; found a second one")
	case !errors.Is(err, io.EOF):
		d.syntaxError(err)
	}
	if len(doc.Content) == 0 {
		d.errs = append(d.errs, &Error{File: d.file, Line: 1, Col: 1, Msg: "empty file"})
		return nil
	}
	return doc.Content[0]
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError records a yaml.v3 parse error. yaml.v3 reports a line but no
// column: the column is then 1.
func (d *yamlDecoder) syntaxError(err error) {
	msg := err.Error()
	line := 1
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
	}
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Col: 1, Msg: "invalid YAML: " + msg})
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	templateType = reflect.TypeFor[*Template]()
	nodeType     = reflect.TypeFor[*yaml.Node]()
	anyType      = reflect.TypeFor[any]()
)

// joinPath appends a key to a field path.
func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	if key == "" || strings.ContainsAny(key, `.[]"' `) {
		return path + "[" + strconv.Quote(key) + "]"
	}
	return path + "." + key
}

func indexPath(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// resolve follows aliases.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// decode decodes n into v, a settable value. Supported: structs (yaml tags;
// unknown keys are errors), pointers to them (null allocates an empty
// one, so `- log:` means `- log: {}`), slices, string-keyed maps, strings,
// bools, ints, time.Duration ("5s"), *Template (the field named template
// must render JSON), *yaml.Node (kept as is) and any (JSON-like values).
func (d *yamlDecoder) decode(n *yaml.Node, v reflect.Value, path string) {
	n = resolve(n)
	if d.tooMuch(n, path) {
		return
	}
	d.pos[path] = position{n.Line, n.Column}
	t := v.Type()
	switch t {
	case nodeType:
		v.Set(reflect.ValueOf(n))
		return
	case durationType:
		d.decodeDuration(n, v, path)
		return
	case templateType:
		d.decodeTemplate(n, v, path)
		return
	case anyType:
		if x := d.decodeAny(n, path); x != nil {
			v.Set(reflect.ValueOf(x))
		}
		return
	}
	if t.Kind() == reflect.Pointer {
		if isNull(n) && t.Elem().Kind() != reflect.Struct {
			return
		}
		p := reflect.New(t.Elem())
		if !isNull(n) {
			d.decode(n, p.Elem(), path)
		}
		v.Set(p)
		return
	}
	if isNull(n) {
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Slice:
		d.decodeSlice(n, v, path)
	case reflect.Map:
		d.decodeMap(n, v, path)
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			d.errorf(n, path, "must be a string, not %s", kindName(n))
			return
		}
		v.SetString(n.Value)
	case reflect.Bool:
		var b bool
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&b) != nil {
			d.errorf(n, path, "must be true or false, not %s", describe(n))
			return
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int64, reflect.Int32:
		var i int64
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&i) != nil || v.OverflowInt(i) {
			d.errorf(n, path, "must be an integer, not %s", describe(n))
			return
		}
		v.SetInt(i)
	default:
		panic(fmt.Sprintf("rules: yamlDecoder cannot decode %s", t))
	}
}

func (d *yamlDecoder) decodeDuration(n *yaml.Node, v reflect.Value, path string) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.ScalarNode {
		d.errorf(n, path, "must be a duration such as 5s or 1m30s, not %s", kindName(n))
		return
	}
	dur, err := time.ParseDuration(n.Value)
	if err != nil {
		d.errorf(n, path, "must be a duration such as 5s or 1m30s, not %q", n.Value)
		return
	}
	if dur < 0 {
		d.errorf(n, path, "must not be negative")
		return
	}
	v.SetInt(int64(dur))
}

func (d *yamlDecoder) decodeTemplate(n *yaml.Node, v reflect.Value, path string) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.ScalarNode {
		d.errorf(n, path, "must be a template string, not %s", kindName(n))
		return
	}
	isJSON := strings.HasSuffix(path, ".template")
	t, err := ParseTemplate(path, n.Value, isJSON)
	if err != nil {
		d.errorf(n, path, "invalid template: %v", err)
		return
	}
	v.Set(reflect.ValueOf(t))
}

// shorthand is implemented by struct types that may be written as a
// single scalar: the scalar sets the field named by shorthandKey
// (`fields: [spec.size]` is `fields: [{path: spec.size}]`).
type shorthand interface{ shorthandKey() string }

var shorthandType = reflect.TypeFor[shorthand]()

func (d *yamlDecoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind == yaml.ScalarNode && v.Addr().Type().Implements(shorthandType) {
		key := v.Addr().Interface().(shorthand).shorthandKey()
		d.decode(n, v.FieldByIndex(fieldsOf(v.Type()).index[key]), joinPath(path, key))
		return
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "must be a mapping, not %s", kindName(n))
		return
	}
	info := fieldsOf(v.Type())
	for _, kv := range d.pairs(n, path) {
		k, val := kv[0], kv[1]
		idx, ok := info.index[k.Value]
		if !ok {
			d.errorf(k, joinPath(path, k.Value), "unknown key %q (known keys: %s)", k.Value, strings.Join(info.names, ", "))
			continue
		}
		d.decode(val, v.FieldByIndex(idx), joinPath(path, k.Value))
	}
}

func (d *yamlDecoder) decodeSlice(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, path, "must be a list, not %s", kindName(n))
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, c := range n.Content {
		d.decode(c, s.Index(i), indexPath(path, i))
	}
	v.Set(s)
}

func (d *yamlDecoder) decodeMap(n *yaml.Node, v reflect.Value, path string) {
	t := v.Type()
	if t.Key().Kind() != reflect.String {
		panic(fmt.Sprintf("rules: yamlDecoder cannot decode %s", t))
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "must be a mapping, not %s", kindName(n))
		return
	}
	m := reflect.MakeMap(t)
	for _, kv := range d.pairs(n, path) {
		k, val := kv[0], kv[1]
		p := joinPath(path, k.Value)
		e := reflect.New(t.Elem()).Elem()
		if t.Elem().Kind() == reflect.String {
			// Map values such as headers and env accept any scalar as
			// text: X-Retries: 3 is the string "3".
			val = resolve(val)
			d.pos[p] = position{val.Line, val.Column}
			if val.Kind != yaml.ScalarNode || isNull(val) {
				d.errorf(val, p, "must be a string, not %s", describe(val))
				continue
			}
			e.SetString(val.Value)
		} else {
			d.decode(val, e, p)
		}
		m.SetMapIndex(reflect.ValueOf(k.Value).Convert(t.Key()), e)
	}
	v.Set(m)
}

// pairs returns the key/value pairs of a mapping node with YAML merge keys
// (<<: *anchor) expanded; keys written in the mapping override merged ones.
// Duplicate and non-scalar keys are errors.
func (d *yamlDecoder) pairs(n *yaml.Node, path string) [][2]*yaml.Node {
	var out [][2]*yaml.Node
	seen := map[string]bool{}
	var merged [][2]*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := resolve(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, path, "keys must be strings, not %s", kindName(k))
			continue
		}
		if k.ShortTag() == "!!merge" {
			merged = append(merged, d.mergePairs(resolve(val), path, 0)...)
			continue
		}
		if seen[k.Value] {
			d.errorf(k, joinPath(path, k.Value), "duplicate key %q", k.Value)
			continue
		}
		seen[k.Value] = true
		out = append(out, [2]*yaml.Node{k, val})
	}
	for _, kv := range merged {
		if !seen[kv[0].Value] {
			seen[kv[0].Value] = true
			out = append(out, kv)
		}
	}
	return out
}

func (d *yamlDecoder) mergePairs(n *yaml.Node, path string, depth int) [][2]*yaml.Node {
	if depth > 10 {
		d.errorf(n, path, "merge keys nested too deeply")
		return nil
	}
	switch n.Kind {
	case yaml.MappingNode:
		return d.pairs(n, path)
	case yaml.SequenceNode:
		var out [][2]*yaml.Node
		for _, c := range n.Content {
			out = append(out, d.mergePairs(resolve(c), path, depth+1)...)
		}
		return out
	}
	d.errorf(n, path, "a merge key (<<) needs a mapping or a list of mappings, not %s", kindName(n))
	return nil
}

// decodeAny decodes n into a JSON-like value as Kubernetes' unstructured
// decoder makes them: map[string]any, []any, string, int64, float64, bool
// and nil. Timestamps stay strings (Kubernetes stores them as strings).
func (d *yamlDecoder) decodeAny(n *yaml.Node, path string) any {
	return d.decodeAnyDepth(n, path, 0)
}

func (d *yamlDecoder) decodeAnyDepth(n *yaml.Node, path string, depth int) any {
	n = resolve(n)
	if d.tooMuch(n, path) {
		return nil
	}
	d.pos[path] = position{n.Line, n.Column}
	if depth > 200 {
		d.errorf(n, path, "value nested too deeply")
		return nil
	}
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for _, kv := range d.pairs(n, path) {
			m[kv[0].Value] = d.decodeAnyDepth(kv[1], joinPath(path, kv[0].Value), depth+1)
		}
		return m
	case yaml.SequenceNode:
		l := make([]any, len(n.Content))
		for i, c := range n.Content {
			l[i] = d.decodeAnyDepth(c, indexPath(path, i), depth+1)
		}
		return l
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return nil
		case "!!bool":
			var b bool
			if err := n.Decode(&b); err == nil {
				return b
			}
		case "!!int":
			var i int64
			if err := n.Decode(&i); err == nil {
				return i
			}
			var f float64
			if err := n.Decode(&f); err == nil && !math.IsInf(f, 0) {
				return f
			}
			d.errorf(n, path, "number %s is out of range", n.Value)
			return nil
		case "!!float":
			var f float64
			if err := n.Decode(&f); err == nil {
				if math.IsInf(f, 0) || math.IsNaN(f) {
					d.errorf(n, path, "%s cannot be represented in JSON", n.Value)
					return nil
				}
				return f
			}
		}
		return n.Value
	}
	d.errorf(n, path, "unsupported YAML node")
	return nil
}

// structInfo lists the YAML keys of a struct type.
type structInfo struct {
	index map[string][]int
	names []string
}

var structInfos sync.Map // reflect.Type -> *structInfo

func fieldsOf(t reflect.Type) *structInfo {
	if si, ok := structInfos.Load(t); ok {
		return si.(*structInfo)
	}
	si := &structInfo{index: map[string][]int{}}
	for _, f := range reflect.VisibleFields(t) {
		tag := f.Tag.Get("yaml")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() || f.Anonymous {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name[:1]) + f.Name[1:]
		}
		si.index[name] = f.Index
		si.names = append(si.names, name)
	}
	sort.Strings(si.names)
	structInfos.Store(t, si)
	return si
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return "a scalar"
	}
	return "an alias"
}

// describe names a node for a type error: its text when it is a scalar.
func describe(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode {
		if isNull(n) {
			return "null"
		}
		return strconv.Quote(n.Value)
	}
	return kindName(n)
}
