package watcher

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/fieldwatch/fieldwatch/change"
)

func sampleObject() map[string]any {
	return map[string]any{
		"apiVersion": "example.com/v1",
		"kind":       "Widget",
		"metadata": map[string]any{
			"name": "w1", "namespace": "default", "uid": "u-1", "resourceVersion": "42",
			"generation": int64(3), "creationTimestamp": "2026-12-01T00:00:00Z", "labels": map[string]any{"app": "shop"},
			"annotations": map[string]any{"note": "big", "other": "x"},
			"selfLink":    "/apis/example.com/v1/namespaces/default/widgets/w1",
			"managedFields": []any{
				map[string]any{"manager": "kubectl", "operation": "Update", "time": "2026-12-02T10:00:00Z", "fieldsV1": map[string]any{"f:spec": map[string]any{}}},
				map[string]any{"manager": "controller", "operation": "Update", "subresource": "status", "time": "2026-12-02T11:00:00Z", "fieldsV1": map[string]any{"f:status": map[string]any{}}},
			},
		},
		"spec":   map[string]any{"size": int64(2), "color": "blue", "parts": []any{map[string]any{"name": "a"}}},
		"status": map[string]any{"phase": "Ready"},
	}
}

func TestProjectionApply(t *testing.T) {
	newest := reducedManagedFields()
	tests := []struct {
		name string
		proj change.Projection
		want map[string]any
	}{{
		name: "full keeps everything but identity, selfLink and field sets",
		proj: change.Projection{Full: true},
		want: map[string]any{
			"metadata": map[string]any{
				"generation": int64(3), "creationTimestamp": "2026-12-01T00:00:00Z", "labels": map[string]any{"app": "shop"},
				"annotations":   map[string]any{"note": "big", "other": "x"},
				"managedFields": newest,
			},
			"spec":   map[string]any{"size": int64(2), "color": "blue", "parts": []any{map[string]any{"name": "a"}}},
			"status": map[string]any{"phase": "Ready"},
		},
	}, {
		name: "paths keep their subtrees and the always-kept metadata",
		proj: change.Projection{Paths: [][]string{{"spec", "size"}, {"metadata", "annotations", "note"}, {"spec", "parts"}, {"missing", "field"}}},
		want: map[string]any{
			"metadata": map[string]any{
				"generation": int64(3), "creationTimestamp": "2026-12-01T00:00:00Z", "labels": map[string]any{"app": "shop"},
				"annotations":   map[string]any{"note": "big"},
				"managedFields": newest,
			},
			"spec": map[string]any{"size": int64(2), "parts": []any{map[string]any{"name": "a"}}},
		},
	}, {
		name: "a path through a list keeps the list",
		proj: change.Projection{Paths: [][]string{{"spec", "parts", "name"}}},
		want: map[string]any{
			"metadata": map[string]any{"generation": int64(3), "creationTimestamp": "2026-12-01T00:00:00Z", "labels": map[string]any{"app": "shop"}, "managedFields": newest},
			"spec":     map[string]any{"parts": []any{map[string]any{"name": "a"}}},
		},
	}, {
		name: "the whole metadata path does not leak identity or field sets",
		proj: change.Projection{Paths: [][]string{{"metadata"}}},
		want: map[string]any{
			"metadata": map[string]any{
				"generation": int64(3), "creationTimestamp": "2026-12-01T00:00:00Z", "labels": map[string]any{"app": "shop"},
				"annotations":   map[string]any{"note": "big", "other": "x"},
				"managedFields": newest,
			},
		},
	}, {
		name: "no paths: metadata only",
		proj: change.Projection{},
		want: map[string]any{
			"metadata": map[string]any{"generation": int64(3), "creationTimestamp": "2026-12-01T00:00:00Z", "labels": map[string]any{"app": "shop"}, "managedFields": newest},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := sampleObject()
			got := project(tt.proj, in)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("apply:\n got %v\nwant %v", got, tt.want)
			}
			if !reflect.DeepEqual(in, sampleObject()) {
				t.Errorf("apply modified its input")
			}
		})
	}
}

