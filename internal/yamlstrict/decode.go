package yamlstrict

import (
	"encoding"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fieldwatch/fieldwatch/fileerr"
	"github.com/fieldwatch/fieldwatch/internal/fieldpath"
)

// MaxNodes bounds the number of YAML values one document decodes to,
// aliases expanded, and of the keys that merge keys (<<) bring in, so that
// an alias or merge bomb (anchors that expand exponentially) is an error
// instead of running out of time or memory.
const MaxNodes = 200_000

// MaxBytes bounds the size of a document.
const MaxBytes = 4 << 20

// MaxKeyBytes bounds the length of a mapping key.
const MaxKeyBytes = 1024

// Field paths cost memory and time in proportion to their length, and
// aliases can give a small document many long ones (values nested under
// long keys, repeated): the paths a document's values are decoded at may
// add up to at most pathBytesPerByte times the document's size plus
// minPathBytes, and never more than maxPathBytes.
const (
	minPathBytes     = 1 << 20
	pathBytesPerByte = 32
	maxPathBytes     = 64 << 20
)

// maxDepth bounds the nesting of free-form values (any).
const maxDepth = 200

// Positions tells where each field of a decoded document was written.
type Positions struct {
	nodes map[string]*yaml.Node
}

// Node returns the value node of the field at path, nil when the document
// does not have it.
func (p *Positions) Node(path string) *yaml.Node { return p.nodes[path] }

// Has reports whether the document has the field at path (null counts).
func (p *Positions) Has(path string) bool { return p.nodes[path] != nil }

// At returns the line and column of the field at path or, when the
// document lacks it, of its closest parent that it has (1:1 when none).
func (p *Positions) At(path string) (line, col int) {
	for {
		if n, ok := p.nodes[path]; ok {
			return n.Line, n.Column
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			if n, ok := p.nodes[""]; ok {
				return n.Line, n.Column
			}
			return 1, 1
		}
		path = path[:i]
	}
}

// Unmarshal decodes data, which must be exactly one YAML document, into
// v, a pointer. It returns where each field was, and every error found
// (nil when there is none). What it can decode:
//
//   - structs (yaml tags; a field without one is its name with a lowercase
//     first letter; unknown keys are errors), and pointers to them (null
//     allocates an empty one, so `log:` means `log: {}`);
//   - slices, maps with string keys (string values accept any scalar as
//     text: X-Retries: 3 is "3"), strings (any scalar), bools, ints;
//   - time.Duration, written as "5s" or "1m30s" (negative is an error);
//   - any, as the JSON-like values Kubernetes' unstructured decoder makes:
//     map[string]any, []any, string, int64, float64, bool and nil;
//   - *any: set when the key is present, pointing to nil for null, so that
//     a null is told apart from an absent key;
//   - types implementing yaml.Unmarshaler (given the node, null included,
//     except behind a pointer, which null leaves nil) or
//     encoding.TextUnmarshaler (given a scalar's text; null leaves them
//     unset); their errors are reported at the node;
//   - *yaml.Node, kept as it is;
//   - struct types implementing Shorthand also from a lone scalar.
//
// Positions are kept for the values written in the document and for each
// place an alias or merge key is used, not for what the alias expands to
// there (an error inside it points at the anchor's line). Documents larger
// than MaxBytes, keys longer than MaxKeyBytes, and documents that expand to
// more than MaxNodes values or too many bytes of field paths are errors.
//
// Other types make it panic: that is a programming error, not bad input.
func Unmarshal(data []byte, v any) (*Positions, fileerr.List) {
	d := &decoder{pos: &Positions{nodes: map[string]*yaml.Node{}}}
	if len(data) > MaxBytes {
		d.errs = append(d.errs, &fileerr.Error{Line: 1, Col: 1, Msg: fmt.Sprintf("the file is %d bytes, more than the %d a file may have", len(data), MaxBytes)})
		return d.pos, d.errs
	}
	d.size, d.pathBudget = len(data), min(maxPathBytes, minPathBytes+pathBytesPerByte*len(data))
	root := d.parseDocument(data)
	if root == nil {
		return d.pos, d.errs
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		panic(fmt.Sprintf("yamlstrict: Unmarshal needs a non-nil pointer, not %T", v))
	}
	d.decode(root, rv.Elem(), "")
	return d.pos, d.errs
}

