package watcher

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/jsonscan"
)

// Object is the compact form in which the watcher caches an object: its
// identity as strings, and the rest of what the projection keeps as JSON.
// It costs a fraction of an *unstructured.Unstructured (no maps, no
// interface boxes) and is immutable once built, so it can be shared between
// the informer's cache, the work queue and the handler without copies.
//
// Object implements metav1.Object so that client-go's cache can key and
// index it. Its setters, which that interface requires and nothing calls,
// do nothing: an Object never changes. Its getters read the projected
// JSON, so they see only what the projection keeps.
type Object struct {
	immutable
	// ns is the namespace, interned: the thousands of objects of one
	// namespace share one string (zero for cluster-scoped objects).
	ns   unique.Handle[string]
	name string
	// uid is the UID in binary: the apiserver assigns UUIDs, 16 bytes
	// here against 36 in a string of its own. A UID that is not a UUID is
	// kept as it is in uidText.
	uid     [16]byte
	uidText *types.UID
	// resourceVersion is opaque: kept as the apiserver sent it.
	resourceVersion string
	// rest is the projected object without apiVersion, kind and the four
	// fields above, as compact JSON with sorted keys; compressed when it
	// is large (setRest, read through json).
	rest []byte
	// typ is shared by every object of one informer.
	typ *objectType
}

// immutable gives Object the setters of metav1.Object. Client-go's cache
// only reads the objects it holds, and the watcher never changes one (the
// cache, the work queue and the handler share them), so they do nothing.
type immutable struct{}

func (immutable) SetNamespace(string)                          {}
func (immutable) SetName(string)                               {}
func (immutable) SetGenerateName(string)                       {}
func (immutable) SetUID(types.UID)                             {}
func (immutable) SetResourceVersion(string)                    {}
func (immutable) SetGeneration(int64)                          {}
func (immutable) SetSelfLink(string)                           {}
func (immutable) SetCreationTimestamp(metav1.Time)             {}
func (immutable) SetDeletionTimestamp(*metav1.Time)            {}
func (immutable) SetDeletionGracePeriodSeconds(*int64)         {}
func (immutable) SetLabels(map[string]string)                  {}
func (immutable) SetAnnotations(map[string]string)             {}
func (immutable) SetFinalizers([]string)                       {}
func (immutable) SetOwnerReferences([]metav1.OwnerReference)   {}
func (immutable) SetManagedFields([]metav1.ManagedFieldsEntry) {}

// objectType is what all objects of one resource share.
type objectType struct {
	gvk        schema.GroupVersionKind
	apiVersion string
	projection change.Projection
	// foreign marks objects of other shards: cached for keying only.
	foreign bool
	// dict is the template of the resource's objects' JSON (packed.go),
	// shared by the objectTypes of one resource; nil keeps it whole.
	dict *packDict
	// listed marks objects decoded from a list (the initial list, a
	// relist, a watch-list's initial events) rather than from a watch
	// event: the changes they make may be long past.
	listed bool
}

var (
	_ metav1.Object  = &Object{}
	_ runtime.Object = &Object{}
)

// newObject projects obj (a decoded object as map) through p.
func newObject(obj map[string]any, typ *objectType) (*Object, error) {
	meta, _ := obj["metadata"].(map[string]any)
	o := &Object{typ: typ}
	o.ns = intern(stringField(meta, "namespace"))
	o.name = stringField(meta, "name")
	o.setUID(types.UID(stringField(meta, "uid")))
	o.resourceVersion = stringField(meta, "resourceVersion")
	rest, err := json.Marshal(project(typ.projection, obj))
	if err != nil {
		return nil, fmt.Errorf("encode %s %s/%s: %w", typ.gvk.Kind, o.GetNamespace(), o.name, err)
	}
	o.setRest(rest)
	return o, nil
}

func stringField(m map[string]any, key string) string {
	s, _ := m[key].(string)
	return s
}

// Map decodes the object into a new map, with apiVersion, kind, and
// metadata name, namespace, uid and resourceVersion restored. Numbers are
// int64 when integral, float64 otherwise, as in unstructured objects. The
// map belongs to the caller; its strings share the object's JSON (the
// cached bytes, or those unpacked for this call), so a string kept from it
// keeps those bytes in memory.
func (o *Object) Map() map[string]any {
	var m map[string]any
	if rest := o.json(); len(rest) > 0 {
		// rest was produced by json.Marshal of a map: it always decodes.
		// Its bytes never change (an Object is immutable; an unpacked
		// copy is the map's alone): the map's strings share them.
		m, _ = jsonscan.DecodeObjectShared(rest)
	}
	if m == nil {
		m = map[string]any{}
	}
	if o.typ != nil {
		m["apiVersion"] = o.typ.apiVersion
		m["kind"] = o.typ.gvk.Kind
	}
	meta, _ := m["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		m["metadata"] = meta
	}
	if ns := o.GetNamespace(); ns != "" {
		meta["namespace"] = ns
	}
	meta["name"] = o.name
	meta["uid"] = string(o.GetUID())
	meta["resourceVersion"] = o.resourceVersion
	return m
}

// sameContent reports whether o and p carry the same projected content,
// ignoring resourceVersion. Objects of one resource mostly keep the same
// JSON in the same bytes (not the first one kept, before its template);
// those that differ are compared by their JSON.
func (o *Object) sameContent(p *Object) bool {
	if !o.sameUID(p) || o.name != p.name || o.ns != p.ns {
		return false
	}
	return bytes.Equal(o.rest, p.rest) || bytes.Equal(o.json(), p.json())
}

// gvk returns the object's kind.
func (o *Object) gvk() schema.GroupVersionKind {
	if o.typ == nil {
		return schema.GroupVersionKind{}
	}
	return o.typ.gvk
}

