package rules_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/crd/diff"
	"github.com/fieldwatch/fieldwatch/internal/cases"
	"github.com/fieldwatch/fieldwatch/internal/payloadtest"
	"github.com/fieldwatch/fieldwatch/rules"
)

// TestPayloadsMatchType holds the encoder to payload.Payload: every
// payload of the golden cases, of every example's cases and of the
// changes of typeCoverage (the parts no case file reaches) decodes into
// payload.Payload with unknown keys rejected, validates, and encodes again
// to the same keys in the same order with the same values; and together
// they use every key the type has.
func TestPayloadsMatchType(t *testing.T) {
	type fired struct {
		from    string
		payload []byte
	}
	var all []fired
	runCases := func(rulesFile, casesFile string) {
		set, err := rules.Load(rulesFile)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := cases.Load(casesFile, caseTime)
		if err != nil {
			t.Fatal(err)
		}
		for _, res := range cases.Run(set, cs) {
			for _, f := range res.Firings {
				all = append(all, fired{casesFile + ": " + res.Name, f})
			}
		}
	}
	runCases("testdata/golden/rules.yaml", "testdata/golden/cases.yaml")
	examples, err := filepath.Glob("../examples/*/rules.yaml")
	if err != nil || len(examples) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, file := range examples {
		casesFile := filepath.Join(filepath.Dir(file), "cases.yaml")
		if _, err := os.Stat(casesFile); err == nil {
			runCases(file, casesFile)
		}
	}
	for name, f := range typeCoverage(t) {
		all = append(all, fired{name, f.Payload})
	}

	seen := map[string]bool{}
	for _, f := range all {
		if _, err := payloadtest.Check(f.payload); err != nil {
			t.Errorf("%s: %v", f.from, err)
		}
		keys, err := payloadtest.KeyPaths(f.payload)
		if err != nil {
			t.Fatalf("%s: %v", f.from, err)
		}
		for _, k := range keys {
			seen[k] = true
		}
	}
	for _, p := range payloadtest.Paths() {
		if !seen[p] && !notEncoded[p] {
			t.Errorf("no payload has %s: add a change to typeCoverage that has it", p)
		}
	}
	if len(all) < 50 {
		t.Errorf("only %d payloads checked: the cases did not load as expected", len(all))
	}
}

// notEncoded are the keys of payload.Payload that the encoder does not
// write: the history API adds them (internal/history/web).
var notEncoded = map[string]bool{"crd.impact[].hidden": true}

// TestCRDTypeMatchesDiff: the crd of payload.Payload has the keys, in
// the same order, that crd/diff.Result writes, those its omitempty leaves
// out of typeCoverage's payloads included.
func TestCRDTypeMatchesDiff(t *testing.T) {
	var want []string
	for _, p := range payloadtest.Paths() {
		if k, ok := strings.CutPrefix(p, "crd."); ok && !notEncoded[p] {
			want = append(want, k)
		}
	}
	if got := payloadtest.PathsOf(diff.Result{}); !slices.Equal(got, want) {
		t.Errorf("diff.Result writes\n%v\npayload.CRD has\n%v", got, want)
	}
}

