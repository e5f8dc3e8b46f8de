package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// clusterCRD is a Thing CRD of group, serving v1 (stored); new adds v2,
// makes it the storage version, stops serving v1, drops spec.legacy and
// narrows spec.color to blue.
func clusterCRD(group string, new bool) string {
	schema := `
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                color: {type: string, enum: [red, blue]}
                legacy: {type: string}
                size: {type: integer}`
	versions := `
    - name: v1
      served: true
      storage: true
      schema:` + schema
	if new {
		narrowed := strings.Replace(strings.Replace(schema, "enum: [red, blue]", "enum: [blue]", 1), "\n                legacy: {type: string}", "", 1)
		versions = `
    - name: v1
      served: false
      storage: false
      schema:` + schema + `
    - name: v2
      served: true
      storage: true
      schema:` + narrowed
	}
	return fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: things.%[1]s}
spec:
  group: %[1]s
  scope: Namespaced
  names: {plural: things, singular: thing, kind: Thing, listKind: ThingList}
  versions:%[2]s
`, group, versions)
}

// TestCRDDiffCluster compares a new CRD with the one a real apiserver
// serves and scans its live objects: those the new CRD would reject
// (red), prune (legacy set) and stop serving (every object, at v1), and a
// CRD the cluster lacks is crd-added; with a limit the counts are lower
// bounds and say so.
func TestCRDDiffCluster(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	const group = "cluster.crddiff.example.com"
	apply(t, env, clusterCRD(group, false))
	var objs strings.Builder
	objs.WriteString("apiVersion: v1\nkind: Namespace\nmetadata: {name: crd-diff-cluster}\n")
	specs := map[string]string{"red": `{color: red, size: 1}`, "blue": `{color: blue}`, "legacy": `{color: blue, legacy: a}`, "red-legacy": `{color: red, legacy: b}`}
	for name, spec := range specs {
		fmt.Fprintf(&objs, "---\napiVersion: %s/v1\nkind: Thing\nmetadata: {name: %s, namespace: crd-diff-cluster}\nspec: %s\n", group, name, spec)
	}
	apply(t, env, objs.String())
	kubeconfig := env.WriteKubeconfig(t)
	newFile := writeFile(t, "new.yaml", clusterCRD(group, true)+"---\n"+strings.ReplaceAll(clusterCRD("absent.crddiff.example.com", false), "things", "others"))

	code, stdout, stderr := runCLI(t, "crd-diff", "--cluster", newFile, "--kubeconfig", kubeconfig, "-o", "json")
	if code != 1 {
		t.Fatalf("exit %d, want 1\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	var results []struct {
		CRD    string `json:"crd"`
		Checks []struct {
			Check, Version, Against, Field string
		} `json:"checks"`
		Scanned     int    `json:"scanned"`
		ImpactError string `json:"impactError"`
		Impact      []struct {
			Check, Version, Field, Effect string
			Count                         int
			Objects                       []struct{ Name string }
		} `json:"impact"`
	}
	if err := json.Unmarshal([]byte(stdout), &results); err != nil {
		t.Fatalf("output: %v\n%s", err, stdout)
	}
	if len(results) != 2 || results[1].CRD != "others.absent.crddiff.example.com" || len(results[1].Checks) != 1 || results[1].Checks[0].Check != "crd-added" {
		t.Fatalf("results %+v, want things compared and others added", results)
	}
	r := results[0]
	if r.Scanned != len(specs) || r.ImpactError != "" {
		t.Errorf("scanned %d (impactError %q), want %d", r.Scanned, r.ImpactError, len(specs))
	}
	got := map[string][]string{}
	for _, im := range r.Impact {
		var names []string
		for _, o := range im.Objects {
			names = append(names, o.Name)
		}
		sort.Strings(names)
		got[im.Effect+" "+im.Check+" "+im.Version+" "+im.Field] = names
	}
	want := map[string][]string{
		"unserved served-version-removed v1 ":        {"blue", "legacy", "red", "red-legacy"},
		"rejected enum-values-removed v2 spec.color": {"red", "red-legacy"},
		"pruned field-removed v2 spec.legacy":        {"legacy", "red-legacy"},
	}
	for k, names := range want {
		if !slices.Equal(got[k], names) {
			t.Errorf("impact %s: %v, want %v (all: %v)", k, got[k], names, got)
		}
	}

	// Bounded as at run time.
	code, stdout, stderr = runCLI(t, "crd-diff", "--cluster", newFile, "--kubeconfig", kubeconfig, "--crd-impact-max-objects", "2")
	if code != 1 || !strings.Contains(stdout, "impact incomplete: stopped after 2 objects (--crd-impact-max-objects): the counts are lower bounds") {
		t.Errorf("with a limit: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}

	// The RBAC docs/crd-diff.md documents is enough: get on the CRDs, list on
	// the custom resources. Without list the impact says why it is
	// missing, and the comparison still decides the exit code.
	roles := `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: crd-diff-ci}
rules:
  - {apiGroups: [apiextensions.k8s.io], resources: [customresourcedefinitions], verbs: [get]}
  - {apiGroups: [` + group + `], resources: [things], verbs: [list]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: crd-diff-get-only}
rules:
  - {apiGroups: [apiextensions.k8s.io], resources: [customresourcedefinitions], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: crd-diff-ci}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: crd-diff-ci}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: crd-diff-ci}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: crd-diff-get-only}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: crd-diff-get-only}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: crd-diff-get-only}]
`
	apply(t, env, roles)
	for _, user := range []struct{ name, want string }{
		{"crd-diff-ci", "things.cluster.crddiff.example.com: 4 breaking, 1 safe; 4 object(s) checked"},
		{"crd-diff-get-only", `impact incomplete: list things.v1.cluster.crddiff.example.com: things.cluster.crddiff.example.com is forbidden: User "crd-diff-get-only" cannot list resource "things"`},
	} {
		kc, _, err := env.UserKubeconfig(user.name)
		if err != nil {
			t.Fatal(err)
		}
		path := writeFile(t, "kubeconfig", string(kc))
		var last string
		// RBAC caches catch up: nothing to poll but the command itself.
		ok := testenv.PollEvery(200*time.Millisecond, 60*time.Second, func() bool {
			code, stdout, stderr := runCLI(t, "crd-diff", "--cluster", newFile, "--kubeconfig", path)
			last = fmt.Sprintf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
			return code == 1 && strings.Contains(stdout, user.want)
		})
		if !ok {
			t.Errorf("as %s, want %q in the output; last run: %s", user.name, user.want, last)
		}
	}

	// The NEW file is validated as for two files.
	bad := writeFile(t, "bad.yaml", strings.Replace(clusterCRD(group, true), "storage: true", "storage: false", 1))
	if code, _, stderr := runCLI(t, "crd-diff", "--cluster", bad, "--kubeconfig", kubeconfig); code != 2 || !strings.Contains(stderr, "must have exactly one version marked as storage version") {
		t.Errorf("a CRD without a storage version: exit %d, stderr %s", code, stderr)
	}
}
