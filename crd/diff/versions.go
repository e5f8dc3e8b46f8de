package diff

import (
	"fmt"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/version"
)

// Checks between versions. With conversion None the apiserver serves one
// stored object at every served version as it is (only apiVersion
// changes), and rewrites it at the storage version on its next write,
// pruned to that version's schema. So the schemas of two versions of the
// new CRD matter to each other, not only each version's old and new
// schema:
//
//   - every pair of served versions, older against newer in Kubernetes
//     version order (v1 < v2beta1 < v2): an object written at the older
//     one is read and updated at the newer one;
//   - on a storage version switch, every version objects are stored at
//     (the old status.storedVersions, or the old storage version) against
//     the new storage version: stored objects lose what its schema does
//     not have on their next write;
//   - when the conversion changes from Webhook to None, every version
//     objects are stored at and the new CRD no longer serves against each
//     served version: nothing converts them any more.
//
// Only breaking and unknown checks are reported (a loosening between two
// versions breaks nothing), with Against set to the other version, and
// only what was not already so in the old CRD: a difference between two
// versions it also served unconverted (the same check, field and values,
// whichever the versions) is not reported again.

// cross collects the checks between versions of one comparison.
type cross struct {
	old, new *apiextensionsv1.CustomResourceDefinition
	policy   *Policy
	checks   []Check
	seen     map[string]bool
}

func newCross(old, new *apiextensionsv1.CustomResourceDefinition, p *Policy) *cross {
	return &cross{old: old, new: new, policy: p, seen: map[string]bool{}}
}

// unconverted reports whether the apiserver serves crd's objects at every
// served version without converting them: conversion None, or a webhook
// when the policy compares served versions regardless (crdify's
// conversion: None).
func unconverted(crd *apiextensionsv1.CustomResourceDefinition, p *Policy) bool {
	return isNone(crd) || p.webhookServedVersions()
}

func isNone(crd *apiextensionsv1.CustomResourceDefinition) bool {
	c := crd.Spec.Conversion
	return c == nil || c.Strategy == "" || c.Strategy == apiextensionsv1.NoneConverter
}

// servedVersions returns the served versions of crd in Kubernetes
// version order, oldest first.
func servedVersions(crd *apiextensionsv1.CustomResourceDefinition) []*apiextensionsv1.CustomResourceDefinitionVersion {
	var out []*apiextensionsv1.CustomResourceDefinitionVersion
	for i := range crd.Spec.Versions {
		if crd.Spec.Versions[i].Served {
			out = append(out, &crd.Spec.Versions[i])
		}
	}
	slices.SortStableFunc(out, func(a, b *apiextensionsv1.CustomResourceDefinitionVersion) int {
		return version.CompareKubeAwareVersionStrings(a.Name, b.Name)
	})
	return out
}

// between compares schema a of version against with schema b of version
// ver and returns the breaking and unknown checks, Against set, messages
// prefixed with why.
func (x *cross) between(ver, against string, a, b *apiextensionsv1.JSONSchemaProps, why string) []Check {
	tmp := &Result{}
	switch {
	case a == nil && b == nil:
	case a == nil || b == nil:
		tmp.add(Check{Version: ver, Path: "", Check: "schema-changed", Severity: Unknown, Message: "one of the two versions has no schema"})
	default:
		w := walker{r: tmp, version: ver, descriptions: x.policy.descriptions()}
		w.compare("", "", a, b, false)
	}
	var out []Check
	for _, c := range tmp.Checks {
		c.Severity = x.policy.severity(c.Check, c.Severity)
		if c.Severity == Safe || x.policy.ignored(c.Check) {
			continue
		}
		c.Against = against
		c.Message = why + ": " + c.Message
		out = append(out, c)
	}
	return out
}

// key identifies a check between versions for deduplication.
func (c Check) key() string {
	return strings.Join([]string{c.Version, c.Against, c.Check, c.Path, c.Field, string(mustJSON(c.Old)), string(mustJSON(c.New))}, "\x00")
}

// keep adds the checks not already collected and returns how many of
// them are breaking and unknown.
func (x *cross) keep(checks []Check) (breaking, unknown int) {
	for _, c := range checks {
		switch c.Severity {
		case Breaking:
			breaking++
		case Unknown:
			unknown++
		}
		if k := c.key(); !x.seen[k] {
			x.seen[k] = true
			x.checks = append(x.checks, c)
		}
	}
	return breaking, unknown
}

// servedPairs returns the checks between the served versions of crd
// when it serves them unconverted.
func (x *cross) servedPairs(crd *apiextensionsv1.CustomResourceDefinition) []Check {
	if !unconverted(crd, x.policy) {
		return nil
	}
	served := servedVersions(crd)
	var out []Check
	for i, a := range served {
		for _, b := range served[i+1:] {
			why := fmt.Sprintf("%s and %s are both served without conversion, so an object written at %s is read and updated at %s as it is", a.Name, b.Name, a.Name, b.Name)
			out = append(out, x.between(b.Name, a.Name, versionSchema(a), versionSchema(b), why)...)
		}
	}
	return out
}

// compareServed adds the checks between the served versions of the new
// CRD that the old CRD did not already have.
func (x *cross) compareServed() {
	checks := x.servedPairs(x.new)
	if len(checks) == 0 {
		return
	}
	before := map[string]bool{}
	for _, c := range x.servedPairs(x.old) {
		before[c.difference()] = true
	}
	var fresh []Check
	for _, c := range checks {
		if !before[c.difference()] {
			fresh = append(fresh, c)
		}
	}
	x.keep(fresh)
}

