package charts

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	release "helm.sh/helm/v4/pkg/release/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite the golden files and the README's values table")

// TestMain starts the control plane with kubeadm's default Service range,
// which holds the ClusterIP the audit values pin.
func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Options{APIServerArgs: map[string][]string{"service-cluster-ip-range": {"10.96.0.0/12"}}})
}

// discard drops Helm's logs.
var discard = slog.DiscardHandler

// chartDir is the chart under test.
const chartDir = "fieldwatch"

// The release every render installs: release "fieldwatch" in namespace
// "fieldwatch" gives the names deploy/ uses.
const (
	releaseName      = "fieldwatch"
	releaseNamespace = "fieldwatch"
)

// serviceMonitorAPI is what a cluster with the Prometheus Operator serves.
const serviceMonitorAPI = "monitoring.coreos.com/v1/ServiceMonitor"

// loadChart loads the chart from its directory.
func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load the chart: %v", err)
	}
	return c
}

// rendered is a render of the chart: its manifest and its notes.
type rendered struct {
	manifest, notes string
}

// render renders the chart as `helm template` does (client-only, as an
// install), with vals and the extra API versions the cluster would serve.
func render(t *testing.T, vals map[string]any, apiVersions ...string) (rendered, error) {
	t.Helper()
	cfg := action.NewConfiguration()
	install := action.NewInstall(cfg)
	install.DryRunStrategy = action.DryRunClient
	install.ReleaseName = releaseName
	install.Namespace = releaseNamespace
	install.Replace = true
	install.APIVersions = common.VersionSet(apiVersions)
	cfg.SetLogger(discard)
	rel, err := install.Run(loadChart(t), vals)
	if err != nil {
		return rendered{}, err
	}
	r, ok := rel.(*release.Release)
	if !ok {
		return rendered{}, fmt.Errorf("the install returned a %T, not a release", rel)
	}
	return rendered{manifest: r.Manifest, notes: r.Info.Notes}, nil
}

// mustRender is render that fails the test on an error.
func mustRender(t *testing.T, vals map[string]any, apiVersions ...string) rendered {
	t.Helper()
	r, err := render(t, vals, apiVersions...)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return r
}

// readValues reads a values file.
func readValues(t *testing.T, path string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]any{}
	if err := yaml.Unmarshal(data, &vals); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return vals
}

// objects splits a manifest into its objects.
func objects(t *testing.T, manifest string) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	var out []*unstructured.Unstructured
	for {
		var obj map[string]any
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("decode the manifest: %v\n%s", err, manifest)
		}
		if obj != nil {
			out = append(out, &unstructured.Unstructured{Object: obj})
		}
	}
}

// find returns the object of kind and name, or nil.
func find(objs []*unstructured.Unstructured, kind, namespace, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name && o.GetNamespace() == namespace {
			return o
		}
	}
	return nil
}

// golden compares got with the golden file, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the render (go test -update rewrites it); diff:\n%s", path, lineDiff(string(want), string(got)))
	}
}

// lineDiff shows the first lines where want and got differ.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\n- %s\n+ %s", i+1, wl, gl)
		}
	}
	return "(same lines)"
}