func TestObjectRoundTrip(t *testing.T) {
	typ := &objectType{gvk: schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}, apiVersion: "example.com/v1", projection: change.Projection{Full: true}}
	o, err := newObject(sampleObject(), typ)
	if err != nil {
		t.Fatal(err)
	}
	if o.GetName() != "w1" || o.GetNamespace() != "default" || o.GetUID() != "u-1" || o.GetResourceVersion() != "42" {
		t.Errorf("identity: %s/%s %s %s", o.GetNamespace(), o.GetName(), o.GetUID(), o.GetResourceVersion())
	}
	if o.GetGeneration() != 3 || o.GetLabels()["app"] != "shop" || o.GetAnnotations()["note"] != "big" {
		t.Errorf("metadata getters: gen %d labels %v annotations %v", o.GetGeneration(), o.GetLabels(), o.GetAnnotations())
	}
	if mf := o.GetManagedFields(); len(mf) != 2 || mf[1].Manager != "controller" || mf[1].Subresource != "status" {
		t.Errorf("managed fields: %+v", mf)
	}
	m := o.Map()
	want := sampleObject()
	meta := want["metadata"].(map[string]any)
	delete(meta, "selfLink")
	meta["managedFields"] = reducedManagedFields()
	if !reflect.DeepEqual(m, want) {
		t.Errorf("Map:\n got %v\nwant %v", m, want)
	}
	// Map returns a fresh copy each time.
	m["spec"].(map[string]any)["size"] = int64(99)
	if o.Map()["spec"].(map[string]any)["size"] != int64(2) {
		t.Error("Map shares state with the object")
	}
	// The cache can key it.
	if k, err := cache.MetaNamespaceKeyFunc(o); err != nil || k != "default/w1" {
		t.Errorf("key %q, %v", k, err)
	}
	// The setters metav1.Object requires change nothing: an Object is
	// shared by the cache, the queue and the handler.
	c := o.DeepCopyObject().(*Object)
	c.SetLabels(map[string]string{"app": "other"})
	c.SetDeletionTimestamp(&metav1.Time{})
	c.SetNamespace("elsewhere")
	if c.GetLabels()["app"] != "shop" || c.GetDeletionTimestamp() != nil || c.GetNamespace() != "default" || !reflect.DeepEqual(c.Map(), o.Map()) {
		t.Errorf("setters changed the object: %v", c.Map())
	}
	if c.GetObjectKind().GroupVersionKind() != typ.gvk {
		t.Errorf("kind %v", c.GetObjectKind().GroupVersionKind())
	}
}

func TestObjectCompactSize(t *testing.T) {
	typ := &objectType{projection: change.Projection{Paths: [][]string{{"spec", "size"}}}}
	o, err := newObject(sampleObject(), typ)
	if err != nil {
		t.Fatal(err)
	}
	var rest map[string]any
	if err := json.Unmarshal(o.rest, &rest); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"apiVersion", "kind", "status"} {
		if _, ok := rest[k]; ok {
			t.Errorf("projected JSON keeps %s: %s", k, o.rest)
		}
	}
	if meta := rest["metadata"].(map[string]any); meta["name"] != nil || meta["uid"] != nil || meta["resourceVersion"] != nil {
		t.Errorf("projected JSON repeats the identity: %s", o.rest)
	}
}

func TestSameUnder(t *testing.T) {
	narrow := &objectType{projection: change.Projection{Paths: [][]string{{"spec", "size"}}}}
	wide := &objectType{projection: change.Projection{Paths: [][]string{{"spec"}}}}
	a, _ := newObject(sampleObject(), narrow)
	changedColor := sampleObject()
	changedColor["spec"].(map[string]any)["color"] = "red"
	changedColor["metadata"].(map[string]any)["resourceVersion"] = "43"
	b, _ := newObject(changedColor, wide)
	if !sameUnder(a, b) {
		t.Error("a change outside the narrower projection counts as a change")
	}
	changedSize := sampleObject()
	changedSize["spec"].(map[string]any)["size"] = int64(5)
	c, _ := newObject(changedSize, wide)
	if sameUnder(a, c) {
		t.Error("a change inside both projections is not seen")
	}
}

