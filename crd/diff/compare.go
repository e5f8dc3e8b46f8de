package diff

import (
	"fmt"
	"slices"
	"strconv"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// Compare compares two versions of one CustomResourceDefinition: the CRD as
// it is (old) and as it is about to be or has just been applied (new). It
// checks the CRD-wide settings (scope, names, stored, served and storage
// versions, conversion) and, for each version both serve, the version's
// schema and subresources. Neither CRD is modified.
//
// old.Status.StoredVersions is what the stored-version check reads; when it
// is empty (a CRD read from a manifest rather than from the cluster), the
// old storage version is taken as the one stored version.
//
// Between versions: with conversion None the apiserver serves one stored
// object at every served version as it is and rewrites it at the storage
// version, pruned to its schema, on the next write. So the schema checks
// also run, with Check.Against set to the other version and only the
// breaking and unknown ones reported, between: every pair of served
// versions of the new CRD, older against newer in Kubernetes version order
// (only what the old CRD did not already have: a difference it also had
// between two versions it served unconverted is not reported again); on a
// storage switch, each version objects are stored at (the old
// status.storedVersions, else the old storage version) against the new
// storage version; on a change from Webhook to None, each version objects
// are stored at and no longer served against each served version.
//
// Checks come CRD-wide first, then per version in the new CRD's version
// order, each schema depth first with properties in name order, then the
// checks between versions: the same inputs always give the same Result.
//
// The cost is linear in the size of the two CRDs (times the number of pairs
// of served versions when the new CRD serves several without conversion).
func Compare(old, new *apiextensionsv1.CustomResourceDefinition) *Result {
	return CompareWith(old, new, nil)
}

// CompareWith is Compare under a Policy: the checks it names are
// reported with the severity it gives them, or not at all. A nil policy
// is the default, Compare's.
func CompareWith(old, new *apiextensionsv1.CustomResourceDefinition, p *Policy) *Result {
	r := &Result{CRD: new.Name, Checks: []Check{}, Impact: []Impact{}}
	if r.CRD == "" {
		r.CRD = old.Name
	}
	compareScope(r, old, new)
	compareNames(r, &old.Spec.Names, &new.Spec.Names)
	if old.Spec.PreserveUnknownFields != new.Spec.PreserveUnknownFields {
		c := Check{Path: "/spec/preserveUnknownFields", Old: old.Spec.PreserveUnknownFields, New: new.Spec.PreserveUnknownFields}
		if old.Spec.PreserveUnknownFields {
			c.Check, c.Severity, c.Message = "preserve-unknown-fields-removed", Breaking, "unknown fields are now pruned from every object"
		} else {
			c.Check, c.Severity, c.Message = "preserve-unknown-fields-added", Safe, "unknown fields are now kept"
		}
		r.add(c)
	}
	compareStoredVersions(r, old, new)
	x := newCross(old, new, p)
	compareStorage(r, x, old, new)
	compareConversion(r, x, old, new)
	compareVersions(r, old, new, p)
	x.compareServed()
	for _, c := range x.checks {
		r.add(c)
	}
	p.apply(r)
	return r
}

func compareScope(r *Result, old, new *apiextensionsv1.CustomResourceDefinition) {
	if old.Spec.Scope == new.Spec.Scope {
		return
	}
	r.add(Check{Path: "/spec/scope", Check: "scope-changed", Old: string(old.Spec.Scope), New: string(new.Spec.Scope), Severity: Breaking,
		Message: fmt.Sprintf("scope changed from %s to %s: every client's URLs and every object's identity change", old.Spec.Scope, new.Spec.Scope)})
}

func compareNames(r *Result, old, new *apiextensionsv1.CustomResourceDefinitionNames) {
	if old.Kind != new.Kind {
		r.add(Check{Path: "/spec/names/kind", Check: "kind-changed", Old: old.Kind, New: new.Kind, Severity: Breaking,
			Message: fmt.Sprintf("kind changed from %s to %s: manifests and clients of the old kind fail", old.Kind, new.Kind)})
	}
	if old.ListKind != new.ListKind && old.ListKind != "" && new.ListKind != "" {
		r.add(Check{Path: "/spec/names/listKind", Check: "kind-changed", Old: old.ListKind, New: new.ListKind, Severity: Breaking,
			Message: fmt.Sprintf("listKind changed from %s to %s: typed clients decoding lists fail", old.ListKind, new.ListKind)})
	}
	if old.Plural != new.Plural {
		r.add(Check{Path: "/spec/names/plural", Check: "kind-changed", Old: old.Plural, New: new.Plural, Severity: Breaking,
			Message: fmt.Sprintf("plural changed from %s to %s: every URL of the resource changes", old.Plural, new.Plural)})
	}
	if old.Singular != new.Singular || !slices.Equal(old.ShortNames, new.ShortNames) || !slices.Equal(old.Categories, new.Categories) {
		r.add(Check{Path: "/spec/names", Check: "names-changed", Severity: Safe,
			Message: "singular name, short names or categories changed: only kubectl's lookups by these names change"})
	}
}

// storedVersions returns the versions objects may be stored in.
func storedVersions(crd *apiextensionsv1.CustomResourceDefinition) []string {
	if len(crd.Status.StoredVersions) > 0 {
		return crd.Status.StoredVersions
	}
	if v := storageVersion(crd); v != "" {
		return []string{v}
	}
	return nil
}

func storageVersion(crd *apiextensionsv1.CustomResourceDefinition) string {
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			return v.Name
		}
	}
	return ""
}

