// Package examples_test loads every file under examples/: each rules file
// with the offline cases beside it, each CRD and object manifest against
// the real control plane (server-side dry-run), and runs the examples that
// need no receiver outside the test through `fieldwatch run` in process.
package examples_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apiserver/pkg/audit/policy"

	"github.com/fieldwatch/fieldwatch/internal/cases"
	"github.com/fieldwatch/fieldwatch/internal/rbac"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
	"github.com/fieldwatch/fieldwatch/rules"
)

func TestMain(m *testing.M) { testenv.Main(m, testenv.Options{}) }

// exampleDirs returns the directories holding a rules.yaml, examples added
// later included.
func exampleDirs(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no examples/*/rules.yaml found")
	}
	var dirs []string
	for _, f := range files {
		dirs = append(dirs, filepath.Dir(f))
	}
	return dirs
}

// TestRulesAndCases loads every example's rules and runs its offline
// cases; every example must have cases. The event notes and webhook
// templates of the rules that fire are rendered against the payloads, so
// a template that breaks on a real payload fails here and not in a cluster.
func TestRulesAndCases(t *testing.T) {
	for _, dir := range exampleDirs(t) {
		t.Run(dir, func(t *testing.T) {
			set, err := rules.Load(filepath.Join(dir, "rules.yaml"))
			if err != nil {
				t.Fatalf("load rules:\n%v", err)
			}
			casesFile := filepath.Join(dir, "cases.yaml")
			if _, err := os.Stat(casesFile); err != nil {
				t.Fatalf("%s has rules.yaml but no cases.yaml for `fieldwatch test`: %v", dir, err)
			}
			cs, err := cases.Load(casesFile, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			if err != nil {
				t.Fatalf("load cases:\n%v", err)
			}
			if len(cs) == 0 {
				t.Fatalf("%s has no cases", casesFile)
			}
			fired := map[string]bool{}
			for _, r := range cases.Run(set, cs) {
				if !r.Pass {
					t.Errorf("case %q (%s) failed:\n%s\nfired:\n%s", r.Name, r.Source, r.Diff, r.Firings)
				}
				for _, p := range r.Firings {
					fired[renderTemplates(t, set, p)] = true
				}
			}
			// Every rule is shown firing by at least one case.
			for _, r := range set.Rules() {
				if !fired[r.Name] {
					t.Errorf("rule %s (%s) fires in no case of %s", r.Name, r.Source, casesFile)
				}
			}
		})
	}
}

// renderTemplates renders the templates of the actions of the rule that
// fired data, a payload, and returns the rule's name.
func renderTemplates(t *testing.T, set *rules.Set, data []byte) string {
	t.Helper()
	var p payload
	if err := json.Unmarshal(data, &p); err != nil {
		t.Fatalf("payload %s: %v", data, err)
	}
	r := set.Rule(p.Rule)
	if r == nil {
		t.Fatalf("payload of an unknown rule: %s", data)
	}
	for i, a := range r.Actions {
		var tmpl *rules.Template
		switch {
		case a.Event != nil:
			tmpl = a.Event.Note
		case a.Webhook != nil:
			tmpl = a.Webhook.Template
		}
		if tmpl == nil {
			continue
		}
		out, err := tmpl.Render(data)
		if err != nil {
			t.Errorf("rule %s action %d: %v", r.Name, i, err)
			continue
		}
		if s := string(out); strings.TrimSpace(s) == "" || strings.Contains(s, "<no value>") {
			t.Errorf("rule %s action %d renders %q for %s", r.Name, i, s, data)
		}
	}
	return r.Name
}

// TestEveryFileIsLoaded makes sure no file under examples/ escapes the
// tests: rules.yaml and cases.yaml are run by TestRulesAndCases, every
// other YAML file is applied by TestManifestsApply, and each example has a
// README.md that the index examples/README.md links to.
func TestEveryFileIsLoaded(t *testing.T) {
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		switch base := filepath.Base(path); {
		case strings.HasSuffix(base, ".go"), path == "README.md", path == filepath.Join("metrics", "README.md"):
		case isMetrics(path):
			// Run by TestMetricsExamples.
		case base == "README.md":
			if _, err := os.Stat(filepath.Join(filepath.Dir(path), "rules.yaml")); err != nil {
				t.Errorf("%s: a README.md outside an example", path)
			}
		case base == "rules.yaml" || base == "cases.yaml":
			if filepath.Dir(filepath.Dir(path)) != "." {
				t.Errorf("%s: examples are examples/NAME/; nested ones are not run", path)
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(path), "rules.yaml")); err != nil {
				t.Errorf("%s: cases without a rules.yaml beside them", path)
			}
		case base == "audit-policy.yaml":
			// For kube-apiserver, not the cluster: loaded as it loads it.
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if _, err := policy.LoadPolicyFromBytes(data); err != nil {
				t.Errorf("%s: kube-apiserver would not load it: %v", path, err)
			}
		case base == "alertmanager.yml":
			// For Alertmanager, not the cluster: checked by amtool.
			checkAlertmanagerConfig(t, path)
		case isManifest(path):
		default:
			t.Errorf("%s: no test loads this file (add it to examples_test.go)", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	index, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatalf("the index of the examples: %v", err)
	}
	for _, dir := range append(exampleDirs(t), "crds") {
		if _, err := os.Stat(filepath.Join(dir, "README.md")); err != nil && dir != "crds" {
			t.Errorf("%s has no README.md", dir)
		}
		if !bytes.Contains(index, []byte("("+dir+"/)")) {
			t.Errorf("examples/README.md does not link to %s/", dir)
		}
	}
}

// isManifest reports whether path is a YAML file of Kubernetes objects
// (anything YAML but rules, cases and audit policies).
func isManifest(path string) bool {
	base := filepath.Base(path)
	ext := filepath.Ext(base)
	return (ext == ".yaml" || ext == ".yml") && base != "rules.yaml" && base != "cases.yaml" && base != "audit-policy.yaml" && base != "alertmanager.yml" && !isMetrics(path)
}

// checkAlertmanagerConfig checks an Alertmanager configuration with
// amtool from Debian's prometheus-alertmanager (make testdeps).
func checkAlertmanagerConfig(t *testing.T, path string) {
	t.Helper()
	if testing.Short() {
		return
	}
	out, err := exec.Command("/usr/bin/amtool", "check-config", path).CombinedOutput()
	if err != nil {
		t.Errorf("%s: amtool check-config: %v\n%s", path, err, out)
	}
}

// isMetrics reports whether path is a metrics example: a
// CustomResourceStateMetrics file or its cases, in examples/metrics.
func isMetrics(path string) bool {
	return filepath.Dir(path) == "metrics" && (strings.HasSuffix(path, ".crs.yaml") || strings.HasSuffix(path, ".cases.yaml"))
}

// TestManifestsApply applies every manifest under examples/ to the real
// control plane: the CRDs of examples/crds for real first (so that their
// objects can be checked), Namespaces for real (so that objects in them
// can be checked; creating one is harmless), and everything else with a
// server-side dry run, which runs validation and admission but stores
// nothing.
func TestManifestsApply(t *testing.T) {
	env := testenv.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var crds, manifests []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() || !isManifest(path):
		case filepath.Dir(path) == "crds":
			crds = append(crds, path)
		default:
			manifests = append(manifests, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(crds) == 0 || len(manifests) == 0 {
		t.Fatalf("found %d CRD files and %d manifests; expected some of both", len(crds), len(manifests))
	}
	if _, err := env.ApplyFiles(ctx, testenv.ApplyOptions{}, crds...); err != nil {
		t.Fatalf("install the example CRDs: %v", err)
	}
	for _, path := range manifests {
		t.Run(path, func(t *testing.T) {
			docs := documents(t, path)
			if len(docs) == 0 {
				t.Fatalf("%s holds no objects", path)
			}
			for i, doc := range docs {
				var head struct{ Kind string }
				if err := json.Unmarshal(doc, &head); err != nil {
					t.Fatalf("%s document %d: %v", path, i, err)
				}
				opts := testenv.ApplyOptions{DryRun: head.Kind != "Namespace"}
				if _, err := env.Apply(ctx, opts, doc); err != nil {
					t.Errorf("%s document %d (%s, dry run %v): %v", path, i, head.Kind, opts.DryRun, err)
				}
			}
		})
	}
}

// documents splits a YAML stream into its non-empty documents, as JSON.
func documents(t *testing.T, path string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var docs [][]byte
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return docs
			}
			t.Fatalf("%s: %v", path, err)
		}
		if len(obj) == 0 {
			continue
		}
		doc, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, doc)
	}
}

// TestRBACApplies checks that what `fieldwatch rbac --rules` prints for
// each example (the READMEs point to it) is accepted by the apiserver.
func TestRBACApplies(t *testing.T) {
	env := testenv.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	crds, err := rbac.CRDResources("crds")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range exampleDirs(t) {
		t.Run(dir, func(t *testing.T) {
			set, err := rules.Load(filepath.Join(dir, "rules.yaml"))
			if err != nil {
				t.Fatalf("load rules:\n%v", err)
			}
			// Offline, the example CRDs given (crd-audit selects every
			// custom resource).
			// The Roles of rules that name namespaces go there.
			for _, r := range set.Rules() {
				for _, ns := range r.Namespaces() {
					ensureNamespace(t, ns)
				}
			}
			out, err := rbac.Generate(set, rbac.Options{Name: "fieldwatch-example-" + dir, CRDs: crds})
			if err != nil {
				t.Fatal(err)
			}
			objs, err := env.Apply(ctx, testenv.ApplyOptions{DryRun: true}, out)
			if err != nil {
				t.Fatalf("apply (dry run):\n%s\n%v", out, err)
			}
			var kinds []string
			for _, o := range objs {
				kinds = append(kinds, o.GetKind())
			}
			if !slices.Contains(kinds, "ClusterRole") || !slices.Contains(kinds, "ClusterRoleBinding") {
				t.Errorf("rbac output has %v, want a ClusterRole and a ClusterRoleBinding", kinds)
			}
		})
	}
}
