package diff

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/fieldwatch/fieldwatch/internal/fieldpath"
)

// walker compares the schemas of one version.
type walker struct {
	r       *Result
	version string
	// descriptions: compare descriptions too (description-changed).
	descriptions bool
}

// empty stands for an absent schema where one side of a composition (or
// of a nested value validation) has a node the other lacks: comparing
// against it reports every constraint as added or removed.
var empty = &apiextensionsv1.JSONSchemaProps{}

func (w *walker) add(path, field, check string, sev Severity, old, new any, format string, args ...any) {
	w.r.add(Check{Version: w.version, Path: path, Field: field, Check: check, Old: old, New: new, Severity: sev, Message: fmt.Sprintf(format, args...)})
}

// compare compares one schema node. path is its JSON pointer in the
// version's schema, field the object field it describes. composed is true
// inside allOf, anyOf, oneOf and not, where properties, items and
// additionalProperties only add value validations to fields the
// surrounding schema defines: a property there that one side lacks is
// compared against an empty schema instead of being a field added or
// removed.
func (w *walker) compare(path, field string, o, n *apiextensionsv1.JSONSchemaProps, composed bool) {
	o, n = withoutIntOrStringAnyOf(o), withoutIntOrStringAnyOf(n)
	if !w.compareType(path, field, o, n) {
		return // a changed type makes everything below meaningless
	}
	w.compareFlags(path, field, o, n)
	if w.descriptions && o.Description != n.Description {
		w.add(path+"/description", field, "description-changed", Safe, orNil(o.Description), orNil(n.Description), "%s: description changed", fieldName(field))
	}
	w.compareStrings(path, field, o, n)
	w.compareEnum(path, field, o, n)
	w.compareDefault(path, field, o, n)
	w.compareLimits(path, field, o, n)
	w.compareLists(path, field, o, n)
	w.compareValidations(path, field, o, n)
	w.compareRequired(path, field, o, n)
	w.compareProperties(path, field, o, n, composed)
	w.compareItems(path, field, o, n, composed)
	w.compareAdditional(path, field, o, n, composed)
	w.compareAllOf(path, field, o.AllOf, n.AllOf)
	w.compareAlternatives(path+"/anyOf", field, "anyof", o.AnyOf, n.AnyOf)
	w.compareAlternatives(path+"/oneOf", field, "oneof", o.OneOf, n.OneOf)
	w.compareNot(path, field, o.Not, n.Not)
	w.compareUnsupported(path, field, o, n)
}

// withoutIntOrStringAnyOf drops the anyOf of an integer and a string that
// kubebuilder and Kubernetes' own types put beside
// x-kubernetes-int-or-string: it is part of the type.
func withoutIntOrStringAnyOf(s *apiextensionsv1.JSONSchemaProps) *apiextensionsv1.JSONSchemaProps {
	if !s.XIntOrString || len(s.AnyOf) != 2 {
		return s
	}
	a, b := &s.AnyOf[0], &s.AnyOf[1]
	if a.Type == "string" {
		a, b = b, a
	}
	if a.Type != "integer" || b.Type != "string" || !isBareType(a) || !isBareType(b) {
		return s
	}
	c := *s
	c.AnyOf = nil
	return &c
}

// isBareType reports whether s has nothing but a type.
func isBareType(s *apiextensionsv1.JSONSchemaProps) bool {
	c := *s
	c.Type = ""
	return reflect.DeepEqual(c, apiextensionsv1.JSONSchemaProps{})
}

// typeName is a node's type, int-or-string included; "" is any type.
func typeName(s *apiextensionsv1.JSONSchemaProps) string {
	if s.XIntOrString {
		return "int-or-string"
	}
	return s.Type
}