func findVersion(crd *apiextensionsv1.CustomResourceDefinition, name string) (int, *apiextensionsv1.CustomResourceDefinitionVersion) {
	for i := range crd.Spec.Versions {
		if crd.Spec.Versions[i].Name == name {
			return i, &crd.Spec.Versions[i]
		}
	}
	return -1, nil
}

func compareStoredVersions(r *Result, old, new *apiextensionsv1.CustomResourceDefinition) {
	for i, v := range storedVersions(old) {
		if _, nv := findVersion(new, v); nv != nil {
			continue
		}
		r.add(Check{Version: v, Path: "/status/storedVersions/" + strconv.Itoa(i), Check: "stored-version-removed", Old: v, Severity: Breaking,
			Message: fmt.Sprintf("version %s is in status.storedVersions but no longer in spec.versions: the apiserver refuses this update until every object is migrated and %s is removed from status.storedVersions", v, v)})
	}
	if len(new.Status.StoredVersions) == 0 {
		return // a CRD read from a manifest: no status to compare
	}
	for i, v := range old.Status.StoredVersions {
		if _, nv := findVersion(new, v); nv == nil || slices.Contains(new.Status.StoredVersions, v) {
			continue
		}
		r.add(Check{Version: v, Path: "/status/storedVersions/" + strconv.Itoa(i), Check: "stored-version-cleared", Old: v, Severity: Breaking,
			Message: fmt.Sprintf("version %s was removed from status.storedVersions: the apiserver then lets %s leave spec.versions, so it is safe only once no object is stored at %s any more (fieldwatch crd-migrate)", v, v, v)})
	}
}

func compareVersions(r *Result, old, new *apiextensionsv1.CustomResourceDefinition, p *Policy) {
	stored := storedVersions(old)
	for i := range old.Spec.Versions {
		ov := &old.Spec.Versions[i]
		j, nv := findVersion(new, ov.Name)
		switch {
		case nv == nil && ov.Served:
			r.add(Check{Version: ov.Name, Path: "/spec/versions/" + strconv.Itoa(i), Check: "served-version-removed", Old: ov.Name, Severity: Breaking,
				Message: fmt.Sprintf("served version %s was removed: clients and manifests of %s fail", ov.Name, ov.Name)})
		case nv == nil && !slices.Contains(stored, ov.Name):
			r.add(Check{Version: ov.Name, Path: "/spec/versions/" + strconv.Itoa(i), Check: "version-removed", Old: ov.Name, Severity: Safe,
				Message: fmt.Sprintf("version %s, neither served nor stored, was removed", ov.Name)})
		case nv == nil:
			// An unserved stored version: stored-version-removed says it.
		case ov.Served && !nv.Served:
			r.add(Check{Version: ov.Name, Path: "/spec/versions/" + strconv.Itoa(j) + "/served", Check: "served-version-removed", Old: true, New: false, Severity: Breaking,
				Message: fmt.Sprintf("version %s is no longer served: clients and manifests of %s fail", ov.Name, ov.Name)})
		case !ov.Served && nv.Served:
			r.add(Check{Version: ov.Name, Path: "/spec/versions/" + strconv.Itoa(j) + "/served", Check: "version-served", Old: false, New: true, Severity: Safe,
				Message: fmt.Sprintf("version %s is served again", ov.Name)})
		}
	}
	for j := range new.Spec.Versions {
		nv := &new.Spec.Versions[j]
		_, ov := findVersion(old, nv.Name)
		if ov == nil {
			r.add(Check{Version: nv.Name, Path: "/spec/versions/" + strconv.Itoa(j), Check: "version-added", New: nv.Name, Severity: Safe,
				Message: fmt.Sprintf("version %s was added", nv.Name)})
			continue
		}
		if ov.Served && nv.Served {
			compareVersion(r, ov, nv, j, p)
		}
	}
}

