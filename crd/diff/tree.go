package diff

import (
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/fieldwatch/fieldwatch/internal/fieldpath"
)

// Mark is what a change between two CRDs did to a version or a field of
// its schema, in a SchemaTree.
type Mark string

const (
	// Unchanged: the field is in both schemas and no check is about it.
	Unchanged Mark = ""
	// MarkAdded: only the new CRD has the field (or version).
	MarkAdded Mark = "added"
	// MarkRemoved: only the old CRD has the field (or version).
	MarkRemoved Mark = "removed"
	// MarkNarrowed: a breaking or unknown check is about the field.
	MarkNarrowed Mark = "narrowed"
	// MarkLoosened: only safe checks are about the field.
	MarkLoosened Mark = "loosened"
)

// SchemaTree is the schemas of two CRDs' versions merged into one tree
// per version, each field marked with what the change did to it: the
// view of a CRD's evolution between two states, field by field.
type SchemaTree struct {
	// Checks are the checks about the whole CRD (Version "").
	Checks []Check `json:"checks,omitempty"`
	// Versions are the new CRD's versions in its order, then those only
	// the old one has.
	Versions []TreeVersion `json:"versions"`
}

// TreeVersion is one version's schema fields.
type TreeVersion struct {
	Name string `json:"name"`
	// Mark is added or removed for a version only one CRD has, otherwise
	// the mark of the schema's root.
	Mark Mark `json:"mark,omitempty"`
	// Checks are the checks about the version or its schema's root.
	Checks []Check `json:"checks,omitempty"`
	// Changed reports whether the version, or a field of it, is marked.
	Changed bool `json:"changed,omitempty"`
	// Fields are the root's properties (apiVersion, kind, metadata,
	// spec, status, as the schema has them), in name order.
	Fields []TreeField `json:"fields,omitempty"`
}

// TreeField is one field of a version's schema.
type TreeField struct {
	// Name is the property's name; "[*]" for a list's items or a map's
	// values.
	Name string `json:"name"`
	// Field is the field in the rules path syntax (spec.items[*].name).
	Field string `json:"field"`
	// Type is the new schema's type (the old one's for a removed field);
	// int-or-string for x-kubernetes-int-or-string; "" when none.
	Type string `json:"type,omitempty"`
	Mark Mark   `json:"mark,omitempty"`
	// Checks are the checks whose schema path is this field's, or inside
	// it where the tree has no node (allOf, anyOf, oneOf, not).
	Checks []Check `json:"checks,omitempty"`
	// Changed reports whether the field or one below it is marked.
	Changed bool        `json:"changed,omitempty"`
	Fields  []TreeField `json:"fields,omitempty"`

	path string // in the schema, as Check.Path
}

// Tree merges old's and new's schemas into a SchemaTree and places r's
// checks (Compare(old, new)) on its fields. Its size is that of the two
// schemas.
func Tree(old, new *apiextensionsv1.CustomResourceDefinition, r *Result) *SchemaTree {
	t := &SchemaTree{}
	byVersion := map[string][]Check{}
	for _, c := range r.Checks {
		if c.Version == "" {
			t.Checks = append(t.Checks, c)
			continue
		}
		byVersion[c.Version] = append(byVersion[c.Version], c)
	}
	schemaOf := func(crd *apiextensionsv1.CustomResourceDefinition, name string) (*apiextensionsv1.JSONSchemaProps, bool) {
		for i := range crd.Spec.Versions {
			if v := &crd.Spec.Versions[i]; v.Name == name {
				if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
					return nil, true
				}
				return v.Schema.OpenAPIV3Schema, true
			}
		}
		return nil, false
	}
	var names []string
	for _, v := range new.Spec.Versions {
		names = append(names, v.Name)
	}
	for _, v := range old.Spec.Versions {
		if !slices.Contains(names, v.Name) {
			names = append(names, v.Name)
		}
	}
	for _, name := range names {
		os, inOld := schemaOf(old, name)
		ns, inNew := schemaOf(new, name)
		tv := TreeVersion{Name: name}
		b := treeBuilder{at: map[string]*TreeField{}}
		tv.Fields = b.children("", "", os, ns)
		b.index(tv.Fields)
		for _, c := range byVersion[name] {
			if f := b.owner(c.Path); f != nil {
				f.Checks = append(f.Checks, c)
			} else {
				tv.Checks = append(tv.Checks, c)
			}
		}
		switch {
		case !inOld:
			tv.Mark = MarkAdded
		case !inNew:
			tv.Mark = MarkRemoved
		default:
			tv.Mark = markOf(Unchanged, tv.Checks)
		}
		below := settle(tv.Fields)
		tv.Changed = tv.Mark != Unchanged || below
		t.Versions = append(t.Versions, tv)
	}
	return t
}