// compareType reports a type change and returns false when the subtree is
// not worth comparing further.
func (w *walker) compareType(path, field string, o, n *apiextensionsv1.JSONSchemaProps) bool {
	ot, nt := typeName(o), typeName(n)
	if ot == nt {
		return true
	}
	widened := nt == "" ||
		(ot == "integer" && (nt == "number" || nt == "int-or-string")) ||
		(ot == "string" && nt == "int-or-string")
	if widened {
		w.add(path+"/type", field, "type-widened", Safe, orNil(ot), orNil(nt), "%s accepts more: type %s became %s", fieldName(field), typeOrAny(ot), typeOrAny(nt))
		return true
	}
	w.add(path+"/type", field, "type-changed", Breaking, orNil(ot), orNil(nt), "%s changed type from %s to %s", fieldName(field), typeOrAny(ot), typeOrAny(nt))
	return false
}

func typeOrAny(t string) string {
	if t == "" {
		return "any"
	}
	return t
}

func orNil(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func fieldName(field string) string {
	if field == "" {
		return "the object"
	}
	return field
}

func boolOf(b *bool) bool { return b != nil && *b }

// compareFlags compares nullable, x-kubernetes-preserve-unknown-fields,
// x-kubernetes-embedded-resource and uniqueItems.
func (w *walker) compareFlags(path, field string, o, n *apiextensionsv1.JSONSchemaProps) {
	f := fieldName(field)
	switch {
	case o.Nullable && !n.Nullable:
		w.add(path+"/nullable", field, "nullable-removed", Breaking, true, false, "%s no longer accepts null", f)
	case !o.Nullable && n.Nullable && n.Default != nil:
		w.add(path+"/nullable", field, "nullable-added", Breaking, false, true,
			"%s accepts null: an explicit null now stays null instead of being defaulted to %s", f, canonical(n.Default.Raw))
	case !o.Nullable && n.Nullable:
		w.add(path+"/nullable", field, "nullable-added", Safe, false, true, "%s accepts null", f)
	}
	op, np := boolOf(o.XPreserveUnknownFields), boolOf(n.XPreserveUnknownFields)
	switch {
	case op && !np:
		w.add(path+"/x-kubernetes-preserve-unknown-fields", field, "preserve-unknown-fields-removed", Breaking, true, nil,
			"%s no longer keeps unknown fields: the apiserver prunes them from every object", f)
	case !op && np:
		w.add(path+"/x-kubernetes-preserve-unknown-fields", field, "preserve-unknown-fields-added", Safe, nil, true, "%s keeps unknown fields", f)
	}
	switch {
	case !o.XEmbeddedResource && n.XEmbeddedResource:
		w.add(path+"/x-kubernetes-embedded-resource", field, "embedded-resource-added", Breaking, false, true,
			"%s must now be a Kubernetes object with apiVersion, kind and valid metadata", f)
	case o.XEmbeddedResource && !n.XEmbeddedResource:
		w.add(path+"/x-kubernetes-embedded-resource", field, "embedded-resource-removed", Unknown, true, false,
			"%s is no longer an embedded object: its apiVersion, kind and metadata are pruned unless the schema declares them", f)
	}
	switch {
	case !o.UniqueItems && n.UniqueItems:
		w.add(path+"/uniqueItems", field, "unique-items-added", Breaking, false, true, "%s must now hold distinct items", f)
	case o.UniqueItems && !n.UniqueItems:
		w.add(path+"/uniqueItems", field, "unique-items-removed", Safe, true, false, "%s may hold repeated items", f)
	}
}

// compareStrings compares pattern and format: a new one can reject
// existing values (breaking); a changed one may or may not (unknown: the
// comparison does not decide whether one regular expression or format
// accepts everything another did).
func (w *walker) compareStrings(path, field string, o, n *apiextensionsv1.JSONSchemaProps) {
	f := fieldName(field)
	for _, s := range []struct{ key, name, old, new string }{
		{"pattern", "pattern", o.Pattern, n.Pattern},
		{"format", "format", o.Format, n.Format},
	} {
		switch {
		case s.old == s.new:
		case s.old == "":
			w.add(path+"/"+s.key, field, s.name+"-added", Breaking, nil, s.new, "%s must now match %s %q", f, s.name, s.new)
		case s.new == "":
			w.add(path+"/"+s.key, field, s.name+"-removed", Safe, s.old, nil, "%s no longer has to match %s %q", f, s.name, s.old)
		default:
			w.add(path+"/"+s.key, field, s.name+"-changed", Unknown, s.old, s.new, "%s changed %s from %q to %q: values valid before may not match", f, s.name, s.old, s.new)
		}
	}
}

// compareEnum compares enum lists as sets of JSON values.
func (w *walker) compareEnum(path, field string, o, n *apiextensionsv1.JSONSchemaProps) {
	f := fieldName(field)
	switch {
	case len(o.Enum) == 0 && len(n.Enum) == 0:
	case len(o.Enum) == 0:
		w.add(path+"/enum", field, "enum-added", Breaking, nil, plainList(n.Enum), "%s is now restricted to %s", f, enumText(n.Enum))
	case len(n.Enum) == 0:
		w.add(path+"/enum", field, "enum-removed", Safe, plainList(o.Enum), nil, "%s is no longer restricted to a list of values", f)
	case sameRaw(o.Enum, n.Enum):
	default:
		removed, added := diffJSONSets(o.Enum, n.Enum)
		if len(removed) > 0 {
			w.add(path+"/enum", field, "enum-values-removed", Breaking, plainList(removed), nil, "%s no longer accepts %s", f, enumText(removed))
		}
		if len(added) > 0 {
			w.add(path+"/enum", field, "enum-values-added", Safe, nil, plainList(added), "%s also accepts %s", f, enumText(added))
		}
	}
}

func enumText(vals []apiextensionsv1.JSON) string {
	parts := make([]string, len(vals))
	for i, v := range vals {
		parts[i] = string(canonical(v.Raw))
	}
	return strings.Join(parts, ", ")
}

// sameRaw reports whether two lists of JSON values are byte for byte the
// same (the common case, which needs no decoding).
func sameRaw(a, b []apiextensionsv1.JSON) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i].Raw, b[i].Raw) {
			return false
		}
	}
	return true
}

