package diff

import (
	"regexp"
	"strings"
	"testing"
)

// olmV1 is OLM v1's configuration of crdify (operator-controller's
// crdupgradesafety preflight), written as a crdify configuration file.
const olmV1 = `
conversion: Ignore
unhandledEnforcement: Error
validations:
  - {name: description, enforcement: None}
  - {name: enum, enforcement: Error, configuration: {additionPolicy: Allow}}
`

// TestPolicy compares one old and new schema under policies and checks
// the severity each reports the differences with.
func TestPolicy(t *testing.T) {
	old := `{type: object, description: a, properties: {color: {type: string, enum: [red]}, name: {type: string, pattern: "^a"}, size: {type: integer}}}`
	new := `{type: object, description: b, properties: {color: {type: string, enum: [red, blue]}, name: {type: string}, size: {type: number}}}`
	tests := []struct {
		name, policy string
		want         []string // check severity, in check order
	}{
		{name: "default", want: []string{"enum-values-added safe", "pattern-removed safe", "type-widened safe"}},
		{name: "fieldwatch checks", policy: "checks: {enum-values-added: breaking, pattern-removed: ignore, description-changed: unknown}",
			want: []string{"description-changed unknown", "enum-values-added breaking", "type-widened safe"}},
		{name: "crdify's defaults", policy: "validations: []\nunhandledEnforcement: Error",
			want: []string{"description-changed breaking", "enum-values-added breaking", "pattern-removed breaking", "type-widened breaking"}},
		{name: "OLM v1's configuration", policy: olmV1,
			want: []string{"enum-values-added safe", "pattern-removed breaking", "type-widened breaking"}},
		{name: "crdify Warn and None", policy: "validations: [{name: type, enforcement: Warn}, {name: pattern, enforcement: None}, {name: enum, enforcement: Error, configuration: {additionPolicy: Disallow}}]",
			want: []string{"description-changed breaking", "enum-values-added breaking", "type-widened safe"}},
		{name: "crdify pattern removal allowed, then a fieldwatch override", policy: "validations: [{name: pattern, enforcement: Error, configuration: {removalPolicy: Allow}}]\nchecks: {type-widened: safe}",
			want: []string{"description-changed breaking", "enum-values-added breaking", "pattern-removed safe", "type-widened safe"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p *Policy
			if tt.policy != "" {
				var err error
				if p, err = ParsePolicy("policy.yaml", []byte(tt.policy)); err != nil {
					t.Fatal(err)
				}
			}
			r := CompareWith(withSchema(t, old), withSchema(t, new), p)
			var got []string
			for _, c := range r.Checks {
				got = append(got, c.Check+" "+string(c.Severity))
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("checks:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
			breaking := 0
			for _, c := range r.Checks {
				if c.Severity != Safe {
					breaking++
				}
			}
			if r.Breaking != breaking {
				t.Errorf("breaking %d, counted %d", r.Breaking, breaking)
			}
		})
	}
}

// TestParsePolicyErrors checks that a bad policy file says where.
func TestParsePolicyErrors(t *testing.T) {
	tests := []struct{ src, want string }{
		{"checks:\n  enum-value-added: breaking\n", `^policy\.yaml:2:21: checks\.enum-value-added: unknown check`},
		{"checks: {enum-added: fatal}\n", `^policy\.yaml:1:22: checks\.enum-added: must be breaking, unknown, safe or ignore, not "fatal"`},
		{"validations:\n  - name: enums\n    enforcement: Error\n", `^policy\.yaml:2:11: validations\[0\]\.name: unknown crdify validation "enums"`},
		{"validations:\n  - name: enum\n    enforcement: Fail\n", `^policy\.yaml:3:18: validations\[0\]\.enforcement: must be Error, Warn or None, not "Fail"`},
		{"validations:\n  - name: enum\n    enforcement: Error\n    configuration: {removalPolicy: Allow}\n", `validations\[0\]\.configuration\.removalPolicy: the enum validation has no setting "removalPolicy"`},
		{"conversion: Sometimes\n", `^policy\.yaml:1:13: conversion: must be None or Ignore`},
		{"chekcs: {}\n", `^policy\.yaml: .*unknown field "chekcs"`},
		{"checks: [a\n", `^policy\.yaml:\d+:\d+: did not find expected`},
	}
	for _, tt := range tests {
		_, err := ParsePolicy("policy.yaml", []byte(tt.src))
		if err == nil || !regexp.MustCompile(tt.want).MatchString(err.Error()) {
			t.Errorf("%q: error %v, want %s", tt.src, err, tt.want)
		}
	}
}

// TestPolicyApply applies a policy to a Result computed without it, as
// rules do with the comparison and impact the pipeline computed: the
// impact of a check made safe goes, the others' stays, r is unchanged.
func TestPolicyApply(t *testing.T) {
	r := &Result{CRD: "widgets.example.com"}
	r.add(Check{Version: "v1", Path: "/properties/spec/properties/color/enum", Field: "spec.color", Check: "enum-values-removed", Severity: Breaking})
	r.add(Check{Version: "v1", Path: "/properties/spec/properties/size/maximum", Field: "spec.size", Check: "maximum-added", Severity: Breaking})
	r.Impact = []Impact{
		{Check: "enum-values-removed", Version: "v1", Path: "/properties/spec/properties/color/enum", Field: "spec.color", Effect: Rejected, Count: 2},
		{Check: "maximum-added", Version: "v1", Path: "/properties/spec/properties/size/maximum", Field: "spec.size", Effect: Rejected, Count: 1},
		{Check: "invalid", Version: "v1", Effect: Rejected, Count: 1},
	}
	p, err := ParsePolicy("p.yaml", []byte("checks: {enum-values-removed: safe}"))
	if err != nil {
		t.Fatal(err)
	}
	out := p.Apply(r)
	if out.Breaking != 1 || out.Safe != 1 || len(out.Impact) != 2 || out.Impact[0].Check != "maximum-added" || out.Impact[1].Check != "invalid" {
		t.Errorf("applied: breaking %d safe %d impact %+v", out.Breaking, out.Safe, out.Impact)
	}
	if r.Breaking != 2 || len(r.Impact) != 3 || r.Checks[0].Severity != Breaking {
		t.Errorf("Apply changed its input: %+v", r)
	}
}