// reducedManagedFields is sampleObject's managedFields as the cache keeps
// them: field sets replaced by their hash.
func reducedManagedFields() []any {
	return []any{
		map[string]any{"manager": "kubectl", "operation": "Update", "time": "2026-12-02T10:00:00Z", "fieldsHash": change.FieldsHash(map[string]any{"f:spec": map[string]any{}})},
		map[string]any{"manager": "controller", "operation": "Update", "subresource": "status", "time": "2026-12-02T11:00:00Z", "fieldsHash": change.FieldsHash(map[string]any{"f:status": map[string]any{}})},
	}
}

// TestNamespaceInterned checks that objects of one namespace share one
// namespace string, however they were decoded, and that cluster-scoped
// objects have none.
func TestNamespaceInterned(t *testing.T) {
	typ := &objectType{projection: change.Projection{Paths: [][]string{{"spec", "size"}}}}
	a, errA := newObject(sampleObject(), typ)
	b, errB := newObject(sampleObject(), typ)
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if a.GetNamespace() != "default" || a.ns != b.ns || unsafe.StringData(a.GetNamespace()) != unsafe.StringData(b.GetNamespace()) {
		t.Error("two objects of one namespace do not share its string")
	}
	cluster := sampleObject()
	delete(cluster["metadata"].(map[string]any), "namespace")
	c, err := newObject(cluster, typ)
	if err != nil {
		t.Fatal(err)
	}
	if c.GetNamespace() != "" || c.Map()["metadata"].(map[string]any)["namespace"] != nil {
		t.Errorf("cluster-scoped object has namespace %q", c.GetNamespace())
	}
}

// TestObjectUID: a UUID is kept in binary and given back as it was; any
// other UID (upper case, not a UUID, empty) is kept as it is.
func TestObjectUID(t *testing.T) {
	for _, uid := range []types.UID{
		"5b0d2c1e-8f3a-4c7b-9e21-0a1b2c3d4e5f", "00000000-0000-0000-0000-000000000001",
		"5B0D2C1E-8F3A-4C7B-9E21-0A1B2C3D4E5F", "uid-a", "5b0d2c1e-8f3a-4c7b-9e21-0a1b2c3d4e5", "5b0d2c1e+8f3a-4c7b-9e21-0a1b2c3d4e5f", "",
	} {
		o := &Object{}
		o.setUID(uid)
		if got := o.GetUID(); got != uid {
			t.Errorf("GetUID() = %q, want %q", got, uid)
		}
		if binary := o.uidText == nil && uid != ""; binary != (uid == "5b0d2c1e-8f3a-4c7b-9e21-0a1b2c3d4e5f" || uid == "00000000-0000-0000-0000-000000000001") {
			t.Errorf("%q kept in binary: %v", uid, binary)
		}
		p := &Object{}
		p.setUID(uid)
		if !o.sameUID(p) {
			t.Errorf("%q: not the same UID as itself", uid)
		}
		q := &Object{}
		q.setUID("11111111-2222-3333-4444-555555555555")
		if o.sameUID(q) {
			t.Errorf("%q: the same UID as another", uid)
		}
	}
}

// TestLargeObjectPacked: a large projected object (a CRD's schema) is
// kept compressed, reads back whole, and compares by content.
func TestLargeObjectPacked(t *testing.T) {
	typ := &objectType{gvk: schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"},
		apiVersion: "apiextensions.k8s.io/v1", projection: change.Projection{Paths: [][]string{{"spec"}}}}
	props := map[string]any{}
	for i := range 200 {
		props[fmt.Sprintf("field%03d", i)] = map[string]any{"type": "string", "description": "a field of the schema, described at length"}
	}
	crd := func(extra string) map[string]any {
		return map[string]any{
			"metadata": map[string]any{"name": "things.example.org", "uid": "5b0d2c1e-8f3a-4c7b-9e21-0a1b2c3d4e5f", "resourceVersion": "7"},
			"spec":     map[string]any{"group": "example.org", "schema": props, "extra": extra},
		}
	}
	a, err := newObject(crd("a"), typ)
	mustf(t, err, "project")
	plain, err := json.Marshal(project(typ.projection, crd("a")))
	mustf(t, err, "marshal")
	if len(plain) < packThreshold || a.rest[0] != packedMark || len(a.rest)*4 > len(plain) {
		t.Fatalf("%d bytes of JSON kept in %d (packed %v), want a quarter at most", len(plain), len(a.rest), a.rest[0] == packedMark)
	}
	if string(a.json()) != string(plain) {
		t.Errorf("the packed JSON reads back as %.100s…", a.json())
	}
	if got := a.Map()["spec"].(map[string]any)["group"]; got != "example.org" {
		t.Errorf("spec.group = %v", got)
	}
	b, err := newObject(crd("a"), typ)
	mustf(t, err, "project")
	c, err := newObject(crd("c"), typ)
	mustf(t, err, "project")
	if !a.sameContent(b) || a.sameContent(c) {
		t.Errorf("same content: with itself %v, with another %v", a.sameContent(b), a.sameContent(c))
	}
}