// diffJSONSets returns the values only in a and only in b, in their order.
func diffJSONSets(a, b []apiextensionsv1.JSON) (onlyA, onlyB []apiextensionsv1.JSON) {
	set := func(l []apiextensionsv1.JSON) map[string]bool {
		m := make(map[string]bool, len(l))
		for _, v := range l {
			m[string(canonical(v.Raw))] = true
		}
		return m
	}
	as, bs := set(a), set(b)
	for _, v := range a {
		if !bs[string(canonical(v.Raw))] {
			onlyA = append(onlyA, v)
		}
	}
	for _, v := range b {
		if !as[string(canonical(v.Raw))] {
			onlyB = append(onlyB, v)
		}
	}
	return onlyA, onlyB
}

// compareDefault reports any change of a default: objects read or written
// later silently get a different value (OLM treats all three as breaking).
func (w *walker) compareDefault(path, field string, o, n *apiextensionsv1.JSONSchemaProps) {
	f := fieldName(field)
	switch {
	case o.Default == nil && n.Default == nil:
	case o.Default == nil:
		w.add(path+"/default", field, "default-added", Breaking, nil, plainRaw(n.Default.Raw),
			"%s now defaults to %s: objects without it get it on their next read and write", f, canonical(n.Default.Raw))
	case n.Default == nil:
		w.add(path+"/default", field, "default-removed", Breaking, plainRaw(o.Default.Raw), nil,
			"%s no longer defaults to %s: objects created from now on lack it", f, canonical(o.Default.Raw))
	case !bytes.Equal(o.Default.Raw, n.Default.Raw) && string(canonical(o.Default.Raw)) != string(canonical(n.Default.Raw)):
		w.add(path+"/default", field, "default-changed", Breaking, plainRaw(o.Default.Raw), plainRaw(n.Default.Raw),
			"%s now defaults to %s instead of %s", f, canonical(n.Default.Raw), canonical(o.Default.Raw))
	}
}

// limit is one bound: minimum, maxLength, minItems...
type limit struct {
	key, check       string
	lower            bool
	old, new         *float64
	oldExcl, newExcl bool
	exclKey          string
}

func intPtr(p *int64) *float64 {
	if p == nil {
		return nil
	}
	f := float64(*p)
	return &f
}