// Shorthand is implemented by struct types that may also be written as a
// lone scalar, which then sets the field YAMLShorthand names by its YAML
// key (`fields: [spec.size]` for `fields: [{path: spec.size}]`).
type Shorthand interface{ YAMLShorthand() string }

// decoder decodes YAML nodes into Go values, collecting errors.
type decoder struct {
	errs fileerr.List
	pos  *Positions
	// work counts decoded nodes and merged keys against MaxNodes.
	work int
	// pathBytes counts the bytes of the field paths of decoded values
	// against pathBudget.
	pathBytes, pathBudget int
	size                  int // of the document
	// aliased is above zero while decoding what an alias or merge key
	// expands to: positions are not kept there.
	aliased int
}

// tooMuch counts one node of work and reports (once, as an error at n)
// when the document has exceeded MaxNodes or its path budget.
func (d *decoder) tooMuch(n *yaml.Node, path string) bool {
	over := d.work > MaxNodes || d.pathBytes > d.pathBudget
	d.work++
	d.pathBytes += len(path)
	switch {
	case over:
	case d.work > MaxNodes:
		d.errorf(n, path, "too many values: more than %d YAML nodes once aliases and merge keys are expanded", MaxNodes)
	case d.pathBytes > d.pathBudget:
		d.errorf(n, path, "too many values: aliases and merge keys expand to more than %d bytes of field paths, the limit for a file of %d bytes", d.pathBudget, d.size)
	default:
		return false
	}
	return true
}

// at records that the value at path is n, unless it is inside what an
// alias expands to.
func (d *decoder) at(path string, n *yaml.Node) {
	if d.aliased == 0 {
		d.pos.nodes[path] = n
	}
}

// errorf records an error about the field at path, located at node n.
func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) {
	d.errs = append(d.errs, &fileerr.Error{Line: n.Line, Col: n.Column, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// parseDocument parses data as exactly one YAML document. It returns nil
// (and records an error) when data is not valid YAML or holds nothing.
func (d *decoder) parseDocument(data []byte) *yaml.Node {
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			d.errs = append(d.errs, &fileerr.Error{Line: 1, Col: 1, Msg: "empty file"})
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
		d.errs = append(d.errs, &fileerr.Error{Line: 1, Col: 1, Msg: "empty file"})
		return nil
	}
	return doc.Content[0]
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError records a yaml.v3 parse error. yaml.v3 reports a line but no
// column: the column is then 1.
func (d *decoder) syntaxError(err error) {
	msg := err.Error()
	line := 1
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
	}
	d.errs = append(d.errs, &fileerr.Error{Line: line, Col: 1, Msg: "invalid YAML: " + msg})
}

var (
	durationType        = reflect.TypeFor[time.Duration]()
	nodeType            = reflect.TypeFor[*yaml.Node]()
	anyType             = reflect.TypeFor[any]()
	unmarshalerType     = reflect.TypeFor[yaml.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
	shorthandType       = reflect.TypeFor[Shorthand]()
)

// resolve follows aliases.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

// IsNull reports whether n is a null scalar (null, ~ or nothing).
func IsNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// decode decodes n into v, a settable value (see Unmarshal).
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	aliased := n.Kind == yaml.AliasNode
	n = resolve(n)
	if d.tooMuch(n, path) {
		return
	}
	d.at(path, n)
	if aliased {
		d.aliased++
		defer func() { d.aliased-- }()
	}
	t := v.Type()
	switch {
	case t == nodeType:
		v.Set(reflect.ValueOf(n))
		return
	case t == durationType:
		d.decodeDuration(n, v, path)
		return
	case t == anyType:
		if x := d.decodeAny(n, path, 0); x != nil {
			v.Set(reflect.ValueOf(x))
		}
		return
	case reflect.PointerTo(t).Implements(unmarshalerType):
		if err := v.Addr().Interface().(yaml.Unmarshaler).UnmarshalYAML(n); err != nil {
			d.errorf(n, path, "%s", err.Error())
		}
		return
	case reflect.PointerTo(t).Implements(textUnmarshalerType):
		d.decodeText(n, v, path)
		return
	}
	if t.Kind() == reflect.Pointer {
		d.decodePointer(n, v, path)
		return
	}
	if IsNull(n) {
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
			d.errorf(n, path, "must be a string, not %s", KindName(n))
			return
		}
		v.SetString(n.Value)
	case reflect.Bool:
		var b bool
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&b) != nil {
			d.errorf(n, path, "must be true or false, not %s", Describe(n))
			return
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int64, reflect.Int32:
		var i int64
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&i) != nil || v.OverflowInt(i) {
			d.errorf(n, path, "must be an integer, not %s", Describe(n))
			return
		}
		v.SetInt(i)
	default:
		panic(fmt.Sprintf("yamlstrict: cannot decode %s", t))
	}
}

