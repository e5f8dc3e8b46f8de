package impact

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/crd/diff"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

func TestMain(m *testing.M) { testenv.Main(m, testenv.Options{}) }

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// liveCRD is a Gadget CRD in its own group: v1 served and stored; v2
// served when twoVersions.
func liveCRD(group string, twoVersions bool) *apiextensionsv1.CustomResourceDefinition {
	spec := apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"color":  {Type: "string", Enum: []apiextensionsv1.JSON{{Raw: []byte(`"red"`)}, {Raw: []byte(`"purple"`)}, {Raw: []byte(`"blue"`)}}},
		"size":   {Type: "integer"},
		"legacy": {Type: "string"},
		"note":   {Type: "string"},
	}}
	version := func(name string, storage bool) apiextensionsv1.CustomResourceDefinitionVersion {
		return apiextensionsv1.CustomResourceDefinitionVersion{Name: name, Served: true, Storage: storage,
			Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
				Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": *spec.DeepCopy()}}}}
	}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "gadgets." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group, Scope: apiextensionsv1.NamespaceScoped,
			Names:    apiextensionsv1.CustomResourceDefinitionNames{Plural: "gadgets", Singular: "gadget", Kind: "Gadget", ListKind: "GadgetList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{version("v1", true)},
		},
	}
	if twoVersions {
		crd.Spec.Versions = append(crd.Spec.Versions, version("v2", false))
	}
	return crd
}

// gadgets are the objects every scenario starts with.
var gadgets = map[string]string{
	"red-legacy":  `{"color": "red", "size": 1, "legacy": "x"}`,
	"red":         `{"color": "red", "size": 2}`,
	"purple":      `{"color": "purple", "size": 3}`,
	"blue":        `{"color": "blue", "size": 4}`,
	"blue-legacy": `{"color": "blue", "legacy": "y"}`,
	"no-size":     `{"color": "blue", "note": "n"}`,
	"empty":       `{}`,
}

// liveEnv is one scenario's control plane handles.
type liveEnv struct {
	t     *testing.T
	ctx   context.Context
	env   *testenv.Env
	dyn   dynamic.Interface
	ns    string
	group string
	gvr   func(version string) schema.GroupVersionResource
}

func newLiveEnv(t *testing.T, group string, twoVersions bool) *liveEnv {
	t.Helper()
	env := testenv.Shared(t)
	ctx := context.Background()
	l := &liveEnv{t: t, ctx: ctx, env: env, dyn: env.Dynamic(t), ns: strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())), group: group}
	l.gvr = func(v string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: group, Version: v, Resource: "gadgets"}
	}
	if _, err := env.Clientset(t).CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: l.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	if err := env.InstallCRD(liveCRD(group, twoVersions)); err != nil {
		t.Fatalf("install CRD: %v", err)
	}
	for name, spec := range gadgets {
		if _, err := l.dyn.Resource(l.gvr("v1")).Namespace(l.ns).Create(ctx, l.gadget("v1", name, spec), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}
	return l
}

func (l *liveEnv) gadget(version, name, spec string) *unstructured.Unstructured {
	l.t.Helper()
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON([]byte(fmt.Sprintf(`{"apiVersion": %q, "kind": "Gadget", "metadata": {"name": %q, "namespace": %q, "labels": {"app": "gadgets"}}, "spec": %s}`,
		l.group+"/"+version, name, l.ns, spec))); err != nil {
		l.t.Fatal(err)
	}
	return u
}

// list lists the scenario's objects at a version, as fieldwatch would.
func (l *liveEnv) list(version string) []map[string]any {
	l.t.Helper()
	list, err := l.dyn.Resource(l.gvr(version)).Namespace(l.ns).List(l.ctx, metav1.ListOptions{})
	if err != nil {
		l.t.Fatalf("list: %v", err)
	}
	out := make([]map[string]any, len(list.Items))
	for i := range list.Items {
		out[i] = list.Items[i].Object
	}
	return out
}

// crd reads the live CRD the way the watcher hands it to rules.
func (l *liveEnv) crd() *apiextensionsv1.CustomResourceDefinition {
	l.t.Helper()
	u, err := l.dyn.Resource(crdGVR).Get(l.ctx, "gadgets."+l.group, metav1.GetOptions{})
	if err != nil {
		l.t.Fatalf("get CRD: %v", err)
	}
	crd, err := diff.FromMap(u.Object)
	if err != nil {
		l.t.Fatalf("CRD from map: %v", err)
	}
	return crd
}