// compareLimits compares the numeric bounds. A bound added or tightened is
// breaking, relaxed or removed safe; exclusiveMinimum and exclusiveMaximum
// tighten or relax their bound.
func (w *walker) compareLimits(path, field string, o, n *apiextensionsv1.JSONSchemaProps) {
	limits := [...]limit{
		{key: "minimum", check: "minimum", lower: true, old: o.Minimum, new: n.Minimum, oldExcl: o.ExclusiveMinimum, newExcl: n.ExclusiveMinimum, exclKey: "exclusiveMinimum"},
		{key: "maximum", check: "maximum", old: o.Maximum, new: n.Maximum, oldExcl: o.ExclusiveMaximum, newExcl: n.ExclusiveMaximum, exclKey: "exclusiveMaximum"},
		{key: "minLength", check: "min-length", lower: true, old: intPtr(o.MinLength), new: intPtr(n.MinLength)},
		{key: "maxLength", check: "max-length", old: intPtr(o.MaxLength), new: intPtr(n.MaxLength)},
		{key: "minItems", check: "min-items", lower: true, old: intPtr(o.MinItems), new: intPtr(n.MinItems)},
		{key: "maxItems", check: "max-items", old: intPtr(o.MaxItems), new: intPtr(n.MaxItems)},
		{key: "minProperties", check: "min-properties", lower: true, old: intPtr(o.MinProperties), new: intPtr(n.MinProperties)},
		{key: "maxProperties", check: "max-properties", old: intPtr(o.MaxProperties), new: intPtr(n.MaxProperties)},
	}
	f := fieldName(field)
	for _, l := range limits {
		if l.old == nil && l.new == nil {
			continue
		}
		p := path + "/" + l.key
		switch {
		case l.old == nil:
			w.add(p, field, l.check+"-added", Breaking, nil, l.value(l.new, l.newExcl), "%s now has %s %s", f, l.key, l.text(l.new, l.newExcl))
		case l.new == nil:
			w.add(p, field, l.check+"-removed", Safe, l.value(l.old, l.oldExcl), nil, "%s no longer has %s %s", f, l.key, l.text(l.old, l.oldExcl))
		default:
			switch c := l.cmp(); {
			case c > 0:
				w.add(p, field, l.check+"-tightened", Breaking, l.value(l.old, l.oldExcl), l.value(l.new, l.newExcl),
					"%s tightened %s from %s to %s", f, l.key, l.text(l.old, l.oldExcl), l.text(l.new, l.newExcl))
			case c < 0:
				w.add(p, field, l.check+"-relaxed", Safe, l.value(l.old, l.oldExcl), l.value(l.new, l.newExcl),
					"%s relaxed %s from %s to %s", f, l.key, l.text(l.old, l.oldExcl), l.text(l.new, l.newExcl))
			}
		}
	}
	switch {
	case o.MultipleOf == nil && n.MultipleOf == nil:
	case o.MultipleOf == nil:
		w.add(path+"/multipleOf", field, "multiple-of-added", Breaking, nil, *n.MultipleOf, "%s must now be a multiple of %v", f, *n.MultipleOf)
	case n.MultipleOf == nil:
		w.add(path+"/multipleOf", field, "multiple-of-removed", Safe, *o.MultipleOf, nil, "%s no longer has to be a multiple of %v", f, *o.MultipleOf)
	case *o.MultipleOf != *n.MultipleOf:
		if q := *o.MultipleOf / *n.MultipleOf; *n.MultipleOf != 0 && q == math.Trunc(q) && !math.IsInf(q, 0) {
			w.add(path+"/multipleOf", field, "multiple-of-relaxed", Safe, *o.MultipleOf, *n.MultipleOf, "%s must be a multiple of %v instead of %v", f, *n.MultipleOf, *o.MultipleOf)
		} else {
			w.add(path+"/multipleOf", field, "multiple-of-changed", Breaking, *o.MultipleOf, *n.MultipleOf, "%s must be a multiple of %v instead of %v", f, *n.MultipleOf, *o.MultipleOf)
		}
	}
}