// typeCoverage returns the firings of changes that give what no case file
// does: an observed change with every key of the attribution, a CRD
// comparison whose impact has every key, and a CRD change the guard's
// annotation let through.
func typeCoverage(t *testing.T) map[string]rules.Firing {
	t.Helper()
	set, err := rules.Parse("coverage.yaml", []byte(`rules:
  - name: widgets
    match: {resources: [{group: example.com, kind: Widget}]}
    includeObject: true
    actions: [{log: {}}]
  - name: crds
    match: {resources: [{group: apiextensions.k8s.io, kind: CustomResourceDefinition}]}
    crd: {impact: true}
    actions: [{log: {}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 2, 12, 0, 0, 123456789, time.UTC)
	widgets := change.Resource{Group: "example.com", Version: "v1", Resource: "widgets", Kind: "Widget", Namespaced: true, Custom: true, Preferred: true}
	crds := change.Resource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions", Kind: "CustomResourceDefinition", Preferred: true}
	widget := func(rv string, size int64) map[string]any {
		return map[string]any{"apiVersion": "example.com/v1", "kind": "Widget",
			"metadata": map[string]any{"name": "w1", "namespace": "shop", "uid": "u1", "resourceVersion": rv,
				"managedFields": []any{map[string]any{"manager": "kubectl-edit", "operation": "Update", "time": "2026-12-02T12:00:0" + rv + "Z", "fieldsHash": rv}}},
			"spec": map[string]any{"size": size}}
	}
	crd := func(rv string, enum ...any) map[string]any {
		return map[string]any{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
			"metadata": map[string]any{"name": "widgets.example.com", "uid": "c1", "resourceVersion": rv},
			"spec":     map[string]any{"enum": enum}}
	}
	everyone := &change.Attribution{Match: change.MatchAmbiguous,
		User:             &change.UserInfo{Username: "admin", UID: "1", Groups: []string{"system:masters"}, Extra: map[string][]string{"authentication.kubernetes.io/credential-id": {"JTI=1"}}},
		ImpersonatedUser: &change.UserInfo{Username: "alice", UID: "2", Groups: []string{"sre"}, Extra: map[string][]string{"authentication.kubernetes.io/pod-name": {"p"}}},
		Verb:             "update", UserAgent: "kubectl/v1.37.0", SourceIPs: []string{"10.0.0.7"}, AuditID: "4f6e", Source: change.SourceBoth,
		Candidates: []string{"alice", "bob"}}
	comparison := &diff.Result{CRD: "widgets.example.com",
		Checks: []diff.Check{{Version: "v1", Against: "v2", Path: "/properties/spec/properties/color/enum", Field: "spec.color",
			Check: "enum-values-removed", Old: []any{"green"}, New: []any{"red"}, Severity: diff.Breaking, Message: `spec.color no longer accepts "green"`}},
		Breaking: 1, Scanned: 3,
		Impact: []diff.Impact{{Check: "enum-values-removed", Version: "v1", Path: "/properties/spec/properties/color/enum", Field: "spec.color",
			Effect: diff.Rejected, Count: 1, Objects: []diff.Hit{{Namespace: "shop", Name: "w2", Field: "spec.color", Error: "Unsupported value"}},
			Message: "1 object(s) fail the new schema", Error: "listed after the change"}},
		ImpactError: "stopped at --crd-impact-max-objects"}
	changes := map[string]*rules.Change{
		"observed, attributed": {Type: change.Updated, Resource: widgets, Old: widget("1", 1), New: widget("2", 3), Time: at,
			Observed: change.ObservedRelist, Attribution: everyone, Cluster: "prod-eu"},
		"crd impact": {Type: change.Updated, Resource: crds, Old: crd("1", "red", "green"), New: crd("2", "red"), Time: at, CRD: comparison},
		"crd guard overridden": {Type: change.Updated, Resource: crds, Old: crd("1", "red", "green"), New: crd("2", "red"), Time: at, CRD: comparison,
			Attribution: &change.Attribution{Match: change.MatchExact, Source: change.SourceAdmission, Verb: "update",
				User: &change.UserInfo{Username: "alice", Groups: []string{"sre"}},
				Guard: &change.GuardOverride{Overridden: true, Reason: "colors retired, objects migrated", User: "alice", Groups: []string{"sre"},
					Operation: "UPDATE", RequestUID: "r1", Checks: []string{"enum-values-removed"}, Objects: 1}}},
	}
	out := map[string]rules.Firing{}
	for name, c := range changes {
		firings, errs := set.Eval(c)
		if len(errs) > 0 || len(firings) != 1 {
			t.Fatalf("%s: %d firings, %v", name, len(firings), errs)
		}
		out[name] = firings[0]
	}
	return out
}