// update writes a CRD as kubectl apply's update would (optionally as a
// dry run) and returns the apiserver's answer.
func (l *liveEnv) update(crd *apiextensionsv1.CustomResourceDefinition, dryRun bool) error {
	l.t.Helper()
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(crd)
	if err != nil {
		l.t.Fatal(err)
	}
	opts := metav1.UpdateOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err = l.dyn.Resource(crdGVR).Update(l.ctx, &unstructured.Unstructured{Object: obj}, opts)
	return err
}

// createAgain dry-run creates an object's content under a new name, with
// strict field validation as kubectl sends it: what a re-create, a restore
// or a GitOps re-apply after a delete meets. It returns the apiserver's
// error.
func (l *liveEnv) createAgain(obj map[string]any) error {
	l.t.Helper()
	u := (&unstructured.Unstructured{Object: obj}).DeepCopy()
	meta := u.Object["metadata"].(map[string]any)
	u.Object["metadata"] = map[string]any{"name": meta["name"].(string) + "-again", "namespace": meta["namespace"], "labels": meta["labels"]}
	gv, err := schema.ParseGroupVersion(u.GetAPIVersion())
	if err != nil {
		l.t.Fatal(err)
	}
	_, err = l.dyn.Resource(l.gvr(gv.Version)).Namespace(l.ns).Create(l.ctx, u,
		metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: metav1.FieldValidationStrict})
	return err
}

// rejected returns the names of the objects a re-create of their content
// fails for, with the reasons.
func (l *liveEnv) rejected(objs []map[string]any) (names []string, why map[string]string) {
	why = map[string]string{}
	for _, o := range objs {
		name := o["metadata"].(map[string]any)["name"].(string)
		if err := l.createAgain(o); err != nil {
			names = append(names, name)
			why[name] = err.Error()
		}
	}
	sort.Strings(names)
	return names, why
}

// reported returns the names of the objects the impact of res names, per
// check.
func reported(t *testing.T, res *diff.Result) (names []string, byCheck map[string][]string) {
	t.Helper()
	byCheck = map[string][]string{}
	seen := map[string]bool{}
	for _, im := range res.Impact {
		if im.Count != len(im.Objects) {
			t.Fatalf("%s: count %d but %d samples (the scenarios stay under %d)", im.Check, im.Count, len(im.Objects), diff.MaxSamples)
		}
		for _, h := range im.Objects {
			byCheck[im.Check] = append(byCheck[im.Check], h.Name)
			if !seen[h.Name] {
				seen[h.Name] = true
				names = append(names, h.Name)
			}
		}
	}
	sort.Strings(names)
	return names, byCheck
}

func checkNames(res *diff.Result) []string {
	var out []string
	for _, c := range res.Checks {
		out = append(out, c.Check+" "+string(c.Severity)+" "+c.Field)
	}
	return out
}