// cmp returns 1 when the new bound is tighter, -1 when looser, 0 when the
// same.
func (l limit) cmp() int {
	o, n := *l.old, *l.new
	if !l.lower {
		o, n = -o, -n
	}
	switch {
	case n > o:
		return 1
	case n < o:
		return -1
	case l.newExcl && !l.oldExcl:
		return 1
	case !l.newExcl && l.oldExcl:
		return -1
	}
	return 0
}

func (l limit) value(v *float64, excl bool) any {
	if excl {
		return map[string]any{l.key: *v, l.exclKey: true}
	}
	return *v
}

func (l limit) text(v *float64, excl bool) string {
	s := strconv.FormatFloat(*v, 'g', -1, 64)
	if excl {
		return s + " (exclusive)"
	}
	return s
}

// compareLists compares x-kubernetes-list-type, -list-map-keys and
// -map-type.
func (w *walker) compareLists(path, field string, o, n *apiextensionsv1.JSONSchemaProps) {
	f := fieldName(field)
	lt := func(s *apiextensionsv1.JSONSchemaProps) string {
		if s.XListType == nil || *s.XListType == "" {
			return "atomic"
		}
		return *s.XListType
	}
	ot, nt := lt(o), lt(n)
	switch {
	case ot == nt:
		if ot == "map" && !slices.Equal(o.XListMapKeys, n.XListMapKeys) {
			w.add(path+"/x-kubernetes-list-map-keys", field, "list-map-keys-changed", Unknown, plainJSON(o.XListMapKeys), plainJSON(n.XListMapKeys),
				"%s changed its list map keys: items must be unique by other keys and server-side apply merges them differently", f)
		}
	case ot == "atomic":
		w.add(path+"/x-kubernetes-list-type", field, "list-type-changed", Breaking, ot, nt, "%s became a %s list: its items must now be unique", f, nt)
	case nt == "atomic":
		w.add(path+"/x-kubernetes-list-type", field, "list-type-changed", Safe, ot, nt, "%s became an atomic list: its items no longer have to be unique", f)
	default:
		w.add(path+"/x-kubernetes-list-type", field, "list-type-changed", Unknown, ot, nt, "%s changed list type from %s to %s", f, ot, nt)
	}
	mt := func(s *apiextensionsv1.JSONSchemaProps) string {
		if s.XMapType == nil || *s.XMapType == "" {
			return "granular"
		}
		return *s.XMapType
	}
	if om, nm := mt(o), mt(n); om != nm {
		w.add(path+"/x-kubernetes-map-type", field, "map-type-changed", Unknown, om, nm, "%s changed map type from %s to %s: server-side apply merges it differently", f, om, nm)
	}
}

// compareValidations compares x-kubernetes-validations. Rules are matched
// by their text; a rule whose text changed is paired with a vanished rule
// at the same position when there is one.
func (w *walker) compareValidations(path, field string, o, n *apiextensionsv1.JSONSchemaProps) {
	f := fieldName(field)
	base := path + "/x-kubernetes-validations/"
	used := make([]bool, len(o.XValidations))
	match := make([]int, len(n.XValidations))
	byRule := map[string][]int{}
	for i, r := range o.XValidations {
		byRule[r.Rule] = append(byRule[r.Rule], i)
	}
	for j, r := range n.XValidations {
		match[j] = -1
		if l := byRule[r.Rule]; len(l) > 0 {
			match[j], byRule[r.Rule] = l[0], l[1:]
			used[l[0]] = true
		}
	}
	for j, r := range n.XValidations {
		i := match[j]
		if i < 0 {
			continue
		}
		or := o.XValidations[i]
		if boolOf(or.OptionalOldSelf) != boolOf(r.OptionalOldSelf) {
			w.add(base+strconv.Itoa(j), field, "validation-rule-changed", Unknown, or.Rule, r.Rule, "%s: optionalOldSelf of rule %q changed", f, r.Rule)
		} else if or.Message != r.Message || or.MessageExpression != r.MessageExpression || or.FieldPath != r.FieldPath || !reflect.DeepEqual(or.Reason, r.Reason) {
			w.add(base+strconv.Itoa(j), field, "validation-rule-message-changed", Safe, or.Rule, r.Rule, "%s: the message, reason or field path of rule %q changed", f, r.Rule)
		}
	}
	// Unmatched new rules: changed when an unmatched old rule sat at the
	// same index, added otherwise.
	for j, r := range n.XValidations {
		if match[j] >= 0 {
			continue
		}
		if j < len(o.XValidations) && !used[j] {
			used[j] = true
			w.add(base+strconv.Itoa(j), field, "validation-rule-changed", Unknown, o.XValidations[j].Rule, r.Rule,
				"%s: rule %q became %q: objects valid before may fail it", f, o.XValidations[j].Rule, r.Rule)
			continue
		}
		w.add(base+strconv.Itoa(j), field, "validation-rule-added", Breaking, nil, r.Rule, "%s must now satisfy %q", f, r.Rule)
	}
	for i, r := range o.XValidations {
		if !used[i] {
			w.add(base+strconv.Itoa(i), field, "validation-rule-removed", Safe, r.Rule, nil, "%s no longer has to satisfy %q", f, r.Rule)
		}
	}
}