func versionSchema(v *apiextensionsv1.CustomResourceDefinitionVersion) *apiextensionsv1.JSONSchemaProps {
	if v == nil || v.Schema == nil {
		return nil
	}
	return v.Schema.OpenAPIV3Schema
}

func compareConversion(r *Result, x *cross, oldCRD, newCRD *apiextensionsv1.CustomResourceDefinition) {
	old, new := oldCRD.Spec.Conversion, newCRD.Spec.Conversion
	strategy := func(c *apiextensionsv1.CustomResourceConversion) string {
		if c == nil || c.Strategy == "" {
			return string(apiextensionsv1.NoneConverter)
		}
		return string(c.Strategy)
	}
	if os, ns := strategy(old), strategy(new); os != ns {
		c := Check{Path: "/spec/conversion/strategy", Check: "conversion-changed", Old: os, New: ns}
		c.Severity, c.Message = x.strategyChange(os, ns)
		r.add(c)
		return
	}
	if strategy(new) != string(apiextensionsv1.WebhookConverter) || old.Webhook == nil || new.Webhook == nil {
		return
	}
	ow, nw := old.Webhook, new.Webhook
	if !slices.Equal(ow.ConversionReviewVersions, nw.ConversionReviewVersions) {
		r.add(Check{Path: "/spec/conversion/webhook/conversionReviewVersions", Check: "conversion-changed", Old: anyStrings(ow.ConversionReviewVersions), New: anyStrings(nw.ConversionReviewVersions), Severity: Unknown,
			Message: "the conversion webhook's ConversionReview versions changed"})
	}
	oc, nc := ow.ClientConfig, nw.ClientConfig
	if oc == nil || nc == nil {
		if (oc == nil) != (nc == nil) {
			r.add(Check{Path: "/spec/conversion/webhook/clientConfig", Check: "conversion-changed", Severity: Unknown, Message: "the conversion webhook's client configuration changed"})
		}
		return
	}
	if !sameJSON(oc.URL, nc.URL) || !sameJSON(oc.Service, nc.Service) {
		r.add(Check{Path: "/spec/conversion/webhook/clientConfig", Check: "conversion-changed", Old: plainJSON(endpoint(oc)), New: plainJSON(endpoint(nc)), Severity: Unknown,
			Message: "the conversion webhook moved: every read and write of a version other than the stored one goes to the new endpoint"})
	}
	if string(oc.CABundle) != string(nc.CABundle) {
		r.add(Check{Path: "/spec/conversion/webhook/clientConfig/caBundle", Check: "conversion-ca-bundle-changed", Severity: Safe,
			Message: "the conversion webhook's CA bundle changed (a certificate rotation)"})
	}
}

func endpoint(c *apiextensionsv1.WebhookClientConfig) any {
	if c.URL != nil {
		return *c.URL
	}
	return c.Service
}

