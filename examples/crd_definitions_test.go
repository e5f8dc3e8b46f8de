package examples_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fieldwatch/fieldwatch/crd/diff"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// TestCRDDefinitions runs examples/crd-definitions while the Gizmo CRD of
// its objects.yaml (renamed, so that it is the test's own) goes through
// what the rules warn about and what they do not: a version stops being
// served, schemas change, a version is added, an unserved one removed, a
// served one removed, and the CRD is deleted. The apiserver also writes
// the CRD's status meanwhile, which must stay quiet.
//
// The steps that must fire wait for their firing, so that the changes
// around them are not merged with them; a quiet step is shown quiet by a
// later firing of the same rule (each rule's log writes in order).
func TestCRDDefinitions(t *testing.T) {
	env := testenv.Shared(t)
	dyn := env.Dynamic(t).Resource(crdResource)
	ctx := context.Background()
	fw := startFieldwatch(t, "crd-definitions/rules.yaml")

	data, err := os.ReadFile("crd-definitions/objects.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const group = "crd-definitions.example.com"
	name := "gizmos." + group
	var uid types.UID
	// Taken from the queue before it changes: a change merged with its
	// creation would be a creation, which these rules ignore.
	fw.step(t, "apply the Gizmo CRD", func() error {
		objs, err := env.Apply(ctx, testenv.ApplyOptions{FieldManager: "kubectl"}, bytes.ReplaceAll(data, []byte("example.com"), []byte(group)))
		if err == nil {
			uid = objs[0].GetUID()
		}
		return err
	})
	t.Cleanup(func() { _ = dyn.Delete(context.Background(), name, metav1.DeleteOptions{}) })

	patch := func(what, ops string) {
		t.Helper()
		if _, err := dyn.Patch(ctx, name, types.JSONPatchType, []byte(ops), metav1.PatchOptions{FieldManager: "kubectl-patch"}); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// waitFirings waits for n firings of rule for the CRD and returns them.
	waitFirings := func(rule string, n int) []payload {
		t.Helper()
		waitFor(t, fmt.Sprintf("%d firings of %s", n, rule), func() (bool, string) {
			return len(fw.firings(t, rule, "", name)) >= n, fw.stdout.String()
		})
		return fw.firings(t, rule, "", name)
	}
	addProperty := func(prop string) string {
		return `[{"op": "add", "path": "/spec/versions/1/schema/openAPIV3Schema/properties/spec/properties/` + prop + `", "value": {"type": "string"}}]`
	}

	patch("stop serving v1alpha1", `[{"op": "replace", "path": "/spec/versions/0/served", "value": false}]`)
	waitFirings("crd-version-unserved", 1)
	patch("v1 gains spec.color", addProperty("color"))
	waitFirings("crd-schema-changed", 1)
	patch("add a served v2 (quiet)", `[{"op": "add", "path": "/spec/versions/-", "value":
		{"name": "v2", "served": true, "storage": false, "schema": {"openAPIV3Schema": {"type": "object"}}}}]`)
	patch("remove the unserved v1alpha1 (quiet)", `[{"op": "remove", "path": "/spec/versions/0"}]`)
	// v1 is now versions[0].
	patch("v1 gains spec.shape", `[{"op": "add", "path": "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/shape", "value": {"type": "string"}}]`)
	waitFirings("crd-schema-changed", 2)
	patch("remove the served v2", `[{"op": "remove", "path": "/spec/versions/1"}]`)
	unserved := waitFirings("crd-version-unserved", 2)
	if err := dyn.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete the CRD: %v", err)
	}
	deleted := waitFirings("crd-deleted", 1)

	if len(unserved) != 2 {
		t.Errorf("crd-version-unserved fired %d times, want 2 (v1alpha1 unserved, v2 removed):\n%s", len(unserved), fw.stdout.String())
	} else {
		checkChanges(t, unserved[0], `[{"op":"replace","path":"/spec/versions/0/served","value":false,"oldValue":true}]`)
		if c := mustJSON(t, unserved[1].Changes); !strings.Contains(c, `"op":"remove","path":"/spec/versions/1"`) || !strings.Contains(c, `"name":"v2"`) {
			t.Errorf("removing v2: changes %s", c)
		}
		if a := unserved[0].Actor; a == nil || a.Manager != "kubectl-patch" {
			t.Errorf("actor = %+v, want kubectl-patch", a)
		}
	}
	schema := fw.firings(t, "crd-schema-changed", "", name)
	if len(schema) != 2 {
		t.Errorf("crd-schema-changed fired %d times, want 2 (color, shape):\n%s", len(schema), fw.stdout.String())
	} else {
		checkChanges(t, schema[0], `[{"op":"add","path":"/spec/versions/1/schema/openAPIV3Schema/properties/spec/properties/color","value":{"type":"string"}}]`)
		if c := mustJSON(t, schema[1].Changes); !strings.Contains(c, "shape") {
			t.Errorf("spec.shape added: changes %s", c)
		}
	}
	if p := deleted[0]; p.Type != "deleted" || p.UID != string(uid) || p.Namespace != "" || len(p.Changes) != 0 {
		t.Errorf("deletion payload: %s", p.raw)
	}
	for _, p := range fw.payloads(t) {
		if p.Resource.Resource != "customresourcedefinitions" {
			t.Errorf("not a CRD: %s", p.raw)
		}
	}

	// Warnings, in the default namespace (the CRD has none).
	for _, reason := range []string{"CRDVersionUnserved", "CRDSchemaChanged", "CRDDeleted"} {
		ev := waitEvent(t, metav1.NamespaceDefault, uid, reason)
		if ev.Type != corev1.EventTypeWarning || !strings.HasPrefix(ev.Note, name) || ev.Regarding.Kind != "CustomResourceDefinition" {
			b, _ := json.Marshal(ev)
			t.Errorf("%s Event: %s", reason, b)
		}
	}
	if len(schema) == 2 {
		checkCRDStates(t, fw, name, schema[0].Time, schema[1].Time, deleted[0].Time)
	}
}

// checkCRDStates asks the history, as a user who may get CRDs, what the
// CRD was when v1 had gained spec.color and when it had gained
// spec.shape (the two schema changes' times), what changed between, and
// what it was after its deletion.
func checkCRDStates(t *testing.T, fw *fieldwatch, name string, color, shape, deleted time.Time) {
	t.Helper()
	env := testenv.Shared(t)
	token := env.ServiceAccountToken(t, "crd-definitions", "crd-reader")
	env.GrantRead(t, "crd-definitions", "crd-reader", "apiextensions.k8s.io", "customresourcedefinitions", "")
	// get polls until the answer parses into into and done holds: the
	// history records states after the sinks have the payload.
	get := func(query string, into any, done func() bool) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+fw.addr+"/api/v1/history/objects/customresourcedefinitions.apiextensions.k8s.io/"+name+"?"+query, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		waitFor(t, "the CRD's states: "+query, func() (bool, string) {
			resp, err := httpClient.Do(req)
			if err != nil {
				return false, err.Error()
			}
			defer func() { _ = resp.Body.Close() }()
			body, _ := io.ReadAll(resp.Body)
			return resp.StatusCode == http.StatusOK && json.Unmarshal(body, into) == nil && done(), resp.Status + " " + string(body)
		})
	}
	var d struct {
		From, To struct{ Object json.RawMessage }
		Changes  []struct{ Changes json.RawMessage }
	}
	get(url.Values{"from": {color.Format(time.RFC3339Nano)}, "to": {shape.Format(time.RFC3339Nano)}}.Encode(), &d, func() bool { return strings.Contains(string(d.To.Object), `"shape"`) })
	from, to := string(d.From.Object), string(d.To.Object)
	if !strings.Contains(from, `"color"`) || strings.Contains(from, `"shape"`) || !strings.Contains(from, `"v1alpha1"`) ||
		!strings.Contains(to, `"shape"`) || strings.Contains(to, `"v1alpha1"`) || !strings.Contains(to, `"v2"`) {
		t.Errorf("the CRD with spec.color:\n%s\nwith spec.shape:\n%s", from, to)
	}
	// Adding v2, removing v1alpha1 (the list replaced) and adding
	// spec.shape, among the apiserver's writes of the CRD's status.
	var ours []string
	for _, c := range d.Changes {
		if strings.Contains(string(c.Changes), `"path":"/spec/versions`) {
			ours = append(ours, string(c.Changes))
		}
	}
	if len(ours) != 3 || !strings.Contains(ours[0], `"name":"v2"`) || !strings.Contains(ours[1], `"name":"v1alpha1"`) ||
		!strings.Contains(ours[2], "shape") {
		t.Errorf("the changes of spec.versions between: %q", ours)
	}
	var after struct {
		Object json.RawMessage
		Last   struct{ Type string }
	}
	get(url.Values{"at": {deleted.Format(time.RFC3339Nano)}}.Encode(), &after, func() bool { return after.Last.Type == "deleted" })
	if string(after.Object) != "null" {
		t.Errorf("after the deletion: %s, last %s", after.Object, after.Last.Type)
	}
}