// compareRequired reports required names added (breaking) and removed
// (safe).
func (w *walker) compareRequired(path, field string, o, n *apiextensionsv1.JSONSchemaProps) {
	for _, name := range n.Required {
		if slices.Contains(o.Required, name) {
			continue
		}
		msg := "%s is now required"
		if p, ok := n.Properties[name]; ok && p.Default != nil {
			msg = "%s is now required (it has a default, which the apiserver sets before validating)"
		}
		child := fieldpath.Child(field, name)
		w.add(path+"/required", child, "required-added", Breaking, nil, name, msg, child)
	}
	for _, name := range o.Required {
		if !slices.Contains(n.Required, name) {
			child := fieldpath.Child(field, name)
			w.add(path+"/required", child, "required-removed", Safe, name, nil, "%s is no longer required", child)
		}
	}
}

func (w *walker) compareProperties(path, field string, o, n *apiextensionsv1.JSONSchemaProps, composed bool) {
	if len(o.Properties) == 0 && len(n.Properties) == 0 {
		return
	}
	for _, name := range sortedNames(o.Properties, n.Properties) {
		op, inOld := o.Properties[name]
		np, inNew := n.Properties[name]
		p, child := path+"/properties/"+escapePointer(name), fieldpath.Child(field, name)
		switch {
		case inOld && inNew:
			w.compare(p, child, &op, &np, composed)
		case composed && inOld:
			w.compare(p, child, &op, empty, true)
		case composed:
			w.compare(p, child, empty, &np, true)
		case inOld && boolOf(n.XPreserveUnknownFields):
			w.add(p, child, "field-removed", Safe, nil, nil, "%s was removed from the schema but is kept as an unknown field (x-kubernetes-preserve-unknown-fields), no longer validated", child)
		case inOld && n.AdditionalProperties != nil && n.AdditionalProperties.Schema != nil:
			w.add(p, child, "field-removed", Unknown, nil, nil, "%s was removed from the schema and is now validated by additionalProperties", child)
		case inOld:
			w.add(p, child, "field-removed", Breaking, nil, nil, "%s was removed: the apiserver prunes it from every object", child)
		default:
			w.add(p, child, "field-added", Safe, nil, nil, "%s was added", child)
		}
	}
}

func (w *walker) compareItems(path, field string, o, n *apiextensionsv1.JSONSchemaProps, composed bool) {
	oi, ni := o.Items, n.Items
	if oi == nil && ni == nil {
		return
	}
	if (oi != nil && oi.JSONSchemas != nil) || (ni != nil && ni.JSONSchemas != nil) {
		if !sameJSON(oi, ni) {
			w.add(path+"/items", field, "schema-changed", Unknown, nil, nil, "%s: items given as a list of schemas changed", fieldName(field))
		}
		return
	}
	os, ns := empty, empty
	if oi != nil && oi.Schema != nil {
		os = oi.Schema
	}
	if ni != nil && ni.Schema != nil {
		ns = ni.Schema
	}
	w.compare(path+"/items", fieldpath.Every(field), os, ns, composed || oi == nil || ni == nil)
}

