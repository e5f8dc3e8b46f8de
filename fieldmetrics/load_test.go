package fieldmetrics

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, file string
		want       []string
	}{
		{"unknown key (kube-state-metrics ignores it)", `
spec:
  resources:
    - groupVersionKind: {group: a.io, version: v1, kind: A}
      metrics:
        - name: x
          each:
            type: Gauge
            gauge: {path: [spec, x], value: [count]}
`, []string{`crs.yaml:9:38: spec.resources[0].metrics[0].each.gauge.value: unknown key "value"`}},
		{"wrong kind", "kind: Other\nspec: {resources: []}\n", []string{`crs.yaml:1:7: kind: must be CustomResourceStateMetrics, not "Other"`}},
		{"no spec", "kind: CustomResourceStateMetrics\n", []string{"crs.yaml:1:1: spec: required"}},
		{"no group", `
spec:
  resources:
    - groupVersionKind: {version: v1, kind: A}
      metrics: [{name: x, each: {type: Info, info: {labelsFromPath: {a: [b]}}}}]
`, []string{"crs.yaml:4:25: spec.resources[0].groupVersionKind.group: required"}},
		{"counter", `
spec:
  resources:
    - groupVersionKind: {group: a.io, kind: A}
      metrics: [{name: x, each: {type: Counter}}]
`, []string{"crs.yaml:5:40: spec.resources[0].metrics[0].each.type: Counter is not supported"}},
		{"bad names", `
spec:
  resources:
    - groupVersionKind: {group: a.io, kind: A}
      commonLabels: {"team-name": x}
      metrics:
        - name: ready-count
          each: {type: StateSet, stateSet: {path: [status, phase], list: [A]}}
`, []string{
			`crs.yaml:5:35: spec.resources[0].commonLabels.team-name: "team-name" is not a valid label name`,
			`crs.yaml:7:17: spec.resources[0].metrics[0].name: "kube_customresource_ready-count" is not a valid metric name`,
			`crs.yaml:8:44: spec.resources[0].metrics[0].each.stateSet.labelName: "" is not a valid label name`,
		}},
		{"bad lookup", `
spec:
  resources:
    - groupVersionKind: {group: a.io, kind: A}
      metrics: [{name: x, each: {type: Gauge, gauge: {path: [status, conditions, "[Ready]"]}}}]
`, []string{`spec.resources[0].metrics[0].each.gauge.path: invalid list lookup "[Ready]"`}},
		{"one name, two types", `
spec:
  resources:
    - groupVersionKind: {group: a.io, kind: A}
      metrics: [{name: x, each: {type: Gauge, gauge: {path: [a]}}}]
    - groupVersionKind: {group: b.io, kind: B}
      metrics: [{name: x, each: {type: Info, info: {labelsFromPath: {a: [a]}}}}]
`, []string{"spec.resources[1].metrics[0].name: metric kube_customresource_x is a info here and a gauge elsewhere"}},
		{"a list where a map is expected", "spec:\n  resources:\n    - groupVersionKind: [a]\n", []string{
			"crs.yaml:3:25: spec.resources[0].groupVersionKind: must be a mapping, not a list",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("crs.yaml", []byte(tt.file))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
		})
	}
}

func TestLoadRulesSection(t *testing.T) {
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rules, []byte(`
rules: []
metrics:
  resources:
    - groupVersionKind: {group: "", version: v1, kind: ConfigMap}
      metricNamePrefix: fieldwatch_configmap
      labelsFromPath: {name: [metadata, name]}
      metrics:
        - name: keys
          each: {type: Gauge, gauge: {path: [data, a]}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	set, err := Load("", rules)
	if err != nil {
		t.Fatal(err)
	}
	if fams := set.Families(); len(fams) != 1 || fams[0].Name != "fieldwatch_configmap_keys" {
		t.Errorf("families %v", fams)
	}
	if sel := set.Resources(); len(sel) != 1 || sel[0].Custom || sel[0].Version != "v1" {
		t.Errorf("selectors %+v", sel)
	}
	none, err := Load("", filepath.Join(dir, "missing.yaml"))
	if err == nil || none != nil || !strings.Contains(err.Error(), "missing.yaml: read: no such file") {
		t.Errorf("missing file: %v", err)
	}
}
