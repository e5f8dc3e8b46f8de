package charts

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/action"
	"sigs.k8s.io/yaml"
)

// valueCase is a values file of testdata/values (or the defaults) and the
// API versions the cluster serves besides the built-in ones.
type valueCase struct {
	name        string
	apiVersions []string
}

// valueCases are the defaults, each file of testdata/values, and the
// defaults where the Prometheus Operator is installed. Each has its
// golden file testdata/golden/NAME.yaml.
func valueCases(t *testing.T) []valueCase {
	t.Helper()
	cases := []valueCase{{name: "default"}, {name: "default-with-prometheus-operator", apiVersions: []string{serviceMonitorAPI}}}
	files, err := filepath.Glob("testdata/values/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("testdata/values: %v %v", files, err)
	}
	for _, f := range files {
		c := valueCase{name: strings.TrimSuffix(filepath.Base(f), ".yaml")}
		if c.name == "servicemonitor" || c.name == "metrics" {
			c.apiVersions = []string{serviceMonitorAPI}
		}
		cases = append(cases, c)
	}
	return cases
}

// values returns the case's values (nil for the defaults).
func (c valueCase) values(t *testing.T) map[string]any {
	t.Helper()
	if strings.HasPrefix(c.name, "default") {
		return nil
	}
	return readValues(t, filepath.Join("testdata", "values", c.name+".yaml"))
}

// TestTemplateGolden renders the chart for the defaults and for each
// values file and compares the manifest and the notes with the golden
// files (go test -update rewrites them).
func TestTemplateGolden(t *testing.T) {
	for _, c := range valueCases(t) {
		t.Run(c.name, func(t *testing.T) {
			r := mustRender(t, c.values(t), c.apiVersions...)
			golden(t, c.name+".yaml", []byte(r.manifest+"\n# NOTES.txt\n"+commented(r.notes)))
		})
	}
	// Every golden file has its case: none is left from a removed one.
	files, err := filepath.Glob("testdata/golden/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]bool{}
	for _, c := range valueCases(t) {
		cases[c.name+".yaml"] = true
	}
	for _, f := range files {
		if !cases[filepath.Base(f)] {
			if *update {
				_ = os.Remove(f)
				continue
			}
			t.Errorf("%s has no values case", f)
		}
	}
}

// commented turns text into YAML comment lines.
func commented(text string) string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight("# "+l, " ")
	}
	return strings.Join(lines, "\n") + "\n"
}

// TestServiceMonitorOnlyWhereServed: the ServiceMonitor is rendered when
// the cluster serves monitoring.coreos.com/v1 ServiceMonitor, and not
// otherwise (its CRD absent, the kind unknown to the apiserver).
func TestServiceMonitorOnlyWhereServed(t *testing.T) {
	without := objects(t, mustRender(t, nil).manifest)
	with := objects(t, mustRender(t, nil, serviceMonitorAPI).manifest)
	if find(without, "ServiceMonitor", releaseNamespace, releaseName) != nil {
		t.Error("a ServiceMonitor without the Prometheus Operator's CRD")
	}
	if find(with, "ServiceMonitor", releaseNamespace, releaseName) == nil {
		t.Error("no ServiceMonitor where the Prometheus Operator's CRD is served")
	}
}

// TestLint runs `helm lint --strict` (with the values schema) for the
// defaults and every values file.
func TestLint(t *testing.T) {
	for _, c := range valueCases(t) {
		t.Run(c.name, func(t *testing.T) {
			lint := action.NewLint()
			lint.Strict = true
			lint.Namespace = releaseNamespace
			res := lint.Run([]string{chartDir}, c.values(t))
			if res.TotalChartsLinted != 1 {
				t.Errorf("%d charts linted, want 1", res.TotalChartsLinted)
			}
			for _, m := range res.Messages {
				t.Logf("lint: %s", m)
			}
			for _, err := range res.Errors {
				t.Errorf("lint: %v", err)
			}
		})
	}
}

// TestRefusedValues: values that cannot work together fail the render
// with a message that says what to do.
func TestRefusedValues(t *testing.T) {
	tests := []struct {
		name string
		vals string
		want string
	}{
		{"replicas without leader election", "leaderElection: {enabled: false}",
			"replicas > 1 needs leaderElection.enabled"},
		{"namespaced with cluster rules", "watchNamespaces: [shop]",
			"watchNamespaces is set (a namespaced install, Roles only) but rbac.clusterRules is not empty"},
		{"a Role outside the watched namespaces", "watchNamespaces: [shop]\nrbac: {clusterRules: [], namespaceRules: {kube-system: []}}",
			"rbac.namespaceRules names namespace kube-system, which watchNamespaces does not"},
		{"no rules", "rules: {inline: \"\"}",
			"rules.inline is empty and rules.existingConfigMap names no ConfigMap"},
		{"a client certificate of any name", "audit: {enabled: true, clientNames: []}",
			"audit.auth clientCertificate needs audit.clientNames"},
		{"a token without its Secret", "audit: {enabled: true, auth: token}",
			"audit.auth token needs audit.tokenSecret.name"},
		{"an unknown audit auth (values.schema.json)", "audit: {enabled: true, auth: basic}",
			"at '/audit/auth': value must be one of 'clientCertificate', 'token'"},
		{"a misspelt value (values.schema.json)", "watchNamespace: [shop]",
			"additional properties 'watchNamespace' not allowed"},
		{"a namespace that cannot be one (values.schema.json)", "watchNamespaces: [Shop_1]",
			"at '/watchNamespaces/0'"},
		{"a PolicyRule without verbs (values.schema.json)", "rbac: {clusterRules: [{apiGroups: [\"\"], resources: [pods]}]}",
			"at '/rbac/clusterRules/0': missing property 'verbs'"},
		{"a memory limit GOMEMLIMIT cannot be derived from", "resources: {limits: {memory: 1GB}}\ngoMemLimitRatio: 0.5",
			`resources.limits.memory "1GB": want a number of bytes with an optional unit`},
		{"a share above the limit (values.schema.json)", "goMemLimitRatio: 2",
			"at '/goMemLimitRatio': maximum: got 2, want 1"},
		{"a service account that is not made nor named", "serviceAccount: {create: false}",
			"serviceAccount.name is required when serviceAccount.create is false"},
		{"the history on the http port twice", "history: {port: 8080}",
			"history.port is httpPort: set it to another port, or to 0"},
		{"the history on the audit port", "history: {port: 8443}\naudit: {enabled: true, clientNames: [x]}",
			"history.port is audit.port"},
		{"a DSN Secret without a key (values.schema.json)", "history: {dsnSecret: {name: x, key: \"\"}}",
			"at '/history/dsnSecret/key'"},
		{"a signing key Secret without a key (values.schema.json)", "history: {signingKeySecret: {name: x, key: \"\"}}",
			"at '/history/signingKeySecret/key'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vals := map[string]any{}
			if err := yaml.Unmarshal([]byte(tt.vals), &vals); err != nil {
				t.Fatal(err)
			}
			_, err := render(t, vals)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("render error %v, want one that says %q", err, tt.want)
			}
		})
	}
}