// TestLiveImpact changes a CRD on a real apiserver the way kubectl apply
// does and checks, for each change, that the objects the impact scan
// reports are exactly those whose content the apiserver now rejects on a
// create, and that updates leaving the offending field alone still pass
// (validation ratcheting), which is why the impact says "when created
// again or when the field changes".
func TestLiveImpact(t *testing.T) {
	spec := func(crd *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.JSONSchemaProps {
		s := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
		return &s
	}
	setSpec := func(crd *apiextensionsv1.CustomResourceDefinition, s *apiextensionsv1.JSONSchemaProps) {
		crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = *s
	}
	tests := []struct {
		name       string
		group      string
		edit       func(*apiextensionsv1.CustomResourceDefinition)
		checks     []string
		impact     map[string][]string // check -> objects
		fieldEdits map[string]string   // object -> a merge patch changing the offending field, rejected
	}{
		{
			name: "field removed", group: "removed.impact.example.com",
			edit: func(crd *apiextensionsv1.CustomResourceDefinition) {
				s := spec(crd)
				delete(s.Properties, "legacy")
				setSpec(crd, s)
			},
			checks: []string{"field-removed breaking spec.legacy"},
			impact: map[string][]string{"field-removed": {"blue-legacy", "red-legacy"}},
		},
		{
			name: "enum narrowed", group: "enum.impact.example.com",
			edit: func(crd *apiextensionsv1.CustomResourceDefinition) {
				s := spec(crd)
				p := s.Properties["color"]
				p.Enum = p.Enum[2:]
				s.Properties["color"] = p
				setSpec(crd, s)
			},
			checks:     []string{"enum-values-removed breaking spec.color"},
			impact:     map[string][]string{"enum-values-removed": {"purple", "red", "red-legacy"}},
			fieldEdits: map[string]string{"red": `{"spec": {"color": "purple"}}`},
		},
		{
			name: "required added", group: "required.impact.example.com",
			edit: func(crd *apiextensionsv1.CustomResourceDefinition) {
				s := spec(crd)
				s.Required = []string{"size"}
				setSpec(crd, s)
			},
			checks:     []string{"required-added breaking spec.size"},
			impact:     map[string][]string{"required-added": {"blue-legacy", "empty", "no-size"}},
			fieldEdits: map[string]string{"no-size": `{"spec": {"note": "changed"}}`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLiveEnv(t, tt.group, false)
			old := l.crd()
			before := l.list("v1")
			if names, why := l.rejected(before); len(names) > 0 {
				t.Fatalf("before the change the apiserver already rejects %v: %v", names, why)
			}

			changed := old.DeepCopy()
			tt.edit(changed)
			if err := l.update(changed, false); err != nil {
				t.Fatalf("update CRD: %v", err)
			}
			new := l.crd()
			res := diff.Compare(old, new)
			if got := checkNames(res); !slices.Equal(got, tt.checks) {
				t.Fatalf("checks %q, want %q", got, tt.checks)
			}
			if err := Scan(l.ctx, new, res, slices.Values(before)); err != nil {
				t.Fatal(err)
			}
			got, byCheck := reported(t, res)
			for check, want := range tt.impact {
				if !slices.Equal(byCheck[check], want) {
					t.Errorf("%s hits %v, want %v", check, byCheck[check], want)
				}
			}

			// The apiserver serves the new schema once its CRD handler
			// has caught up: poll until it rejects one of the objects.
			testenv.Eventually(t, 30*time.Second, "the apiserver to serve the new schema", func() bool {
				names, _ := l.rejected(before)
				return len(names) > 0
			})
			rejected, why := l.rejected(before)
			if !slices.Equal(got, rejected) {
				t.Errorf("impact reports %v; the apiserver rejects a re-create of %v (%v)", got, rejected, why)
			}
			for _, im := range res.Impact {
				want := map[diff.Effect]string{diff.Rejected: "rejects them when they are created again", diff.Pruned: "creating them again with strict field validation"}[im.Effect]
				if want == "" || !strings.Contains(im.Message, want) {
					t.Errorf("impact %s message %q does not say %q", im.Effect, im.Message, want)
				}
				if im.Effect == diff.Rejected && !strings.Contains(im.Message, "ratcheting") {
					t.Errorf("impact message %q does not say why updates still pass", im.Message)
				}
			}

			// Ratcheting: updates that leave the offending field alone
			// pass; an update that changes it fails.
			for _, name := range got {
				patch := []byte(`{"metadata": {"labels": {"touched": "yes"}}}`)
				if _, err := l.dyn.Resource(l.gvr("v1")).Namespace(l.ns).Patch(l.ctx, name, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
					t.Errorf("label update of %s (offending field unchanged) rejected: %v", name, err)
				}
			}
			for name, p := range tt.fieldEdits {
				_, err := l.dyn.Resource(l.gvr("v1")).Namespace(l.ns).Patch(l.ctx, name, "application/merge-patch+json", []byte(p), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
				if !apierrors.IsInvalid(err) {
					t.Errorf("update of %s changing %s: %v, want Invalid", name, p, err)
				}
			}

			// What the objects look like when listed after the change: a
			// removed field is pruned on read, so the impact of a removal
			// must be computed from the objects as they were before.
			after := l.list("v1")
			for _, o := range after {
				if _, has := o["spec"].(map[string]any)["legacy"]; has && tt.name == "field removed" {
					t.Errorf("%v still has spec.legacy after the field was removed", o["metadata"].(map[string]any)["name"])
				}
			}
		})
	}
}

// TestLiveVersions retires a stored version: first it stops being served
// (the objects at it are hit), then an update that drops it while it is
// still in status.storedVersions is refused by the apiserver, as the
// comparison says; once storedVersions no longer lists it, the same
// removal is safe.
func TestLiveVersions(t *testing.T) {
	l := newLiveEnv(t, "versions.impact.example.com", true)
	old := l.crd()
	atV1 := l.list("v1")

	// 1. v2 becomes the storage version and v1 is no longer served.
	unserved := old.DeepCopy()
	unserved.Spec.Versions[0].Served, unserved.Spec.Versions[0].Storage = false, false
	unserved.Spec.Versions[1].Storage = true
	if err := l.update(unserved, false); err != nil {
		t.Fatalf("stop serving v1: %v", err)
	}
	live := l.crd()
	res := diff.Compare(old, live)
	want := []string{"storage-version-changed safe ", "served-version-removed breaking "}
	if got := checkNames(res); !slices.Equal(got, want) {
		t.Fatalf("checks %q, want %q", got, want)
	}
	if err := Scan(l.ctx, live, res, slices.Values(append(atV1, l.list("v2")...))); err != nil {
		t.Fatal(err)
	}
	got, _ := reported(t, res)
	testenv.Eventually(t, 30*time.Second, "v1 to stop being served", func() bool {
		return apierrors.IsNotFound(l.createAgain(atV1[0]))
	})
	rejected, why := l.rejected(atV1)
	if len(got) != len(gadgets) || !slices.Equal(got, rejected) {
		t.Errorf("impact reports %v; the apiserver rejects %v (%v)", got, rejected, why)
	}
	if len(res.Impact) != 1 || res.Impact[0].Effect != diff.Unserved || res.Impact[0].Count != len(gadgets) {
		t.Errorf("impact %+v, want every v1 object unserved once (the v2 copies are not hit)", res.Impact)
	}

	// 2. Dropping v1 while it is in status.storedVersions.
	if !slices.Contains(live.Status.StoredVersions, "v1") {
		t.Fatalf("storedVersions %v, want v1 in it", live.Status.StoredVersions)
	}
	dropped := live.DeepCopy()
	dropped.Spec.Versions = dropped.Spec.Versions[1:]
	res = diff.Compare(live, dropped)
	if res.Breaking == 0 || res.Checks[0].Check != "stored-version-removed" {
		t.Errorf("checks %q, want stored-version-removed first", checkNames(res))
	}
	err := l.update(dropped, true)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "storedVersions") {
		t.Errorf("the apiserver accepted dropping a stored version (err %v)", err)
	}

	// 3. After a storage migration storedVersions is [v2]: removing v1
	// is safe.
	migrated := live.DeepCopy()
	migrated.Status.StoredVersions = []string{"v2"}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(migrated)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.dyn.Resource(crdGVR).UpdateStatus(l.ctx, &unstructured.Unstructured{Object: obj}, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update storedVersions: %v", err)
	}
	live = l.crd()
	dropped = live.DeepCopy()
	dropped.Spec.Versions = dropped.Spec.Versions[1:]
	res = diff.Compare(live, dropped)
	if want := []string{"version-removed safe "}; !slices.Equal(checkNames(res), want) {
		t.Errorf("checks %q, want %q", checkNames(res), want)
	}
	if err := l.update(dropped, false); err != nil {
		t.Errorf("drop v1 after the migration: %v", err)
	}
}

// TestLiveServedVersions narrows an enum in v2 only, while v1 and v2 are
// both served without conversion: the objects, written at v1, are read
// and updated at v2 as they are. The impact must name, at each served
// version, exactly the objects a server-side dry-run create of their
// content at that version is rejected for.
func TestLiveServedVersions(t *testing.T) {
	l := newLiveEnv(t, "served.impact.example.com", true)
	old := l.crd()
	before := l.list("v1")

	changed := old.DeepCopy()
	s := changed.Spec.Versions[1].Schema.OpenAPIV3Schema.Properties["spec"]
	color := s.Properties["color"]
	color.Enum = color.Enum[2:] // blue only
	s.Properties["color"] = color
	changed.Spec.Versions[1].Schema.OpenAPIV3Schema.Properties["spec"] = s
	if err := l.update(changed, false); err != nil {
		t.Fatalf("update CRD: %v", err)
	}
	new := l.crd()
	res := diff.Compare(old, new)
	var between []string
	for _, c := range res.Checks {
		if c.Against != "" {
			between = append(between, c.Check+" "+c.Version+"<-"+c.Against+" "+c.Field)
		}
	}
	if want := []string{"enum-values-removed v2<-v1 spec.color"}; !slices.Equal(between, want) {
		t.Fatalf("checks between versions %q, want %q (all: %q)", between, want, checkNames(res))
	}
	if err := Scan(l.ctx, new, res, slices.Values(before)); err != nil {
		t.Fatal(err)
	}
	byVersion := map[string][]string{}
	for _, im := range res.Impact {
		for _, h := range im.Objects {
			if !slices.Contains(byVersion[im.Version], h.Name) {
				byVersion[im.Version] = append(byVersion[im.Version], h.Name)
			}
		}
	}
	for _, v := range []string{"v1", "v2"} {
		sort.Strings(byVersion[v])
		at := make([]map[string]any, len(before))
		for i, o := range before {
			c := (&unstructured.Unstructured{Object: o}).DeepCopy().Object
			c["apiVersion"] = l.group + "/" + v
			at[i] = c
		}
		if v == "v2" {
			testenv.Eventually(t, 30*time.Second, "the apiserver to serve the new v2 schema", func() bool {
				names, _ := l.rejected(at)
				return len(names) > 0
			})
		}
		rejected, why := l.rejected(at)
		if !slices.Equal(byVersion[v], rejected) {
			t.Errorf("at %s the impact names %v; the apiserver rejects a dry-run create of %v (%v)", v, byVersion[v], rejected, why)
		}
	}
	if len(byVersion["v2"]) == 0 {
		t.Error("no object is hit at v2")
	}
}