// TestSmallObjectsDelta: small objects of one resource are kept as their
// differences from its template (the JSON of its templateAfter-th; those
// before are kept whole), read back whole, keep the same JSON in the same bytes, and
// compare by content with objects of another resource's template too.
func TestSmallObjectsDelta(t *testing.T) {
	newTyp := func() *objectType {
		return &objectType{gvk: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, apiVersion: "v1",
			projection: change.Projection{Paths: [][]string{{"data", "owner"}}}, dict: &packDict{}}
	}
	cm := func(i int, owner string) map[string]any {
		created := fmt.Sprintf("2026-12-05T02:%02d:%02dZ", i/60%60, i%60)
		return map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": fmt.Sprintf("cm-%07d", i), "namespace": "scale", "uid": fmt.Sprintf("0a1b2c3d-0000-4000-8000-%012d", i),
				"resourceVersion": fmt.Sprint(1000 + i), "creationTimestamp": created, "labels": map[string]any{"app": "scale", "shard": fmt.Sprint(i % 7)},
				"managedFields": []any{map[string]any{"manager": "bench", "operation": "Update", "apiVersion": "v1", "time": created,
					"fieldsType": "FieldsV1", "fieldsV1": map[string]any{"f:data": map[string]any{"f:owner": map[string]any{}}}}}},
			"data": map[string]any{"owner": owner, "note": "x"}}
	}
	typ := newTyp()
	var whole, kept int
	objs := make([]*Object, 0, 500)
	for i := range 500 {
		owner := fmt.Sprintf("team-%d", i%50)
		if i%97 == 0 {
			owner = fmt.Sprintf("%x\x00\u00e9\"\\ %d", i*7919, i) // unlike the template
		}
		o, err := newObject(cm(i, owner), typ)
		mustf(t, err, "project")
		plain, err := json.Marshal(project(typ.projection, cm(i, owner)))
		mustf(t, err, "marshal")
		if got := o.json(); string(got) != string(plain) {
			t.Fatalf("object %d reads back as\n%s\nwant\n%s", i, got, plain)
		}
		if i < templateAfter-1 && o.rest[0] == deltaMark {
			t.Errorf("object %d is kept as a delta, before a template", i)
		}
		if i > 0 {
			whole += len(plain)
			kept += len(o.rest)
		}
		objs = append(objs, o)
	}
	t.Logf("%d bytes of JSON kept in %d", whole, kept)
	if kept*3 > whole {
		t.Errorf("%d bytes of JSON kept in %d, want a third at most", whole, kept)
	}
	again, err := newObject(cm(7, "team-7"), typ)
	mustf(t, err, "project")
	if string(again.rest) != string(objs[7].rest) || !again.sameContent(objs[7]) || again.sameContent(objs[8]) {
		t.Errorf("the same JSON kept in other bytes, or compared wrong")
	}
	// The first object's JSON, kept whole, against the same JSON kept as a
	// delta; and objects of another resource's template.
	first, err := newObject(cm(0, fmt.Sprintf("%x\x00\u00e9\"\\ %d", 0, 0)), typ)
	mustf(t, err, "project")
	other := newTyp()
	for i := 3; i < 3+templateAfter; i++ {
		if other.dict.p.Load() != nil {
			t.Fatalf("a template after %d objects, want one after %d", i-3, templateAfter)
		}
		_, _ = newObject(cm(i+100, "z"), other)
	}
	elsewhere, err := newObject(cm(9, "team-9"), other)
	mustf(t, err, "project")
	if first.rest[0] != deltaMark || objs[0].rest[0] == deltaMark || !first.sameContent(objs[0]) || !elsewhere.sameContent(objs[9]) || elsewhere.sameContent(objs[10]) {
		t.Errorf("same content across templates: %v %v %v", first.sameContent(objs[0]), elsewhere.sameContent(objs[9]), elsewhere.sameContent(objs[10]))
	}
	if m := objs[42].Map(); m["data"].(map[string]any)["owner"] != "team-42" {
		t.Errorf("Map = %v", m)
	}
}