// decodePointer decodes into a pointer: null leaves it nil, except that
// it allocates an empty plain struct (`log:` is `log: {}`) and a nil any.
func (d *decoder) decodePointer(n *yaml.Node, v reflect.Value, path string) {
	elem := v.Type().Elem()
	null := IsNull(n)
	if null && elem != anyType && (elem.Kind() != reflect.Struct || decodesItself(elem)) {
		return
	}
	p := reflect.New(elem)
	if !null {
		d.decode(n, p.Elem(), path)
	}
	v.Set(p)
}

// decodesItself reports whether *t implements yaml.Unmarshaler or
// encoding.TextUnmarshaler.
func decodesItself(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return p.Implements(unmarshalerType) || p.Implements(textUnmarshalerType)
}

func (d *decoder) decodeDuration(n *yaml.Node, v reflect.Value, path string) {
	if IsNull(n) {
		return
	}
	if n.Kind != yaml.ScalarNode {
		d.errorf(n, path, "must be a duration such as 5s or 1m30s, not %s", KindName(n))
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

// decodeText decodes a scalar through encoding.TextUnmarshaler.
func (d *decoder) decodeText(n *yaml.Node, v reflect.Value, path string) {
	if IsNull(n) {
		return
	}
	if n.Kind != yaml.ScalarNode {
		d.errorf(n, path, "must be a string, not %s", KindName(n))
		return
	}
	if err := v.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(n.Value)); err != nil {
		d.errorf(n, path, "%s", err.Error())
	}
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind == yaml.ScalarNode && v.Addr().Type().Implements(shorthandType) {
		key := v.Addr().Interface().(Shorthand).YAMLShorthand()
		d.decode(n, v.FieldByIndex(fieldsOf(v.Type()).index[key]), fieldpath.Child(path, key))
		return
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "must be a mapping, not %s", KindName(n))
		return
	}
	info := fieldsOf(v.Type())
	for _, kv := range d.pairs(n, path) {
		k, val := kv[0], kv[1]
		idx, ok := info.index[k.Value]
		if !ok {
			d.errorf(k, fieldpath.Child(path, k.Value), "unknown key %q (known keys: %s)", k.Value, strings.Join(info.names, ", "))
			continue
		}
		d.decode(val, v.FieldByIndex(idx), fieldpath.Child(path, k.Value))
	}
}

func (d *decoder) decodeSlice(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, path, "must be a list, not %s", KindName(n))
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, c := range n.Content {
		d.decode(c, s.Index(i), fieldpath.Item(path, i))
	}
	v.Set(s)
}

