package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

func TestCRDDiff(t *testing.T) {
	t.Parallel()
	dir := "testdata/crd-diff/"
	old, new, objects := dir+"old.yaml", dir+"new.yaml", dir+"objects"
	oldCRD := mustRead(t, old)
	shortNamesOnly := writeFile(t, "safe.yaml", strings.Replace(oldCRD, "shortNames: [wd]", "shortNames: [wd, wdg]", 1))
	gadgets := repo(t, "examples/crds/gadgets.yaml")
	typeError := writeFile(t, "type.yaml", strings.Replace(oldCRD, "      served: true", "      served: \"yes\"", 1))
	unknownField := writeFile(t, "unknown.yaml", strings.Replace(oldCRD, "                size: {type: integer, minimum: 0}", "                size: {type: integer, minimum: 0, maximun: 9}", 1))
	notYAML := writeFile(t, "broken.yaml", "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nspec:\n  group: [a\n")
	badObjects := writeFile(t, "objects.yaml", "apiVersion: example.com/v1\nkind: Widget\n---\n- just\n- a list\n")
	notStructural := writeFile(t, "nostruct.yaml", strings.Replace(mustRead(t, new), "                color: {type: string, enum: [red, blue]}", "                color: {enum: [red, blue]}", 1))
	noStorage := writeFile(t, "nostorage.yaml", strings.Replace(oldCRD, "storage: true", "storage: false", 1))
	noName := writeFile(t, "noname.yaml", strings.Replace(mustRead(t, new), "name: widgets.example.com", "labels: {a: b}", 1))
	twice := writeFile(t, "twice.yaml", oldCRD+"\n---\n"+oldCRD)
	relaxed := writeFile(t, "relaxed.yaml", "checks:\n  enum-added: safe\n")
	ignoreAll := writeFile(t, "ignore.yaml", "checks: {enum-added: ignore, field-removed: ignore, required-added: ignore, maximum-added: ignore}\n")
	crdify := writeFile(t, "crdify.yaml", "validations:\n  - name: enum\n    enforcement: Warn\n  - name: description\n    enforcement: None\nconversion: Ignore\n")
	badPolicy := writeFile(t, "bad-policy.yaml", "checks:\n  enum-value-added: breaking\n")
	tests := []cliCase{
		{name: "breaking changes and their impact", args: []string{"crd-diff", old, new, "--objects", objects}, code: 1,
			stdout: `(?s)^widgets\.example\.com: 4 breaking, 1 safe; 4 object\(s\) checked\n` +
				`SEVERITY\s+CHECK\s+VERSION\s+FIELD\s+MESSAGE\n` +
				`safe\s+names-changed\s+-\s+-\s+.*` +
				`breaking\s+enum-added\s+v1\s+spec\.color\s+.*` +
				`breaking\s+field-removed\s+v1\s+spec\.owner\s+.*` +
				`breaking\s+required-added\s+v1\s+spec\.parts\[\*\]\.count\s+.*` +
				`breaking\s+maximum-added\s+v1\s+spec\.size\s+.*` +
				`impact enum-added \(v1, spec\.color\): 1 object\(s\) rejected\n.*ratcheting.*\n    shop/w2: spec\.color: Unsupported value: "green".*` +
				`impact field-removed \(v1, spec\.owner\): 2 object\(s\) pruned\n.*strict field validation.*\n    lab/w4: .*\n    shop/w1: .*` +
				`impact required-added \(v1, spec\.parts\[\*\]\.count\): 1 object\(s\) rejected\n.*\n    shop/w2: spec\.parts\[1\]\.count: Required value\n` +
				`impact maximum-added \(v1, spec\.size\): 2 object\(s\) rejected\n.*\n    lab/w4: .*\n    shop/w2: .*$`},
		{name: "flags before the files", args: []string{"crd-diff", "--objects", objects + "/lab.yaml", "-o", "table", old, new}, code: 1,
			stdout: `; 1 object\(s\) checked(?s:.*)impact field-removed \(v1, spec\.owner\): 1 object\(s\) pruned`},
		{name: "without objects", args: []string{"crd-diff", old, new}, code: 1, stdout: `^widgets\.example\.com: 4 breaking, 1 safe\n`},
		{name: "no change", args: []string{"crd-diff", old, old, "--objects", objects}, code: 0, stdout: `^widgets\.example\.com: 0 breaking, 0 safe; 4 object\(s\) checked\n$`},
		{name: "safe change", args: []string{"crd-diff", old, shortNamesOnly}, code: 0, stdout: `1 safe\n.*\nsafe\s+names-changed`},
		{name: "a CRD removed, another added", args: []string{"crd-diff", old, gadgets}, code: 1,
			stdout: `(?s)widgets\.example\.com: 1 breaking.*crd-removed.*gadgets\.example\.com: 0 breaking, 1 safe.*crd-added`},
		{name: "one file", args: []string{"crd-diff", old}, code: 2, stderr: `^fieldwatch crd-diff: want two files, OLD and NEW, got 1\nusage: fieldwatch crd-diff OLD\.yaml NEW\.yaml`},
		{name: "missing file", args: []string{"crd-diff", old, dir + "nope.yaml"}, code: 2, stderr: `nope\.yaml: no such file`},
		{name: "no CRD in the file", args: []string{"crd-diff", old, objects + "/lab.yaml"}, code: 2, stderr: `lab\.yaml: no apiextensions\.k8s\.io/v1 CustomResourceDefinition in the file`},
		{name: "a value of the wrong type", args: []string{"crd-diff", typeError, new}, code: 2, stderr: `type\.yaml:17:\d+: spec\.versions\.served: cannot be a string: must be bool\n$`},
		{name: "an unknown field", args: []string{"crd-diff", old, unknownField}, code: 2,
			stderr: `unknown\.yaml:34:\d+: spec\.versions\[0\]\.schema\.openAPIV3Schema\.properties\.spec\.properties\.size\.maximun: unknown field\n$`},
		{name: "YAML syntax", args: []string{"crd-diff", notYAML, new}, code: 2, stderr: `broken\.yaml:4:\d+: did not find expected`},
		{name: "objects that are not objects", args: []string{"crd-diff", old, new, "--objects", badObjects}, code: 2, stderr: `objects\.yaml:4:\d+: a document must be an object, not an array`},
		{name: "a schema the apiserver would refuse", args: []string{"crd-diff", old, notStructural, "--objects", objects}, code: 2,
			stderr: `^\S*nostruct\.yaml:36:17: spec\.versions\[0\]\.schema\.openAPIV3Schema\.properties\[spec\]\.properties\[color\]\.type: Required value: must not be empty for specified object fields\n$`},
		{name: "no storage version", args: []string{"crd-diff", noStorage, new}, code: 2,
			stderr: `nostorage\.yaml:\d+:\d+: spec\.versions: Invalid value: .*must have exactly one version marked as storage version`},
		{name: "no metadata.name", args: []string{"crd-diff", old, noName}, code: 2, stderr: `noname\.yaml:\d+:\d+: metadata\.name: Required value`},
		{name: "the same CRD twice", args: []string{"crd-diff", twice, new}, code: 2,
			stderr: `twice\.yaml:\d+:\d+: metadata\.name: CustomResourceDefinition widgets\.example\.com appears twice \(first at \S*twice\.yaml:1\)`},
		{name: "an extra argument", args: []string{"crd-diff", old, new, "extra.yaml"}, code: 2,
			stderr: `^fieldwatch crd-diff: unexpected argument "extra\.yaml": want two files, OLD and NEW\nusage:`},
		{name: "unknown output says what is wrong", args: []string{"crd-diff", "-o", "xml", old, new}, code: 2,
			stderr: `^fieldwatch crd-diff: -o must be table or json, not "xml"\nusage:`},
		{name: "--cluster with two files", args: []string{"crd-diff", "--cluster", old, new}, code: 2,
			stderr: `^fieldwatch crd-diff: unexpected argument ".*new\.yaml": want one file, NEW, with --cluster`},
		{name: "--cluster with --objects", args: []string{"crd-diff", "--cluster", new, "--objects", objects}, code: 2, stderr: `--objects and --cluster do not go together`},
		{name: "a policy makes a breaking check safe", args: []string{"crd-diff", old, new, "--policy", relaxed}, code: 1,
			stdout: `^widgets\.example\.com: 3 breaking, 2 safe\n(?s:.*)safe\s+enum-added\s+v1\s+spec\.color`},
		{name: "a policy ignores every breaking check", args: []string{"crd-diff", old, new, "--policy", ignoreAll}, code: 0,
			stdout: `^widgets\.example\.com: 0 breaking, 1 safe\n`},
		{name: "a crdify configuration: enum Warn", args: []string{"crd-diff", old, new, "--policy", crdify}, code: 1,
			stdout: `safe\s+enum-added\s+v1\s+spec\.color`},
		{name: "a policy with an unknown check", args: []string{"crd-diff", old, new, "--policy", badPolicy}, code: 2,
			stderr: `^\S*bad-policy\.yaml:2:21: checks\.enum-value-added: unknown check`},
	}
	runCLICases(t, tests)
}

// TestCRDDiffJSON compares -o json with testdata/crd-diff/widgets.golden.json
// (go test -update rewrites it).
func TestCRDDiffJSON(t *testing.T) {
	t.Parallel()
	dir := "testdata/crd-diff/"
	code, stdout, stderr := runCLI(t, "crd-diff", "-o", "json", dir+"old.yaml", dir+"new.yaml", "--objects", dir+"objects")
	if code != 1 {
		t.Fatalf("exit %d, want 1: %s", code, stderr)
	}
	var results []map[string]any
	if err := json.Unmarshal([]byte(stdout), &results); err != nil {
		t.Fatalf("output is not a JSON list of results: %v\n%s", err, stdout)
	}
	if len(results) != 1 || results[0]["breaking"] != float64(4) || results[0]["scanned"] != float64(4) {
		t.Errorf("results %v", results)
	}
	compareGolden(t, dir+"widgets.golden.json", json.RawMessage(stdout))
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