// TestDeltaDecodeMalformed: a delta that does not stand for its length,
// or points past the template, reads as nothing rather than panicking.
func TestDeltaDecodeMalformed(t *testing.T) {
	d := &packDict{}
	var tpl *template
	for tpl == nil {
		tpl = d.get([]byte(`{"metadata":{"labels":{"app":"x"}}}`))
	}
	for _, bad := range [][]byte{
		{deltaMark},
		{deltaMark, 5},
		{deltaMark, 5, 2 << 1, 'a'},
		{deltaMark, 4, 4<<1 | 1, 200},
		{deltaMark, 4, 4<<1 | 1, 34},
		{deltaMark, 0xff, 0xff, 0xff},
	} {
		if got := tpl.decode(bad); got != nil {
			t.Errorf("decode(%v) = %q, want nil", bad, got)
		}
	}
}

// TestDeltaOnlyWhenItSaves: an object that is mostly a value its
// resource's template lacks is kept whole and read in place (no copy on
// each read); one that differs from the template in a few bytes is kept
// as a delta.
func TestDeltaOnlyWhenItSaves(t *testing.T) {
	typ := &objectType{gvk: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, apiVersion: "v1",
		projection: change.Projection{Paths: [][]string{{"data", "value"}}}, dict: &packDict{}}
	cm := func(i int, value string) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": fmt.Sprintf("cm-%05d", i), "namespace": "bench", "uid": fmt.Sprintf("0a1b2c3d-0000-4000-8000-%012d", i),
				"resourceVersion": fmt.Sprint(1000 + i), "creationTimestamp": "2026-12-05T23:00:00Z",
				"managedFields": []any{map[string]any{"manager": "bench", "operation": "Update", "apiVersion": "v1", "time": "2026-12-05T23:00:00Z",
					"fieldsType": "FieldsV1", "fieldsV1": map[string]any{"f:data": map[string]any{"f:value": map[string]any{}}}}}},
			"data": map[string]any{"value": value}}
	}
	for i := range templateAfter {
		_, err := newObject(cm(i, fmt.Sprint(i)), typ)
		mustf(t, err, "project")
	}
	if typ.dict.p.Load() == nil {
		t.Fatalf("no template after %d objects", templateAfter)
	}
	long := fmt.Sprintf("%d-%s", 99, strings.Repeat("0123456789abcdef", 200))
	for _, tc := range []struct {
		value string
		delta bool
	}{{"42", true}, {long, false}} {
		o, err := newObject(cm(42, tc.value), typ)
		mustf(t, err, "project")
		plain, err := json.Marshal(project(typ.projection, cm(42, tc.value)))
		mustf(t, err, "marshal")
		if got := o.json(); string(got) != string(plain) {
			t.Fatalf("value of %d bytes reads back as\n%s\nwant\n%s", len(tc.value), got, plain)
		}
		if delta := o.rest[0] == deltaMark; delta != tc.delta {
			t.Errorf("value of %d bytes: kept as a delta %v (%d bytes of %d), want %v", len(tc.value), delta, len(o.rest), len(plain), tc.delta)
		}
		if !tc.delta {
			if allocs := testing.AllocsPerRun(100, func() { _ = o.json() }); allocs != 0 {
				t.Errorf("reading an object kept whole allocates %.0f times, want none", allocs)
			}
		}
	}
}
