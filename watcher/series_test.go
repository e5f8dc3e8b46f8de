package watcher

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// TestDeletedCRDsLeaveNoSeries: the metric series labelled with a
// resource go with its informer. Creating and deleting CRDs leaves none of
// their series; before, every CRD ever watched kept its three
// events_total series (40 CRDs left 120). A resource's series are made at
// its first event: none while its CRDs hold no object.
func TestDeletedCRDsLeaveNoSeries(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	const group = "series.example.org"
	w, reg := startWatcher(t, env.Config(), Config{Selectors: []change.Selector{{Group: group, Custom: true}}, Handler: &recorder{},
		RediscoveryInterval: time.Second})
	// The series labelled with a resource or group version of the group
	// (other tests' resources come and go on the same control plane).
	groupSeries := func() []string {
		families, err := reg.Gather()
		if err != nil {
			t.Error(err)
		}
		var out []string
		for _, f := range families {
			if !strings.HasPrefix(f.GetName(), "fieldwatch_watcher_") {
				continue
			}
			for _, m := range f.GetMetric() {
				if slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool {
					v := l.GetValue()
					return v == group || strings.HasSuffix(v, "."+group) || strings.HasPrefix(v, group+"/")
				}) {
					out = append(out, f.GetName()+m.String())
				}
			}
		}
		return out
	}
	series := func() int { return len(groupSeries()) }
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("series of %s: %q", group, groupSeries())
		}
	})
	watched := func() int {
		n := 0
		for _, r := range w.resources() {
			if r.Group == group {
				n++
			}
		}
		return n
	}
	if n := series(); n != 0 {
		t.Fatalf("%d series of %s before its CRDs exist", n, group)
	}
	const crds = 10
	var names []string
	for i := range crds {
		crd := simpleCRD(schema.GroupVersionResource{Group: group, Version: "v1", Resource: fmt.Sprintf("things%d", i)}, fmt.Sprintf("Thing%d", i))
		mustf(t, env.InstallCRD(crd), "install CRD %d", i)
		names = append(names, crd.Name)
	}
	testenv.Eventually(t, time.Minute, "the CRDs to be watched", func() bool { return watched() == crds })
	if got := series(); got != 0 {
		t.Errorf("%d series while %d CRDs without objects are watched, want none", got, crds)
	}
	dyn := env.Dynamic(t)
	ns := namespace(t, env)
	for i := range crds {
		gvr := schema.GroupVersionResource{Group: group, Version: "v1", Resource: fmt.Sprintf("things%d", i)}
		obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": group + "/v1", "kind": fmt.Sprintf("Thing%d", i),
			"metadata": map[string]any{"name": "one", "namespace": ns}}}
		_, err := dyn.Resource(gvr).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{})
		mustf(t, err, "create a thing of CRD %d", i)
	}
	testenv.Eventually(t, time.Minute, "a series of each CRD's first event", func() bool { return series() >= crds })
	for _, name := range names {
		mustf(t, dyn.Resource(crdGVR).Delete(ctx, name, metav1.DeleteOptions{}), "delete CRD %s", name)
	}
	testenv.Eventually(t, time.Minute, "the CRDs to be dropped", func() bool { return watched() == 0 })
	testenv.Eventually(t, 30*time.Second, "the series of the group to go", func() bool { return series() == 0 })
}