func anyStrings(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// compareVersion compares one version both CRDs serve; j is its index in
// the new CRD.
func compareVersion(r *Result, ov, nv *apiextensionsv1.CustomResourceDefinitionVersion, j int, p *Policy) {
	base := "/spec/versions/" + strconv.Itoa(j)
	if !ov.Deprecated && nv.Deprecated {
		r.add(Check{Version: nv.Name, Path: base + "/deprecated", Check: "version-deprecated", Old: false, New: true, Severity: Safe,
			Message: fmt.Sprintf("version %s is deprecated: clients get a warning", nv.Name)})
	}
	compareSubresources(r, nv.Name, base+"/subresources", ov.Subresources, nv.Subresources)
	compareSelectableFields(r, nv.Name, base+"/selectableFields", ov.SelectableFields, nv.SelectableFields)
	if !sameJSON(ov.AdditionalPrinterColumns, nv.AdditionalPrinterColumns) {
		r.add(Check{Version: nv.Name, Path: base + "/additionalPrinterColumns", Check: "printer-columns-changed", Severity: Safe,
			Message: "the columns kubectl get prints changed"})
	}
	os, ns := versionSchema(ov), versionSchema(nv)
	switch {
	case os == nil && ns == nil:
	case os == nil || ns == nil:
		r.add(Check{Version: nv.Name, Path: base + "/schema", Check: "schema-changed", Severity: Unknown,
			Message: "the version's schema was added or removed"})
	default:
		w := walker{r: r, version: nv.Name, descriptions: p.descriptions()}
		w.compare("", "", os, ns, false)
	}
}

func compareSubresources(r *Result, version, base string, old, new *apiextensionsv1.CustomResourceSubresources) {
	var os, ns *apiextensionsv1.CustomResourceSubresourceStatus
	var oscale, nscale *apiextensionsv1.CustomResourceSubresourceScale
	if old != nil {
		os, oscale = old.Status, old.Scale
	}
	if new != nil {
		ns, nscale = new.Status, new.Scale
	}
	switch {
	case os != nil && ns == nil:
		r.add(Check{Version: version, Path: base + "/status", Check: "status-subresource-removed", Severity: Breaking,
			Message: "the status subresource was removed: writes to /status fail and status becomes writable with the object"})
	case os == nil && ns != nil:
		r.add(Check{Version: version, Path: base + "/status", Check: "status-subresource-added", Severity: Unknown,
			Message: "the status subresource was added: status changes sent with the object are now ignored"})
	}
	switch {
	case oscale != nil && nscale == nil:
		r.add(Check{Version: version, Path: base + "/scale", Check: "scale-subresource-removed", Severity: Breaking,
			Message: "the scale subresource was removed: kubectl scale and autoscalers fail"})
	case oscale == nil && nscale != nil:
		r.add(Check{Version: version, Path: base + "/scale", Check: "scale-subresource-added", Severity: Safe,
			Message: "the scale subresource was added"})
	case oscale != nil && !sameJSON(oscale, nscale):
		r.add(Check{Version: version, Path: base + "/scale", Check: "scale-subresource-changed", Old: plainJSON(oscale), New: plainJSON(nscale), Severity: Unknown,
			Message: "the scale subresource's paths changed: autoscalers read and write other fields"})
	}
}

func compareSelectableFields(r *Result, version, base string, old, new []apiextensionsv1.SelectableField) {
	has := func(list []apiextensionsv1.SelectableField, p string) bool {
		return slices.ContainsFunc(list, func(f apiextensionsv1.SelectableField) bool { return f.JSONPath == p })
	}
	for i, f := range old {
		if !has(new, f.JSONPath) {
			r.add(Check{Version: version, Path: base + "/" + strconv.Itoa(i), Check: "selectable-field-removed", Old: f.JSONPath, Severity: Breaking,
				Message: fmt.Sprintf("selectable field %s was removed: field selectors on it fail", f.JSONPath)})
		}
	}
	for i, f := range new {
		if !has(old, f.JSONPath) {
			r.add(Check{Version: version, Path: base + "/" + strconv.Itoa(i), Check: "selectable-field-added", New: f.JSONPath, Severity: Safe,
				Message: fmt.Sprintf("selectable field %s was added", f.JSONPath)})
		}
	}
}

// CompareAll compares two sets of CRDs (the CRDs of a chart or a
// kustomization before and after, say), pairing them by name: a CRD only
// in old gives a Result with the check crd-removed (breaking: deleting a
// CRD deletes every object of it), one only in new a Result with
// crd-added (safe). Results are in old's order, then the added CRDs in
// new's order.
func CompareAll(old, new []*apiextensionsv1.CustomResourceDefinition) []*Result {
	byName := make(map[string]*apiextensionsv1.CustomResourceDefinition, len(new))
	for _, c := range new {
		byName[c.Name] = c
	}
	seen := make(map[string]bool, len(old))
	var out []*Result
	for _, o := range old {
		seen[o.Name] = true
		if n, ok := byName[o.Name]; ok {
			out = append(out, Compare(o, n))
			continue
		}
		out = append(out, Removed(o))
	}
	for _, n := range new {
		if seen[n.Name] {
			continue
		}
		seen[n.Name] = true
		out = append(out, Added(n))
	}
	return out
}

// Removed is the comparison of a CRD with its absence: one check,
// crd-removed (breaking), since deleting a CRD deletes every object of it.
func Removed(crd *apiextensionsv1.CustomResourceDefinition) *Result {
	r := &Result{CRD: crd.Name, Checks: []Check{}, Impact: []Impact{}}
	r.add(Check{Path: "", Check: "crd-removed", Old: crd.Name, Severity: Breaking,
		Message: fmt.Sprintf("CRD %s was removed: deleting it deletes every object of it", crd.Name)})
	return r
}

// Added is the comparison of a new CRD with its absence: one check,
// crd-added (safe).
func Added(crd *apiextensionsv1.CustomResourceDefinition) *Result {
	r := &Result{CRD: crd.Name, Checks: []Check{}, Impact: []Impact{}}
	r.add(Check{Path: "", Check: "crd-added", New: crd.Name, Severity: Safe, Message: fmt.Sprintf("CRD %s was added", crd.Name)})
	return r
}
