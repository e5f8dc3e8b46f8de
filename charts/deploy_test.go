package charts

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// kustomize renders a kustomization of the repository as `kubectl apply
// -k` does.
func kustomize(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	return kustomizeIn(t, filesys.MakeFsOnDisk(), dir)
}

// kustomizeAudit renders deploy/audit/ (over deploy/base/) as `kubectl
// apply -k deploy/audit/` does.
func kustomizeAudit(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	return kustomize(t, "../deploy/audit")
}

// kustomizeIn renders the kustomization dir of fs.
func kustomizeIn(t *testing.T, fs filesys.FileSystem, dir string) []*unstructured.Unstructured {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(fs, dir)
	if err != nil {
		t.Fatalf("kustomize %s: %v", dir, err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return objects(t, string(out))
}

// chartOnlyLabels are the labels the chart adds to what deploy/ has: Helm's
// standard ones, and the component of each Service (the ServiceMonitor
// selects the metrics Service by it).
var chartOnlyLabels = []string{
	"helm.sh/chart", "app.kubernetes.io/instance", "app.kubernetes.io/version",
	"app.kubernetes.io/managed-by", "app.kubernetes.io/component",
}

// normalize returns obj as plain JSON values, with the differences
// README.md documents (The chart beside deploy/) taken out of the chart's
// side: its extra labels, wherever labels are (metadata, selectors, the
// pod template, the affinity), and the labels of its claims.
func normalize(t *testing.T, obj *unstructured.Unstructured, chart bool) map[string]any {
	t.Helper()
	b, err := json.Marshal(obj.Object)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	sortLists(m)
	if !chart {
		return m
	}
	var strip func(v any)
	strip = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for _, l := range chartOnlyLabels {
				delete(v, l)
			}
			for _, c := range v {
				strip(c)
			}
		case []any:
			for _, c := range v {
				strip(c)
			}
		}
	}
	strip(m)
	if obj.GetKind() == "ConfigMap" {
		// deploy/'s configMapGenerator gives the rules no labels.
		unstructured.RemoveNestedField(m, "metadata", "labels")
	}
	if claims, ok, _ := unstructured.NestedSlice(m, "spec", "volumeClaimTemplates"); ok {
		for _, c := range claims {
			if meta, ok := c.(map[string]any)["metadata"].(map[string]any); ok {
				delete(meta, "labels")
			}
		}
		_ = unstructured.SetNestedSlice(m, claims, "spec", "volumeClaimTemplates")
	}
	return m
}

// sortLists orders the ports and volume mounts of a pod template's
// containers, and its volumes, by name: a strategic merge patch prepends
// those it adds, and their order means nothing.
func sortLists(obj map[string]any) {
	byName := func(list []any) {
		slices.SortFunc(list, func(a, b any) int {
			return strings.Compare(fmt.Sprint(a.(map[string]any)["name"]), fmt.Sprint(b.(map[string]any)["name"]))
		})
	}
	containers, ok, _ := unstructured.NestedSlice(obj, "spec", "template", "spec", "containers")
	if !ok {
		return
	}
	for _, c := range containers {
		c := c.(map[string]any)
		for _, field := range []string{"ports", "volumeMounts"} {
			list, _ := c[field].([]any)
			byName(list)
		}
	}
	_ = unstructured.SetNestedSlice(obj, containers, "spec", "template", "spec", "containers")
	if volumes, ok, _ := unstructured.NestedSlice(obj, "spec", "template", "spec", "volumes"); ok {
		byName(volumes)
		_ = unstructured.SetNestedSlice(obj, volumes, "spec", "template", "spec", "volumes")
	}
}

// key names an object.
func key(o *unstructured.Unstructured) string {
	return fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
}

// compareWithDeploy checks that the chart's objects are deploy's: the same
// objects but the Namespace, each the same once normalized.
func compareWithDeploy(t *testing.T, deployed, charted []*unstructured.Unstructured) {
	t.Helper()
	byKey := map[string]*unstructured.Unstructured{}
	for _, o := range charted {
		byKey[key(o)] = o
	}
	var deployKeys []string
	for _, d := range deployed {
		k := key(d)
		deployKeys = append(deployKeys, k)
		if d.GetKind() == "Namespace" {
			// helm install --namespace fieldwatch --create-namespace makes
			// it (README: label it for the restricted Pod Security Standard).
			continue
		}
		c := byKey[k]
		if c == nil {
			t.Errorf("the chart has no %s", k)
			continue
		}
		want, got := normalize(t, d, false), normalize(t, c, true)
		if !reflect.DeepEqual(want, got) {
			w, _ := json.MarshalIndent(want, "", "  ")
			g, _ := json.MarshalIndent(got, "", "  ")
			t.Errorf("%s differs from deploy/'s beyond the documented differences:\n%s", k, lineDiff(string(w), string(g)))
		}
	}
	for _, c := range charted {
		if !slices.Contains(deployKeys, key(c)) {
			t.Errorf("the chart has %s, which deploy/ has not", key(c))
		}
	}
}

// TestDefaultsMatchDeploy: with its defaults (release fieldwatch in
// namespace fieldwatch) the chart renders what `kubectl apply -k
// deploy/admission/` applies (admission is on by default), but for the
// differences README.md lists: no Namespace, Helm's labels (and a
// component label on the Services), labels on the claims. With
// admission.enabled false it renders what deploy/ applies, and with
// audit.enabled what deploy/audit/ applies, alike.
func TestDefaultsMatchDeploy(t *testing.T) {
	t.Run("deploy/admission", func(t *testing.T) {
		compareWithDeploy(t, kustomize(t, "../deploy/admission"), objects(t, mustRender(t, nil).manifest))
	})
	t.Run("deploy", func(t *testing.T) {
		vals := map[string]any{"admission": map[string]any{"enabled": false}}
		compareWithDeploy(t, kustomize(t, "../deploy"), objects(t, mustRender(t, vals).manifest))
	})
	t.Run("deploy/audit", func(t *testing.T) {
		// deploy/audit/ pins the ClusterIP its webhook-kubeconfig.yaml
		// names; the chart allocates one unless audit.clusterIP is set.
		vals := map[string]any{"audit": map[string]any{"enabled": true, "clusterIP": "10.96.0.250"}}
		compareWithDeploy(t, kustomizeAudit(t), objects(t, mustRender(t, vals).manifest))
	})
	// The default rules are deploy/base/rules.yaml's, byte for byte.
	deployed := kustomize(t, "../deploy")
	cm := find(deployed, "ConfigMap", releaseNamespace, "fieldwatch-rules")
	if cm == nil || !strings.Contains(mustRender(t, nil).manifest, "name: fieldwatch-rules") {
		t.Fatal("no rules ConfigMap")
	}
}
