package crdguard

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

var discard = slog.New(slog.DiscardHandler)

// memSource hands over objects held in memory (the unit tier's Source).
type memSource struct {
	objects []map[string]any
	// block, when set, makes Objects wait for its context to end after
	// handing over the objects (a source that never finishes).
	block bool
}

func (s *memSource) Objects(ctx context.Context, _ schema.GroupVersionResource, need Need, fn func(Item, int) error) (string, error) {
	for _, o := range s.objects {
		meta := o["metadata"].(map[string]any)
		ns, _ := meta["namespace"].(string)
		it := Item{Namespace: ns, Name: meta["name"].(string), ResourceVersion: meta["resourceVersion"].(string)}
		if need&Whole != 0 {
			it.Content = plainMap(o)
		}
		if need&Writers != 0 {
			it.Writers = writersOf(o)
		}
		if err := fn(it, len(s.objects)); err != nil {
			return "mem", err
		}
	}
	if s.block {
		<-ctx.Done()
		return "mem", ctx.Err()
	}
	return "mem", nil
}

// testCRD is a namespaced Widget CRD: v1 stored, with spec.color (an
// enum red, blue, green) and spec.name.
const testCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com, uid: 6b1c8a2e-0000-0000-0000-000000000001, resourceVersion: "100"}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                color: {type: string, enum: [red, blue, green]}
                name: {type: string, pattern: "^[a-z]+$"}
status:
  storedVersions: [v1]