// breakingCRD is the Widget CRD of TestCRDBreaking's group, as one kubectl
// apply manifest: v1 (served and stored unless v1Served is false) and
// v1beta1 (served) with the same schema.
type breakingCRD struct {
	enum     string // spec.color's enum
	owner    bool   // spec.owner exists
	weight   bool   // spec.weight exists
	required bool   // spec.size is required
	v1Served bool
}

func (c breakingCRD) manifest(group string) []byte {
	props := "color: {type: string, enum: " + c.enum + "}, size: {type: integer}"
	if c.owner {
		props += ", owner: {type: string}"
	}
	if c.weight {
		props += ", weight: {type: integer}"
	}
	required := ""
	if c.required {
		required = ", required: [size]"
	}
	schema := fmt.Sprintf("{openAPIV3Schema: {type: object, properties: {spec: {type: object%s, properties: {%s}}}}}", required, props)
	return []byte(fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.%[1]s}
spec:
  group: %[1]s
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
    - {name: v1, served: %[2]v, storage: %[2]v, schema: %[3]s}
    - {name: v1beta1, served: true, storage: %[4]v, schema: %[3]s}
`, group, c.v1Served, schema, !c.v1Served))
}

// TestCRDBreaking runs crd-breaking of examples/crd-definitions while a
// CRD with objects goes through kubectl-apply-style updates: a safe one,
// then one that removes a field, one that narrows an enum, one that makes
// a field required and one that stops serving the stored version. Each
// breaking update fires once, with its checks and the objects they hit,
// and those objects are exactly those whose content (as it was before the
// update) the apiserver now rejects on a server-side dry-run create; the
// safe update fires nothing. The objects come from fieldwatch's cache, as
// they were before each change: a removed field is pruned from every read
// after it.
func TestCRDBreaking(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	fw := startFieldwatch(t, "crd-definitions/rules.yaml")
	const group = "breaking.crd-definitions.example.com"
	const ns = "crd-breaking"
	name := "widgets." + group
	dyn := env.Dynamic(t)
	gvr := func(v string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: group, Version: v, Resource: "widgets"}
	}
	ensureNamespace(t, ns)

	crd := breakingCRD{enum: "[red, green, blue]", owner: true, v1Served: true}
	var uid types.UID
	apply := func(what string, c breakingCRD) {
		t.Helper()
		objs, err := env.Apply(ctx, testenv.ApplyOptions{FieldManager: "kubectl"}, c.manifest(group))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		uid = objs[0].GetUID()
		crd = c
	}
	apply("create the CRD", crd)
	t.Cleanup(func() { _ = dyn.Resource(crdResource).Delete(context.Background(), name, metav1.DeleteOptions{}) })
	widgets := map[string]string{
		"red":        "{color: red, size: 1}",
		"green":      "{color: green, size: 2, owner: ann}",
		"blue-owner": "{color: blue, owner: bob}",
		"green-2":    "{color: green}",
		"plain":      "{size: 3}",
		"owner":      "{owner: cy, size: 4}",
	}
	var manifest strings.Builder
	for n, spec := range widgets {
		fmt.Fprintf(&manifest, "---\napiVersion: %s/v1\nkind: Widget\nmetadata: {name: %s, namespace: %s}\nspec: %s\n", group, n, ns, spec)
	}
	if _, err := env.Apply(ctx, testenv.ApplyOptions{FieldManager: "kubectl"}, []byte(manifest.String())); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "fieldwatch to cache the widgets", func() (bool, string) {
		n := fw.metric(t, `fieldwatch_watcher_events_total{group="`+group+`",resource="widgets",type="created"`)
		return n >= len(widgets), fmt.Sprintf("%d created", n)
	})

	// current reads the widgets at v1 as the apiserver serves them now:
	// the content a re-create would send.
	current := func() []map[string]any {
		t.Helper()
		list, err := dyn.Resource(gvr("v1")).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("list widgets: %v", err)
		}
		out := make([]map[string]any, len(list.Items))
		for i := range list.Items {
			out[i] = list.Items[i].Object
		}
		return out
	}
	// rejected dry-run creates each object's content under a new name,
	// with strict field validation as kubectl sends it, and returns the
	// names of those the apiserver rejects.
	rejected := func(objs []map[string]any) ([]string, map[string]string) {
		t.Helper()
		var names []string
		why := map[string]string{}
		for _, o := range objs {
			u := (&unstructured.Unstructured{Object: o}).DeepCopy()
			n := u.GetName()
			u.Object["metadata"] = map[string]any{"name": n + "-again", "namespace": ns}
			_, err := dyn.Resource(gvr("v1")).Namespace(ns).Create(ctx, u,
				metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: metav1.FieldValidationStrict})
			if err != nil {
				names = append(names, n)
				why[n] = err.Error()
			}
		}
		slices.Sort(names)
		return names, why
	}
	if names, why := rejected(current()); len(names) > 0 {
		t.Fatalf("before any change the apiserver rejects %v: %v", names, why)
	}

	firings := func() []payload { return fw.firings(t, "crd-breaking", "", name) }
	// step applies a CRD update that must fire crd-breaking, waits for the
	// firing, and checks it against the apiserver. hits lists, per "check
	// version" impact, the objects it names (one entry per field).
	step := func(what string, c breakingCRD, checks []string, hits map[string][]string) {
		t.Helper()
		before := current()
		n := len(firings())
		apply(what, c)
		waitFor(t, what+": crd-breaking fires", func() (bool, string) {
			return len(firings()) > n, fw.stdout.String()
		})
		p := firings()[n]
		res := p.CRD
		if res == nil {
			t.Fatalf("%s: payload without crd: %s", what, p.raw)
		}
		var got []string
		for _, c := range res.Checks {
			if c.Severity != string(diff.Safe) {
				got = append(got, c.Check+" "+c.Version+" "+c.Field)
			}
		}
		if !slices.Equal(got, checks) {
			t.Errorf("%s: breaking checks %q, want %q", what, got, checks)
		}
		if res.Breaking != len(checks) || res.Scanned != len(widgets) || res.ImpactError != "" {
			t.Errorf("%s: breaking %d, scanned %d, impactError %q", what, res.Breaking, res.Scanned, res.ImpactError)
		}
		byCheck := map[string][]string{}
		var reported []string
		for _, im := range res.Impact {
			if im.Error != "" {
				t.Errorf("%s: %s impact not computed: %s", what, im.Check, im.Error)
			}
			for _, h := range im.Objects {
				key := im.Check + " " + im.Version
				byCheck[key] = append(byCheck[key], h.Name)
				if !slices.Contains(reported, h.Name) {
					reported = append(reported, h.Name)
				}
			}
		}
		slices.Sort(reported)
		if !reflect.DeepEqual(byCheck, hits) {
			t.Errorf("%s: impact %v, want %v\n%s", what, byCheck, hits, p.raw)
		}
		// The apiserver serves the new schema once its CRD handler has
		// caught up: poll until it rejects what the impact reports.
		waitFor(t, what+": the apiserver rejects a re-create of exactly the objects the impact reports", func() (bool, string) {
			names, why := rejected(before)
			return slices.Equal(names, reported), fmt.Sprintf("the impact reports %v; the apiserver rejects %v (%v)", reported, names, why)
		})
	}

	// A safe change: a field added. crd-schema-changed fires; crd-breaking
	// does not (the next firings of crd-breaking are at later versions).
	apply("add spec.weight", breakingCRD{enum: crd.enum, owner: true, weight: true, v1Served: true})
	safe := fw.waitFiring(t, "crd-schema-changed", "", name, "")
	step("remove spec.owner", breakingCRD{enum: "[red, green, blue]", weight: true, v1Served: true},
		[]string{"field-removed v1 spec.owner", "field-removed v1beta1 spec.owner"},
		map[string][]string{"field-removed v1": {"blue-owner", "green", "owner"}, "field-removed v1beta1": {"blue-owner", "green", "owner"}})
	step("narrow spec.color", breakingCRD{enum: "[red, blue]", weight: true, v1Served: true},
		[]string{"enum-values-removed v1 spec.color", "enum-values-removed v1beta1 spec.color"},
		map[string][]string{"enum-values-removed v1": {"green", "green-2"}, "enum-values-removed v1beta1": {"green", "green-2"}})
	// Objects already rejected by the narrowed enum show as invalid:
	// every object a re-create fails for is named.
	step("require spec.size", breakingCRD{enum: "[red, blue]", weight: true, required: true, v1Served: true},
		[]string{"required-added v1 spec.size", "required-added v1beta1 spec.size"},
		map[string][]string{"required-added v1": {"blue-owner", "green-2"}, "required-added v1beta1": {"blue-owner", "green-2"}, "invalid v1": {"green", "green-2"}, "invalid v1beta1": {"green", "green-2"}})
	step("stop serving the stored version v1", breakingCRD{enum: "[red, blue]", weight: true, required: true},
		[]string{"served-version-removed v1 "},
		map[string][]string{"served-version-removed v1": {"blue-owner", "green", "green-2", "owner", "plain", "red"},
			// v1beta1, now the one version served, is checked too: the
			// objects the two steps before made invalid still are (green-2
			// twice: its color and its size).
			"invalid v1beta1": {"blue-owner", "green", "green-2", "green-2"}})

	for _, p := range firings() {
		if p.ResourceVersion == safe.ResourceVersion {
			t.Errorf("crd-breaking fired on the safe change: %s", p.raw)
		}
	}
	if n := len(firings()); n != 4 {
		t.Errorf("crd-breaking fired %d times, want 4", n)
	}
	if cache, list := fw.metric(t, `fieldwatch_crd_impact_scans_total{source="cache"}`), fw.metric(t, `fieldwatch_crd_impact_scans_total{source="list"}`); cache != 4 || list != 0 {
		t.Errorf("impact scans from the cache %d, from a list %d; want 4 and 0", cache, list)
	}
	// One Event per breaking step; the one of "require spec.size" (two
	// checks, six objects scanned) shows the note's shape.
	ev := waitEventWhere(t, metav1.NamespaceDefault, uid, "CRDBreakingChange", func(ev eventsv1.Event) bool {
		return strings.HasPrefix(ev.Note, name+": 2 breaking change(s):") && strings.Contains(ev.Note, "6 object(s) checked")
	})
	if ev.Type != corev1.EventTypeWarning {
		b, _ := json.Marshal(ev)
		t.Errorf("CRDBreakingChange Event: %s", b)
	}
}