func (w *walker) compareAdditional(path, field string, o, n *apiextensionsv1.JSONSchemaProps, composed bool) {
	oa, na := additional(o), additional(n)
	f := fieldName(field)
	switch {
	case oa == nil && na == nil:
	case oa != nil && na != nil:
		w.compare(path+"/additionalProperties", fieldpath.Every(field), oa, na, composed)
	case composed && oa != nil:
		w.compare(path+"/additionalProperties", fieldpath.Every(field), oa, empty, true)
	case composed:
		w.compare(path+"/additionalProperties", fieldpath.Every(field), empty, na, true)
	case oa != nil:
		w.add(path+"/additionalProperties", fieldpath.Every(field), "additional-properties-removed", Breaking, nil, nil,
			"%s no longer accepts arbitrary keys: the apiserver prunes the ones the schema does not name", f)
	default:
		w.add(path+"/additionalProperties", fieldpath.Every(field), "additional-properties-added", Safe, nil, nil, "%s accepts arbitrary keys", f)
	}
}

// additional returns the schema of additionalProperties: nil when absent
// or false, an empty schema for true.
func additional(s *apiextensionsv1.JSONSchemaProps) *apiextensionsv1.JSONSchemaProps {
	a := s.AdditionalProperties
	switch {
	case a == nil:
		return nil
	case a.Schema != nil:
		return a.Schema
	case a.Allows:
		return empty
	}
	return nil
}

// compareAllOf compares allOf element by element when the lengths match;
// otherwise elements only in the new list (tightening) are breaking and
// elements only in the old one safe.
func (w *walker) compareAllOf(path, field string, o, n []apiextensionsv1.JSONSchemaProps) {
	if len(o) == len(n) {
		for i := range o {
			w.compare(path+"/allOf/"+strconv.Itoa(i), field, &o[i], &n[i], true)
		}
		return
	}
	f := fieldName(field)
	removed, added := diffSchemaSets(o, n)
	for _, i := range added {
		w.add(path+"/allOf/"+strconv.Itoa(i), field, "allof-added", Breaking, nil, plainJSON(n[i]), "%s must also satisfy allOf[%d]", f, i)
	}
	for _, i := range removed {
		w.add(path+"/allOf/"+strconv.Itoa(i), field, "allof-removed", Safe, plainJSON(o[i]), nil, "%s no longer has to satisfy the old allOf[%d]", f, i)
	}
}

// compareAlternatives compares anyOf or oneOf. A list added is breaking
// and one removed safe; for anyOf, alternatives only added are safe; any
// other change of alternatives is unknown.
func (w *walker) compareAlternatives(path, field, kind string, o, n []apiextensionsv1.JSONSchemaProps) {
	f := fieldName(field)
	switch {
	case len(o) == 0 && len(n) == 0:
	case len(o) == 0:
		w.add(path, field, kind+"-added", Breaking, nil, plainJSON(n), "%s must now satisfy %s", f, path[strings.LastIndexByte(path, '/')+1:])
	case len(n) == 0:
		w.add(path, field, kind+"-removed", Safe, plainJSON(o), nil, "%s no longer has to satisfy %s", f, path[strings.LastIndexByte(path, '/')+1:])
	default:
		removed, added := diffSchemaSets(o, n)
		switch {
		case len(removed) == 0 && len(added) == 0:
		case kind == "anyof" && len(removed) == 0:
			w.add(path, field, "anyof-alternatives-added", Safe, nil, plainJSON(pick(n, added)), "%s may satisfy more alternatives", f)
		default:
			w.add(path, field, kind+"-changed", Unknown, plainJSON(o), plainJSON(n), "%s changed its %s alternatives", f, path[strings.LastIndexByte(path, '/')+1:])
		}
	}
}