`

func mustCRD(t testing.TB, doc string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict([]byte(doc), crd); err != nil {
		t.Fatal(err)
	}
	return crd
}

func widgetObj(ns, name, color, rv string) map[string]any {
	return map[string]any{"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"namespace": ns, "name": name, "resourceVersion": rv},
		"spec":     map[string]any{"color": color}}
}

func rawOf(t testing.TB, obj any) runtime.RawExtension {
	t.Helper()
	if obj == nil {
		return runtime.RawExtension{}
	}
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return runtime.RawExtension{Raw: b}
}

func request(t testing.TB, op admissionv1.Operation, sub string, old, new *apiextensionsv1.CustomResourceDefinition) *admissionv1.AdmissionRequest {
	t.Helper()
	req := &admissionv1.AdmissionRequest{UID: "req-1", Operation: op, SubResource: sub, Name: old.Name,
		Kind:      metav1.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"},
		Resource:  metav1.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"},
		UserInfo:  authenticationv1.UserInfo{Username: "alice", Groups: []string{"dev"}},
		OldObject: rawOf(t, old)}
	if new != nil {
		req.Object = rawOf(t, new)
	}
	return req
}

// narrowColor drops red from spec.color's enum.
func narrowColor(c *apiextensionsv1.CustomResourceDefinition) {
	p := c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	color := p.Properties["color"]
	color.Enum = color.Enum[1:]
	p.Properties["color"] = color
	c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = p
}

func TestReview(t *testing.T) {
	objects := []map[string]any{
		widgetObj("b", "w2", "red", "50"), widgetObj("a", "w1", "red", "51"), widgetObj("a", "w3", "blue", "52"),
	}
	addField := func(c *apiextensionsv1.CustomResourceDefinition) {
		p := c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
		p.Properties["size"] = apiextensionsv1.JSONSchemaProps{Type: "integer"}
		c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = p
	}
	changePattern := func(c *apiextensionsv1.CustomResourceDefinition) {
		p := c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
		name := p.Properties["name"]
		name.Pattern = "^[a-z0-9]+$"
		p.Properties["name"] = name
		c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = p
	}
	annotate := func(c *apiextensionsv1.CustomResourceDefinition) {
		c.Annotations = map[string]string{AllowAnnotation: "red is retired, JIRA-12"}
	}
	tests := []struct {
		name       string
		mode       Mode
		objects    []map[string]any
		max        int
		op         admissionv1.Operation
		editOld    func(*apiextensionsv1.CustomResourceDefinition)
		edit       func(*apiextensionsv1.CustomResourceDefinition)
		allowed    bool
		warnings   []string // each the start of a warning, in order
		message    []string // in the refusal's message
		overridden bool
	}{
		{name: "safe", mode: Deny, objects: objects, op: admissionv1.Update, edit: addField, allowed: true},
		{name: "metadata only", mode: Deny, objects: objects, op: admissionv1.Update, edit: annotate, allowed: true},
		{name: "narrowed enum, warn", mode: Warn, objects: objects, op: admissionv1.Update, edit: narrowColor, allowed: true,
			warnings: []string{"fieldwatch: enum-values-removed spec.color (v1): 2 objects rejected: a/w1, b/w2"}},
		{name: "narrowed enum, deny", mode: Deny, objects: objects, op: admissionv1.Update, edit: narrowColor,
			message: []string{"refuses this change of widgets.example.com", "enum-values-removed spec.color (v1): 2 objects rejected: a/w1, b/w2", AllowAnnotation}},
		{name: "narrowed enum, deny, annotated", mode: Deny, objects: objects, op: admissionv1.Update,
			edit:    func(c *apiextensionsv1.CustomResourceDefinition) { narrowColor(c); annotate(c) },
			allowed: true, overridden: true,
			warnings: []string{"fieldwatch: enum-values-removed spec.color (v1): 2 objects rejected",
				"fieldwatch: allowed by fieldwatch.io/allow-breaking: red is retired, JIRA-12"}},
		{name: "narrowed enum, deny, no object stranded", mode: Deny, objects: objects[2:], op: admissionv1.Update, edit: narrowColor, allowed: true,
			warnings: []string{"fieldwatch: enum-values-removed spec.color (v1): no object stranded"}},
		{name: "unknown check, deny", mode: Deny, op: admissionv1.Update, edit: changePattern,
			message: []string{"pattern-changed spec.name (v1): unknown, counted as breaking; no object stranded"}},
		{name: "limit, warn", mode: Warn, objects: objects, max: 2, op: admissionv1.Update, edit: narrowColor, allowed: true,
			warnings: []string{"fieldwatch: enum-values-removed spec.color (v1): 2 objects rejected",
				"fieldwatch: check incomplete (counts are lower bounds): stopped at 2 of 3 objects (--crd-impact-max-objects)"}},
		{name: "limit, deny: what is found is refused", mode: Deny, objects: objects, max: 1, op: admissionv1.Update, edit: narrowColor,
			message: []string{"enum-values-removed spec.color (v1): 1 object rejected: b/w2", "check incomplete (counts are lower bounds): stopped at 1 of 3 objects (--crd-impact-max-objects)"}},
		{name: "scope, deny", mode: Deny, objects: objects, op: admissionv1.Update,
			edit:    func(c *apiextensionsv1.CustomResourceDefinition) { c.Spec.Scope = apiextensionsv1.ClusterScoped },
			message: []string{"scope-changed /spec/scope: every object (3): a/w1, a/w3, b/w2"}},
		{name: "delete, warn", mode: Warn, objects: objects, op: admissionv1.Delete, allowed: true,
			warnings: []string{"fieldwatch: deleting CRD widgets.example.com deletes 3 Widgets in 2 namespaces",
				"fieldwatch:   a: 2 Widgets: w1, w3", "fieldwatch:   b: 1 Widget: w2"}},
		{name: "delete, deny", mode: Deny, objects: objects, op: admissionv1.Delete,
			message: []string{"refuses to delete CRD widgets.example.com: the apiserver would delete 3 Widgets with it", "a: 2 Widgets: w1, w3"}},
		{name: "delete, deny, annotated", mode: Deny, objects: objects, op: admissionv1.Delete, editOld: annotate, allowed: true, overridden: true,
			warnings: []string{"fieldwatch: deleting CRD", "fieldwatch:   a:", "fieldwatch:   b:", "fieldwatch: allowed by fieldwatch.io/allow-breaking: red is retired"}},
		{name: "delete without objects, deny", mode: Deny, op: admissionv1.Delete, allowed: true},
		{name: "off", mode: Off, objects: objects, op: admissionv1.Delete, allowed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := New(Options{Mode: tt.mode, Source: &memSource{objects: tt.objects}, MaxObjects: tt.max, Workers: 2, Logger: discard})
			if err != nil {
				t.Fatal(err)
			}
			old := mustCRD(t, testCRD)
			if tt.editOld != nil {
				tt.editOld(old)
			}
			var new *apiextensionsv1.CustomResourceDefinition
			if tt.op == admissionv1.Update {
				new = old.DeepCopy()
				tt.edit(new)
			}
			d := g.Review(context.Background(), request(t, tt.op, "", old, new))
			checkDecision(t, d)
			r := d.Response
			if r.Allowed != tt.allowed || (d.Override != nil) != tt.overridden {
				t.Fatalf("allowed %v, override %+v; want %v, %v (result %+v, warnings %q)", r.Allowed, d.Override, tt.allowed, tt.overridden, r.Result, r.Warnings)
			}
			if len(r.Warnings) != len(tt.warnings) {
				t.Fatalf("warnings:\n  %s\nwant lines starting:\n  %s", strings.Join(r.Warnings, "\n  "), strings.Join(tt.warnings, "\n  "))
			}
			for i, w := range tt.warnings {
				if !strings.HasPrefix(r.Warnings[i], w) {
					t.Errorf("warning %d %q, want it to start with %q", i, r.Warnings[i], w)
				}
			}
			if !tt.allowed {
				for _, m := range tt.message {
					if !strings.Contains(r.Result.Message, m) {
						t.Errorf("message %q lacks %q", r.Result.Message, m)
					}
				}
			}
			if tt.overridden {
				o := d.Override
				if o.User != "alice" || o.Reason != "red is retired, JIRA-12" || o.Operation != string(tt.op) || o.RequestUID != "req-1" || len(o.Checks) == 0 || o.Objects == 0 {
					t.Errorf("override %+v", o)
				}
			}
		})
	}
}

// checkDecision checks what every answer must hold: the request's UID,
// warnings within the apiserver's guidance, and a refusal that is an
// Invalid status with a message.
func checkDecision(t *testing.T, d *Decision) {
	t.Helper()
	r := d.Response
	if r.UID != "req-1" {
		t.Errorf("response UID %q", r.UID)
	}
	if len(r.Warnings) > maxWarnings+2 {
		t.Errorf("%d warnings", len(r.Warnings))
	}
	for _, w := range r.Warnings {
		if n := utf8.RuneCountInString(w); n > maxLine || !strings.HasPrefix(w, prefix) {
			t.Errorf("warning of %d characters, or not fieldwatch's: %q", n, w)
		}
	}
	if !r.Allowed && (r.Result == nil || r.Result.Code != 422 || r.Result.Reason != metav1.StatusReasonInvalid || r.Result.Message == "" || len(r.Warnings) > 0) {
		t.Errorf("refusal %+v", r.Result)
	}
}

// TestReviewWriters checks the checks whose stranded objects are the ones
// their writers show: a version no longer served, a subresource removed.
func TestReviewWriters(t *testing.T) {
	written := func(name, apiVersion, sub string) map[string]any {
		o := widgetObj("a", name, "blue", "60")
		entry := map[string]any{"manager": "kubectl", "operation": "Update", "apiVersion": apiVersion}
		if sub != "" {
			entry["subresource"] = sub
		}
		o["metadata"].(map[string]any)["managedFields"] = []any{entry}
		return o
	}
	objects := []map[string]any{
		written("old-client", "example.com/v1beta1", ""), written("status-writer", "example.com/v1", "status"), written("new-client", "example.com/v1", ""),
	}
	twoVersions := func() *apiextensionsv1.CustomResourceDefinition {
		c := mustCRD(t, testCRD)
		c.Spec.Versions[0].Subresources = &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}}
		beta := *c.Spec.Versions[0].DeepCopy()
		beta.Name, beta.Storage = "v1beta1", false
		c.Spec.Versions = append(c.Spec.Versions, beta)
		return c
	}
	tests := []struct {
		name string
		edit func(*apiextensionsv1.CustomResourceDefinition)
		want string
	}{
		{name: "version no longer served", edit: func(c *apiextensionsv1.CustomResourceDefinition) { c.Spec.Versions[1].Served = false },
			want: "served-version-removed (v1beta1): 1 object with fields last written at v1beta1: a/old-client"},
		{name: "status subresource removed", edit: func(c *apiextensionsv1.CustomResourceDefinition) { c.Spec.Versions[0].Subresources = nil },
			want: "status-subresource-removed (v1): 1 object with status written at v1: a/status-writer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := twoVersions()
			new := old.DeepCopy()
			tt.edit(new)
			g := newGuard(t, Options{Mode: Deny, Source: &memSource{objects: objects}})
			d := g.Review(context.Background(), request(t, admissionv1.Update, "", old, new))
			checkDecision(t, d)
			if d.Response.Allowed || !strings.Contains(d.Response.Result.Message, tt.want) {
				t.Errorf("answer %+v, want refused with %q", d.Response, tt.want)
			}
		})
	}

	// A status update that leaves status.storedVersions as it is (the
	// apiextensions controllers' conditions) is allowed at once.
	old := twoVersions()
	old.Status.StoredVersions = []string{"v1"}
	new := old.DeepCopy()
	new.Status.Conditions = []apiextensionsv1.CustomResourceDefinitionCondition{{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue}}
	src := &memSource{objects: objects}
	d := newGuard(t, Options{Mode: Deny, Source: src}).Review(context.Background(), request(t, admissionv1.Update, "status", old, new))
	if checkDecision(t, d); !d.Response.Allowed || len(d.Response.Warnings) > 0 {
		t.Errorf("a conditions update: %+v", d.Response)
	}
}

// TestReviewStoredVersions checks the versions a change takes out of
// status.storedVersions against the ledger's placing of the objects.
func TestReviewStoredVersions(t *testing.T) {
	twoVersions := func() *apiextensionsv1.CustomResourceDefinition {
		c := mustCRD(t, testCRD)
		v1alpha1 := *c.Spec.Versions[0].DeepCopy()
		v1alpha1.Name, v1alpha1.Storage = "v1alpha1", false
		c.Spec.Versions = append(c.Spec.Versions, v1alpha1)
		c.Status.StoredVersions = []string{"v1alpha1", "v1"}
		return c
	}
	objects := []map[string]any{widgetObj("a", "old", "red", "40"), widgetObj("a", "new", "red", "120")}
	tests := []struct {
		name     string
		mode     Mode
		migrated string
		allowed  bool
		warning  string
	}{
		{name: "one object may be at v1alpha1, warn", mode: Warn, allowed: true,
			warning: "fieldwatch: stored-version-cleared /status/storedVersions/0 (v1alpha1): 0 objects stored at v1alpha1, 1 may be: a/old"},
		{name: "one object may be at v1alpha1, deny", mode: Deny, warning: "stored-version-cleared"},
		{name: "migrated", mode: Deny, migrated: `{"version":"v1","resourceVersion":"110","objects":2,"rewritten":1,"time":"2026-01-01T00:00:00Z"}`, allowed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := twoVersions()
			// The CRD was last written long ago: the objects after it are
			// at v1.
			long := metav1.NewTime(time.Now().Add(-time.Hour))
			old.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Time: &long}}
			if tt.migrated != "" {
				old.Annotations = map[string]string{MigrationAnnotation: tt.migrated}
			}
			new := old.DeepCopy()
			new.Status.StoredVersions = []string{"v1"}
			g, err := New(Options{Mode: tt.mode, Source: &memSource{objects: objects}, Logger: discard})
			if err != nil {
				t.Fatal(err)
			}
			d := g.Review(context.Background(), request(t, admissionv1.Update, "status", old, new))
			checkDecision(t, d)
			r := d.Response
			if r.Allowed != tt.allowed {
				t.Fatalf("allowed %v, result %+v, warnings %q", r.Allowed, r.Result, r.Warnings)
			}
			got := strings.Join(r.Warnings, "\n")
			if r.Result != nil {
				got = r.Result.Message
			}
			if !strings.Contains(got, tt.warning) {
				t.Errorf("answer %q lacks %q", got, tt.warning)
			}
		})
	}
}

// TestReviewBadInput gives the guard what it cannot check: each gets an
// answer, allowed (the apiserver refuses what is invalid itself), saying
// why in a warning.
func TestReviewBadInput(t *testing.T) {
	old := mustCRD(t, testCRD)
	objects := []map[string]any{widgetObj("a", "w1", "red", "51")}
	nonStructural := old.DeepCopy()
	narrowColor(nonStructural)
	spec := nonStructural.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	spec.Type = "" // a property without a type is not structural
	nonStructural.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
	badCEL := old.DeepCopy()
	narrowColor(badCEL)
	badCEL.Spec.Versions[0].Schema.OpenAPIV3Schema.XValidations = apiextensionsv1.ValidationRules{{Rule: "self.spec.color ==", Message: "broken"}}
	tests := []struct {
		name    string
		req     func() *admissionv1.AdmissionRequest
		source  *memSource
		timeout time.Duration
		warning string
	}{
		{name: "not JSON", req: func() *admissionv1.AdmissionRequest {
			r := request(t, admissionv1.Update, "", old, old)
			r.Object.Raw = []byte("{not json")
			return r
		}, warning: "check incomplete: cannot read the new CRD"},
		{name: "no old object", req: func() *admissionv1.AdmissionRequest {
			r := request(t, admissionv1.Delete, "", old, nil)
			r.OldObject.Raw = nil
			return r
		}, warning: "cannot read the CRD being deleted: the request carries none"},
		{name: "not structural", req: func() *admissionv1.AdmissionRequest { return request(t, admissionv1.Update, "", old, nonStructural) },
			warning: "objects not checked: version v1: schema is not structural"},
		{name: "CEL rule that does not compile", req: func() *admissionv1.AdmissionRequest { return request(t, admissionv1.Update, "", old, badCEL) },
			warning: "fieldwatch: enum-values-removed spec.color (v1): 1 object rejected"},
		{name: "a source that never finishes", req: func() *admissionv1.AdmissionRequest {
			n := old.DeepCopy()
			narrowColor(n)
			return request(t, admissionv1.Update, "", old, n)
		}, source: &memSource{objects: objects, block: true}, timeout: 200 * time.Millisecond, warning: "check incomplete (counts are lower bounds): out of time after 1 object read"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := tt.source
			if src == nil {
				src = &memSource{objects: objects}
			}
			g, err := New(Options{Mode: Deny, Source: src, Timeout: tt.timeout, Logger: discard})
			if err != nil {
				t.Fatal(err)
			}
			d := g.Review(context.Background(), tt.req())
			checkDecision(t, d)
			if !d.Response.Allowed && !strings.Contains(tt.name, "CEL") {
				t.Fatalf("refused: %+v", d.Response.Result)
			}
			got := strings.Join(d.Response.Warnings, "\n")
			if d.Response.Result != nil {
				got = d.Response.Result.Message
			}
			if !strings.Contains(got, strings.TrimPrefix(tt.warning, prefix)) {
				t.Errorf("answer:\n%s\nlacks %q", got, tt.warning)
			}
		})
	}
}

// TestReviewHugeSchema reviews a change of a CRD of about 5 MB with a
// CEL rule per group of fields: it answers, allowed with its findings or
// incomplete, never failing.
func TestReviewHugeSchema(t *testing.T) {
	testenv.SkipShort(t, testenv.LoadTest) // compiles thousands of CEL rules
	old := mustCRD(t, testCRD)
	spec := old.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	for i := 0; i < 2600; i++ {
		spec.Properties[fmt.Sprintf("group%05d", i)] = apiextensionsv1.JSONSchemaProps{Type: "object",
			Description:  strings.Repeat("a field of a generated CRD, documented at length. ", 30),
			XValidations: apiextensionsv1.ValidationRules{{Rule: "!has(self.min) || !has(self.max) || self.min <= self.max", Message: "min above max"}},
			Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"min": {Type: "integer"}, "max": {Type: "integer"}, "mode": {Type: "string", Enum: []apiextensionsv1.JSON{{Raw: []byte(`"A"`)}, {Raw: []byte(`"B"`)}}}}}
	}
	old.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
	new := old.DeepCopy()
	narrowColor(new)
	req := request(t, admissionv1.Update, "", old, new)
	if n := len(req.Object.Raw); n < 4<<20 {
		t.Fatalf("the CRD is %d bytes", n)
	}
	g, err := New(Options{Mode: Deny, Source: &memSource{objects: []map[string]any{widgetObj("a", "w1", "red", "51")}}, Timeout: 2 * time.Second, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	d := g.Review(context.Background(), req)
	checkDecision(t, d)
	all := strings.Join(d.Response.Warnings, "\n")
	if d.Response.Result != nil {
		all = d.Response.Result.Message
	}
	if !strings.Contains(all, "enum-values-removed") && !strings.Contains(all, "check incomplete") {
		t.Errorf("answer %q", all)
	}
}