func (d *decoder) decodeMap(n *yaml.Node, v reflect.Value, path string) {
	t := v.Type()
	if t.Key().Kind() != reflect.String {
		panic(fmt.Sprintf("yamlstrict: cannot decode %s", t))
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "must be a mapping, not %s", KindName(n))
		return
	}
	m := reflect.MakeMap(t)
	for _, kv := range d.pairs(n, path) {
		k, val := kv[0], kv[1]
		p := fieldpath.Child(path, k.Value)
		e := reflect.New(t.Elem()).Elem()
		if t.Elem().Kind() == reflect.String {
			// Map values such as headers and env accept any scalar as
			// text: X-Retries: 3 is the string "3".
			val = resolve(val)
			if d.tooMuch(val, p) {
				return
			}
			d.at(p, val)
			if val.Kind != yaml.ScalarNode || IsNull(val) {
				d.errorf(val, p, "must be a string, not %s", Describe(val))
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
// (<<: *anchor) expanded; keys written in the mapping override merged ones,
// and merged values come as aliases of what they merge (positions are not
// kept inside them). Duplicate, non-scalar and too long keys are errors.
// Every pair, merged ones included, counts towards MaxNodes.
func (d *decoder) pairs(n *yaml.Node, path string) [][2]*yaml.Node {
	var out [][2]*yaml.Node
	seen := map[string]bool{}
	var merged [][2]*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := resolve(n.Content[i]), n.Content[i+1]
		if d.tooMuch(k, path) {
			return nil
		}
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, path, "keys must be strings, not %s", KindName(k))
			continue
		}
		if len(k.Value) > MaxKeyBytes {
			d.errorf(k, path, "key %q... is longer than %d bytes", k.Value[:32], MaxKeyBytes)
			continue
		}
		if k.ShortTag() == "!!merge" {
			merged = append(merged, d.mergePairs(resolve(val), path, 0)...)
			continue
		}
		if seen[k.Value] {
			d.errorf(k, fieldpath.Child(path, k.Value), "duplicate key %q", k.Value)
			continue
		}
		seen[k.Value] = true
		out = append(out, [2]*yaml.Node{k, val})
	}
	for _, kv := range merged {
		if !seen[kv[0].Value] {
			seen[kv[0].Value] = true
			if kv[1].Kind != yaml.AliasNode {
				kv[1] = &yaml.Node{Kind: yaml.AliasNode, Alias: kv[1], Line: kv[1].Line, Column: kv[1].Column}
			}
			out = append(out, kv)
		}
	}
	return out
}

func (d *decoder) mergePairs(n *yaml.Node, path string, depth int) [][2]*yaml.Node {
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
	d.errorf(n, path, "a merge key (<<) needs a mapping or a list of mappings, not %s", KindName(n))
	return nil
}

// decodeAny decodes n into a JSON-like value as Kubernetes' unstructured
// decoder makes them: map[string]any, []any, string, int64, float64, bool
// and nil. Timestamps stay strings (Kubernetes stores them as strings).
func (d *decoder) decodeAny(n *yaml.Node, path string, depth int) any {
	aliased := n.Kind == yaml.AliasNode
	n = resolve(n)
	if d.tooMuch(n, path) {
		return nil
	}
	d.at(path, n)
	if aliased {
		d.aliased++
		defer func() { d.aliased-- }()
	}
	if depth > maxDepth {
		d.errorf(n, path, "value nested too deeply")
		return nil
	}
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for _, kv := range d.pairs(n, path) {
			m[kv[0].Value] = d.decodeAny(kv[1], fieldpath.Child(path, kv[0].Value), depth+1)
		}
		return m
	case yaml.SequenceNode:
		l := make([]any, len(n.Content))
		for i, c := range n.Content {
			l[i] = d.decodeAny(c, fieldpath.Item(path, i), depth+1)
		}
		return l
	case yaml.ScalarNode:
		return d.scalar(n, path)
	}
	d.errorf(n, path, "unsupported YAML node")
	return nil
}

// scalar decodes a scalar node as a JSON-like value.
func (d *decoder) scalar(n *yaml.Node, path string) any {
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
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" || !f.IsExported() || f.Anonymous {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name[:1]) + f.Name[1:]
		}
		si.index[name] = f.Index
		si.names = append(si.names, name)
	}
	slices.Sort(si.names)
	structInfos.Store(t, si)
	return si
}

// KindName names a node's kind for an error: a mapping, a list, a scalar.
func KindName(n *yaml.Node) string {
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

// Describe names a node for a type error: its text, quoted, when it is a
// scalar ("null" for null), its kind otherwise.
func Describe(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode {
		if IsNull(n) {
			return "null"
		}
		return strconv.Quote(n.Value)
	}
	return KindName(n)
}