func (w *walker) compareNot(path, field string, o, n *apiextensionsv1.JSONSchemaProps) {
	f := fieldName(field)
	switch {
	case o == nil && n == nil:
	case o == nil:
		w.add(path+"/not", field, "not-added", Breaking, nil, plainJSON(n), "%s must now not match a schema", f)
	case n == nil:
		w.add(path+"/not", field, "not-removed", Safe, plainJSON(o), nil, "%s no longer has a not schema", f)
	case !sameJSON(o, n):
		w.add(path+"/not", field, "not-changed", Unknown, plainJSON(o), plainJSON(n), "%s changed its not schema", f)
	}
}

// compareUnsupported reports changes of keys structural schemas do not
// allow (a CRD that has them is not served with pruning, and the
// comparison cannot tell what they do): unknown.
func (w *walker) compareUnsupported(path, field string, o, n *apiextensionsv1.JSONSchemaProps) {
	for _, k := range []struct {
		key      string
		old, new any
	}{
		{"id", o.ID, n.ID},
		{"$schema", o.Schema, n.Schema},
		{"$ref", o.Ref, n.Ref},
		{"definitions", o.Definitions, n.Definitions},
		{"dependencies", o.Dependencies, n.Dependencies},
		{"patternProperties", o.PatternProperties, n.PatternProperties},
		{"additionalItems", o.AdditionalItems, n.AdditionalItems},
	} {
		if !sameJSON(k.old, k.new) {
			w.add(path+"/"+escapePointer(k.key), field, "schema-changed", Unknown, nil, nil, "%s: %s changed", fieldName(field), k.key)
		}
	}
}

func pick(l []apiextensionsv1.JSONSchemaProps, idx []int) []apiextensionsv1.JSONSchemaProps {
	out := make([]apiextensionsv1.JSONSchemaProps, len(idx))
	for i, j := range idx {
		out[i] = l[j]
	}
	return out
}

// diffSchemaSets returns the indexes of the schemas only in a and only in
// b, comparing them as canonical JSON.
func diffSchemaSets(a, b []apiextensionsv1.JSONSchemaProps) (onlyA, onlyB []int) {
	key := func(l []apiextensionsv1.JSONSchemaProps) ([]string, map[string]bool) {
		keys := make([]string, len(l))
		set := make(map[string]bool, len(l))
		for i := range l {
			keys[i] = string(mustJSON(l[i]))
			set[keys[i]] = true
		}
		return keys, set
	}
	ak, as := key(a)
	bk, bs := key(b)
	for i, k := range ak {
		if !bs[k] {
			onlyA = append(onlyA, i)
		}
	}
	for i, k := range bk {
		if !as[k] {
			onlyB = append(onlyB, i)
		}
	}
	return onlyA, onlyB
}

func sortedNames(a, b map[string]apiextensionsv1.JSONSchemaProps) []string {
	names := make([]string, 0, len(a)+len(b))
	for k := range a {
		names = append(names, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	return names
}

// escapePointer escapes a JSON pointer token (RFC 6901).
func escapePointer(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// mustJSON marshals a value that is known to marshal (API types).
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return []byte(fmt.Sprintf("%#v", v))
	}
	return b
}

func sameJSON(a, b any) bool { return string(mustJSON(a)) == string(mustJSON(b)) }

func sameSchema(a, b *apiextensionsv1.JSONSchemaProps) bool { return sameJSON(a, b) }

// canonical returns raw JSON with object keys sorted and no spaces; raw
// that does not parse is returned as it is.
func canonical(raw []byte) []byte {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return raw
	}
	return mustJSON(v)
}

// plainRaw decodes raw JSON into plain values (int64 for integers).
func plainRaw(raw []byte) any {
	var v any
	if err := utiljson.Unmarshal(raw, &v); err != nil {
		return string(raw)
	}
	return v
}

func plainList(vals []apiextensionsv1.JSON) []any {
	out := make([]any, len(vals))
	for i, v := range vals {
		out[i] = plainRaw(v.Raw)
	}
	return out
}

// plainJSON returns v as plain JSON values.
func plainJSON(v any) any { return plainRaw(mustJSON(v)) }