// treeBuilder keeps the fields of one version's tree by schema path, to
// place the checks on them.
type treeBuilder struct {
	at map[string]*TreeField
}

// index keeps every field of the built tree by its path.
func (b *treeBuilder) index(fields []TreeField) {
	for i := range fields {
		b.at[fields[i].path] = &fields[i]
		b.index(fields[i].Fields)
	}
}

// children returns the merged children of the schemas o and n (either
// nil) at path and field.
func (b *treeBuilder) children(path, field string, o, n *apiextensionsv1.JSONSchemaProps) []TreeField {
	var out []TreeField
	var oprops, nprops map[string]apiextensionsv1.JSONSchemaProps
	if o != nil {
		oprops = o.Properties
	}
	if n != nil {
		nprops = n.Properties
	}
	for _, name := range sortedNames(oprops, nprops) {
		op, inOld := oprops[name]
		np, inNew := nprops[name]
		var os, ns *apiextensionsv1.JSONSchemaProps
		if inOld {
			os = &op
		}
		if inNew {
			ns = &np
		}
		out = append(out, b.field(path+"/properties/"+escapePointer(name), fieldpath.Child(field, name), name, os, ns))
	}
	items := func(s *apiextensionsv1.JSONSchemaProps) *apiextensionsv1.JSONSchemaProps {
		if s != nil && s.Items != nil {
			return s.Items.Schema
		}
		return nil
	}
	if oi, ni := items(o), items(n); oi != nil || ni != nil {
		out = append(out, b.field(path+"/items", fieldpath.Every(field), "[*]", oi, ni))
	}
	values := func(s *apiextensionsv1.JSONSchemaProps) *apiextensionsv1.JSONSchemaProps {
		if s != nil && s.AdditionalProperties != nil {
			return s.AdditionalProperties.Schema
		}
		return nil
	}
	if oa, na := values(o), values(n); oa != nil || na != nil {
		out = append(out, b.field(path+"/additionalProperties", fieldpath.Every(field), "[*]", oa, na))
	}
	return out
}

func (b *treeBuilder) field(path, field, name string, o, n *apiextensionsv1.JSONSchemaProps) TreeField {
	f := TreeField{Name: name, Field: field, path: path}
	s := n
	switch {
	case o == nil:
		f.Mark = MarkAdded
	case n == nil:
		f.Mark, s = MarkRemoved, o
	}
	f.Type = s.Type
	if s.XIntOrString {
		f.Type = "int-or-string"
	}
	f.Fields = b.children(path, field, o, n)
	return f
}

// owner returns the field a check at the schema path belongs to: the one
// at path, or its nearest ancestor in the tree; nil for the root.
func (b *treeBuilder) owner(path string) *TreeField {
	for path != "" {
		if f, ok := b.at[path]; ok {
			return f
		}
		i := strings.LastIndexByte(path, '/')
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return nil
}

// settle marks fields by their checks and sets Changed; it reports
// whether any of fields is changed.
func settle(fields []TreeField) bool {
	changed := false
	for i := range fields {
		f := &fields[i]
		f.Mark = markOf(f.Mark, f.Checks)
		below := settle(f.Fields)
		f.Changed = f.Mark != Unchanged || below
		changed = changed || f.Changed
	}
	return changed
}

// markOf is a field's mark from its checks, when its presence alone
// does not mark it.
func markOf(m Mark, checks []Check) Mark {
	if m != Unchanged {
		return m
	}
	for _, c := range checks {
		if c.Severity != Safe {
			return MarkNarrowed
		}
	}
	if len(checks) > 0 {
		return MarkLoosened
	}
	return Unchanged
}