// GetObjectKind implements runtime.Object.
func (o *Object) GetObjectKind() schema.ObjectKind { return objectKind{o} }

// DeepCopyObject implements runtime.Object. Objects are immutable, so the
// copy shares the JSON.
func (o *Object) DeepCopyObject() runtime.Object {
	c := *o
	return &c
}

type objectKind struct{ o *Object }

func (k objectKind) SetGroupVersionKind(gvk schema.GroupVersionKind) {
	// The kind of cached objects is fixed by their informer.
}

func (k objectKind) GroupVersionKind() schema.GroupVersionKind { return k.o.gvk() }

// GetNamespace implements metav1.Object.
func (o *Object) GetNamespace() string {
	if o.ns == (unique.Handle[string]{}) {
		return ""
	}
	return o.ns.Value()
}

// GetName implements metav1.Object.
func (o *Object) GetName() string { return o.name }

// GetUID implements metav1.Object.
func (o *Object) GetUID() types.UID {
	if o.uidText != nil {
		return *o.uidText
	}
	if o.uid == ([16]byte{}) {
		return ""
	}
	return types.UID(formatUUID(o.uid))
}

// setUID keeps uid in binary when it is a UUID in its canonical form
// (lower-case hex, so that GetUID gives it back as it was), as it is
// otherwise.
func (o *Object) setUID(uid types.UID) {
	if b, ok := parseUUID(string(uid)); ok {
		o.uid, o.uidText = b, nil
		return
	}
	o.uid = [16]byte{}
	o.uidText = nil
	if uid != "" {
		o.uidText = &uid
	}
}

// sameUID reports whether o and p have the same UID.
func (o *Object) sameUID(p *Object) bool {
	if o.uidText != nil || p.uidText != nil {
		return o.GetUID() == p.GetUID()
	}
	return o.uid == p.uid
}

// uuidDashes are where a canonical UUID has its dashes.
var uuidDashes = [...]int{8, 13, 18, 23}

// parseUUID parses a UUID in canonical lower-case form
// (8-4-4-4-12 hex digits).
func parseUUID(s string) ([16]byte, bool) {
	var b [16]byte
	if len(s) != 36 {
		return b, false
	}
	j := 0
	for i := 0; i < 36; {
		if i == uuidDashes[0] || i == uuidDashes[1] || i == uuidDashes[2] || i == uuidDashes[3] {
			if s[i] != '-' {
				return b, false
			}
			i++
			continue
		}
		hi, ok1 := fromHex(s[i])
		lo, ok2 := fromHex(s[i+1])
		if !ok1 || !ok2 {
			return b, false
		}
		b[j] = hi<<4 | lo
		j++
		i += 2
	}
	return b, true
}

func fromHex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// formatUUID formats b as a canonical UUID.
func formatUUID(b [16]byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 36)
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out = append(out, '-')
		}
		out = append(out, digits[c>>4], digits[c&0xf])
	}
	return string(out)
}

// GetResourceVersion implements metav1.Object.
func (o *Object) GetResourceVersion() string { return o.resourceVersion }

// metaField decodes one metadata field from the JSON into out.
func (o *Object) metaField(key string, out any) bool {
	var m struct {
		Metadata map[string]json.RawMessage `json:"metadata"`
	}
	if json.Unmarshal(o.json(), &m) != nil {
		return false
	}
	raw, ok := m.Metadata[key]
	return ok && json.Unmarshal(raw, out) == nil
}

// GetGenerateName implements metav1.Object.
func (o *Object) GetGenerateName() string {
	var s string
	o.metaField("generateName", &s)
	return s
}

// GetGeneration implements metav1.Object.
func (o *Object) GetGeneration() int64 {
	var g int64
	o.metaField("generation", &g)
	return g
}

// GetSelfLink implements metav1.Object; self links are not kept.
func (o *Object) GetSelfLink() string { return "" }

// GetCreationTimestamp implements metav1.Object.
func (o *Object) GetCreationTimestamp() metav1.Time {
	var t metav1.Time
	o.metaField("creationTimestamp", &t)
	return t
}

// GetDeletionTimestamp implements metav1.Object.
func (o *Object) GetDeletionTimestamp() *metav1.Time {
	var t metav1.Time
	if !o.metaField("deletionTimestamp", &t) {
		return nil
	}
	return &t
}

// GetDeletionGracePeriodSeconds implements metav1.Object.
func (o *Object) GetDeletionGracePeriodSeconds() *int64 {
	var s int64
	if !o.metaField("deletionGracePeriodSeconds", &s) {
		return nil
	}
	return &s
}

// GetLabels implements metav1.Object.
func (o *Object) GetLabels() map[string]string {
	var l map[string]string
	o.metaField("labels", &l)
	return l
}

// GetAnnotations implements metav1.Object; only projected annotations are kept.
func (o *Object) GetAnnotations() map[string]string {
	var a map[string]string
	o.metaField("annotations", &a)
	return a
}

// GetFinalizers implements metav1.Object; only projected finalizers are kept.
func (o *Object) GetFinalizers() []string {
	var f []string
	o.metaField("finalizers", &f)
	return f
}

// GetOwnerReferences implements metav1.Object; only projected owner references are kept.
func (o *Object) GetOwnerReferences() []metav1.OwnerReference {
	var r []metav1.OwnerReference
	o.metaField("ownerReferences", &r)
	return r
}

// GetManagedFields implements metav1.Object. The watcher keeps the entries
// without their field sets (see Projection).
func (o *Object) GetManagedFields() []metav1.ManagedFieldsEntry {
	var f []metav1.ManagedFieldsEntry
	o.metaField("managedFields", &f)
	return f
}