// difference is a check between versions without the versions: the old
// CRD already served two versions that differed this way when it had a
// check of the same difference (a version added with the schema of one
// already served is not a new difference).
func (c Check) difference() string {
	return strings.Join([]string{c.Check, c.Path, c.Field, string(mustJSON(c.Old)), string(mustJSON(c.New))}, "\x00")
}

// compareStorage reports a storage version switch: safe, unless the new
// CRD does not convert and the new storage version's schema drops or
// tightens what the versions objects are stored at had.
func compareStorage(r *Result, x *cross, old, new *apiextensionsv1.CustomResourceDefinition) {
	os, ns := storageVersion(old), storageVersion(new)
	if os == ns || os == "" || ns == "" {
		return
	}
	_, nv := findVersion(new, ns)
	c := Check{Version: ns, Path: "/spec/versions", Check: "storage-version-changed", Old: os, New: ns, Severity: Safe,
		Message: fmt.Sprintf("storage version changed from %s to %s: objects move to %s as they are written; %s stays in status.storedVersions until a storage migration rewrites every object", os, ns, ns, os)}
	if isNone(new) {
		var stored []string
		breaking, unknown := 0, 0
		for _, s := range storedVersions(old) {
			if s == ns {
				continue
			}
			_, sv := findVersion(old, s)
			if sv == nil {
				continue // stored-version-removed says it
			}
			why := fmt.Sprintf("objects stored at %s are rewritten at %s unconverted on their next write", s, ns)
			b, u := x.keep(x.between(ns, s, versionSchema(sv), versionSchema(nv), why))
			if b+u > 0 {
				stored = append(stored, s)
				breaking, unknown = breaking+b, unknown+u
			}
		}
		if len(stored) > 0 {
			c.Severity = Unknown
			if breaking > 0 {
				c.Severity = Breaking
			}
			c.Message = fmt.Sprintf("storage version changed from %s to %s with conversion None: objects written at %s lose what %s's schema does not have, or fail what it newly requires, on their next write (%d check(s) against %s)",
				os, ns, strings.Join(stored, ", "), ns, breaking+unknown, strings.Join(stored, ", "))
		}
	}
	r.add(c)
}

// involved returns the versions whose objects the apiserver may have to
// convert under the new CRD: the served ones, the ones objects are
// stored at, and the new storage version.
func (x *cross) involved() []string {
	var out []string
	for _, v := range servedVersions(x.new) {
		out = append(out, v.Name)
	}
	for _, v := range append(storedVersions(x.old), storageVersion(x.new)) {
		if v != "" && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// strategyChange classifies a change of conversion strategy by what it
// does to stored and served objects.
func (x *cross) strategyChange(os, ns string) (Severity, string) {
	vers := x.involved()
	none, webhook := string(apiextensionsv1.NoneConverter), string(apiextensionsv1.WebhookConverter)
	switch {
	case os == none && ns == webhook && len(vers) <= 1:
		return Safe, fmt.Sprintf("conversion strategy changed from None to Webhook: the webhook is not called while only %s is served and stored", strings.Join(vers, ""))
	case os == none && ns == webhook:
		return Unknown, fmt.Sprintf("conversion strategy changed from None to Webhook: objects read or written at a version other than the one they are stored at (%s) now go through the webhook, "+
			"which fails those requests while it is unreachable; what it returns is not checked", strings.Join(vers, ", "))
	case os == webhook && ns == none && len(vers) <= 1:
		return Safe, fmt.Sprintf("conversion strategy changed from Webhook to None: only %s is served and every object is stored at it, so nothing needed converting", strings.Join(vers, ""))
	case os == webhook && ns == none:
		return x.unconverting(vers)
	}
	return Unknown, fmt.Sprintf("conversion strategy changed from %s to %s: how objects convert between versions changes", os, ns)
}

// unconverting classifies Webhook -> None with several versions involved:
// objects are served at every served version as they are stored. Served
// pairs are compared by compareServed; versions objects are stored at
// that are no longer served are compared here with each served version.
func (x *cross) unconverting(vers []string) (Severity, string) {
	served := servedVersions(x.new)
	stored := storedVersions(x.old)
	same := true
	var schemas []*apiextensionsv1.JSONSchemaProps
	for _, v := range served {
		schemas = append(schemas, versionSchema(v))
	}
	for _, s := range stored {
		if slices.ContainsFunc(served, func(v *apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Name == s }) {
			continue
		}
		_, sv := findVersion(x.old, s)
		if sv == nil {
			continue // stored-version-removed says it
		}
		schemas = append(schemas, versionSchema(sv))
		for _, v := range served {
			why := fmt.Sprintf("objects stored at %s are now served at %s unconverted", s, v.Name)
			x.keep(x.between(v.Name, s, versionSchema(sv), versionSchema(v), why))
		}
	}
	for i := 1; i < len(schemas); i++ {
		if !sameSchema(schemas[0], schemas[i]) {
			same = false
		}
	}
	if same {
		return Safe, fmt.Sprintf("conversion strategy changed from Webhook to None: the versions objects are stored and served at (%s) have the same schema, and objects are now served at each as they are stored", strings.Join(vers, ", "))
	}
	return Unknown, fmt.Sprintf("conversion strategy changed from Webhook to None: objects stored at one of %s are now served at the others unconverted, and their schemas differ: "+
		"whatever the webhook changed between versions is no longer done (see the checks against each version)", strings.Join(vers, ", "))
}
