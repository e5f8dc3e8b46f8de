package impact

import (
	"context"
	"fmt"
	"iter"
	"math"
	"sort"
	"strings"

	"github.com/fieldwatch/fieldwatch/crd/diff"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
)

// Invalid is the Impact.Check of validation errors no check of the
// comparison explains.
const Invalid = "invalid"

// Scanner runs custom resources through what the apiserver does to a create
// under the new CRD, and attributes what fails to the checks of a
// comparison. It is not safe for concurrent use.
//
// Each object is run through what kube-apiserver does to a create under the
// new CRD, with the apiserver's own code
// (k8s.io/apiextensions-apiserver/pkg/apiserver, the release of client-go):
// pruning of unknown fields (unless the schema preserves them), coercion of
// embedded objects' metadata, defaulting, then the OpenAPI schema
// validator, embedded-object metadata validation, x-kubernetes-list-type
// uniqueness and the CEL x-kubernetes-validations rules (skipped when one
// of the errors that block them in the apiserver is present). The answer is
// therefore what the apiserver rejects when the object is created again,
// and on an update that changes the field. An update that leaves the field
// as it is still passes: CRD validation ratcheting (GA since Kubernetes
// 1.33) lets unchanged invalid values through, so nothing fails at the
// moment of the CRD change. Impact messages say so.
//
// Each validation error (and each pruned field) is attributed to the
// breaking or unknown check of the object's version whose field is the
// longest prefix of the error's path; errors no check explains go to an
// Impact with check "invalid". Effects:
//
//	rejected  the object fails the new schema (enum, limits, required,
//	          type, pattern, CEL rules, list uniqueness...)
//	pruned    the object sets a field the new schema drops
//	          (field-removed, preserve-unknown-fields-removed,
//	          additional-properties-removed): the apiserver prunes it on
//	          every read, so the impact must be computed from objects as
//	          they were before the change; a create with strict field
//	          validation, kubectl's default, is rejected
//	unserved  the object is at a version that is no longer served
//
// An object is checked at the version in its apiVersion and, when the new
// CRD does not convert (conversion None: the apiserver serves the stored
// object at every served version as it is), at every other served version
// too, each error attributed to the checks of the version it fails at. With
// a conversion webhook the other versions are not checked: what the webhook
// returns is not known here.
//
// Not covered: metadata (name, labels, ...) and the scale subresource's
// paths are not validated, as no CRD change affects them; with the status
// subresource, a create drops status, so errors under status show on the
// next status update that changes the field rather than on a re-create;
// stored-version-removed and stored-version-cleared have no object impact
// here (the version an object is stored at is not in the object: the
// storage-version ledger of internal/crdguard tells it); default changes
// are not counted (objects silently get the new value on their next
// read).
type Scanner struct {
	group, kind string
	versions    map[string]*version
	res         *diff.Result
	impacts     map[int]*impact // by index in res.Checks
	invalid     map[string]*impact
	scanned     int
	skipped     int
	// served are the served versions with a schema, in the CRD's order,
	// when the CRD serves its objects unconverted (conversion None): an
	// object is then checked at each.
	served []*version
	// afterChange: the objects were read after the change (AfterChange).
	afterChange string
}

// version is what the scan needs of one version of the new CRD.
type version struct {
	name       string
	served     bool
	structural *structuralschema.Structural
	validator  apiservervalidation.SchemaValidator
	cel        *cel.Validator
	prune      bool
	targets    []target
	unserved   int // index of its served-version-removed check, or -1
}

// target is a breaking or unknown check errors can be attributed to.
type target struct {
	check   int
	name    string // the check's name
	segs    []string
	removal bool // the check makes the apiserver prune the field
}

// impact accumulates the objects one check hits.
type impact struct {
	diff.Impact
}

// New prepares a scan of objects against crd, the new CRD of the
// comparison res. It fails when a version's schema is not structural (the
// apiserver would not have accepted the CRD).
func New(crd *apiextensionsv1.CustomResourceDefinition, res *diff.Result) (*Scanner, error) {
	s := &Scanner{
		group:    crd.Spec.Group,
		kind:     crd.Spec.Names.Kind,
		versions: map[string]*version{},
		res:      res,
		impacts:  map[int]*impact{},
		invalid:  map[string]*impact{},
	}
	for i := range crd.Spec.Versions {
		v := &crd.Spec.Versions[i]
		ver := &version{name: v.Name, served: v.Served, prune: !crd.Spec.PreserveUnknownFields, unserved: -1}
		if v.Served {
			if err := ver.compile(v); err != nil {
				return nil, fmt.Errorf("version %s: %w", v.Name, err)
			}
		}
		s.versions[v.Name] = ver
	}
	if c := crd.Spec.Conversion; c == nil || c.Strategy == "" || c.Strategy == apiextensionsv1.NoneConverter {
		for i := range crd.Spec.Versions {
			if v := s.versions[crd.Spec.Versions[i].Name]; v.served && v.structural != nil {
				s.served = append(s.served, v)
			}
		}
	}
	for i, c := range res.Checks {
		if c.Severity == diff.Safe || c.Version == "" {
			continue
		}
		ver := s.versions[c.Version]
		if c.Check == "served-version-removed" {
			if ver == nil {
				ver = &version{name: c.Version, unserved: i}
				s.versions[c.Version] = ver
			}
			ver.unserved = i
			continue
		}
		if ver == nil || !strings.HasPrefix(c.Path, "/") || strings.HasPrefix(c.Path, "/spec/") || strings.HasPrefix(c.Path, "/status/") {
			continue // not a schema check
		}
		if strings.HasPrefix(c.Check, "default-") {
			continue // defaults change values, they reject nothing
		}
		segs, err := splitField(c.Field)
		if err != nil {
			continue
		}
		ver.targets = append(ver.targets, target{check: i, name: c.Check, segs: segs, removal: isRemoval(c.Check)})
	}
	return s, nil
}

// isRemoval reports whether a check makes the apiserver prune values.
func isRemoval(check string) bool {
	switch check {
	case "field-removed", "preserve-unknown-fields-removed", "additional-properties-removed", "embedded-resource-removed":
		return true
	}
	return false
}

// compile builds the apiserver's structural schema, schema validator and
// CEL validator for one version, as the apiserver's CRD handler does.
func (v *version) compile(cv *apiextensionsv1.CustomResourceDefinitionVersion) error {
	if cv.Schema == nil || cv.Schema.OpenAPIV3Schema == nil {
		return nil
	}
	internal := &apiextensions.CustomResourceValidation{}
	if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(cv.Schema, internal, nil); err != nil {
		return fmt.Errorf("convert schema: %w", err)
	}
	ss, err := structuralschema.NewStructural(internal.OpenAPIV3Schema)
	if err != nil {
		return fmt.Errorf("schema is not structural: %w", err)
	}
	if errs := structuralschema.ValidateStructural(field.NewPath("openAPIV3Schema"), ss); len(errs) > 0 {
		return fmt.Errorf("schema is not structural: %w", errs.ToAggregate())
	}
	ss = ss.DeepCopy()
	if err := structuraldefaulting.PruneDefaults(ss); err != nil {
		return fmt.Errorf("prune defaults: %w", err)
	}
	validator, _, err := apiservervalidation.NewSchemaValidator(internal.OpenAPIV3Schema)
	if err != nil {
		return fmt.Errorf("schema validator: %w", err)
	}
	v.structural, v.validator = ss, validator
	v.cel = cel.NewValidator(ss, true, celconfig.PerCallLimit)
	return nil
}

// Scan runs the objects through a new Scanner and records the impact in
// res (Impact and Scanned).
func Scan(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition, res *diff.Result, objects iter.Seq[map[string]any]) error {
	s, err := New(crd, res)
	if err != nil {
		return err
	}
	for obj := range objects {
		if err := s.Add(ctx, obj); err != nil {
			return err
		}
	}
	s.Finish()
	return nil
}

// Add scans one object. Objects of another group or kind are skipped
// (Skipped counts them); obj is not modified. It fails only for an object
// that is not plain JSON values.
func (s *Scanner) Add(ctx context.Context, obj map[string]any) error {
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	group, ver, found := strings.Cut(apiVersion, "/")
	if !found {
		group, ver = "", apiVersion
	}
	if group != s.group || kind != s.kind {
		s.skipped++
		return nil
	}
	meta, _ := obj["metadata"].(map[string]any)
	ns, _ := meta["namespace"].(string)
	name, _ := meta["name"].(string)
	s.scanned++

	v := s.versions[ver]
	if v == nil || !v.served {
		if v != nil && v.unserved >= 0 {
			s.hit(v.unserved, diff.Unserved, diff.Hit{Namespace: ns, Name: name, Field: "apiVersion", Error: fmt.Sprintf("version %s is no longer served", ver)})
		} else {
			s.hitInvalid(ver, diff.Hit{Namespace: ns, Name: name, Field: "apiVersion", Error: fmt.Sprintf("version %s is not served", ver)})
		}
	} else if v.structural != nil {
		if err := s.check(ctx, v, obj, ns, name); err != nil {
			return err
		}
	}
	// Without conversion the object is read at every served version as
	// it is: check it at the others too.
	for _, w := range s.served {
		if w == v {
			continue
		}
		if err := s.check(ctx, w, obj, ns, name); err != nil {
			return err
		}
	}
	return nil
}

// check runs one object through the create path at version v and
// records what fails.
func (s *Scanner) check(ctx context.Context, v *version, obj map[string]any, ns, name string) error {
	copied, err := deepCopy(obj)
	if err != nil {
		return fmt.Errorf("%s: %w", diff.Hit{Namespace: ns, Name: name}, err)
	}
	u := copied.(map[string]any)
	if s.group == "" {
		u["apiVersion"] = v.name
	} else {
		u["apiVersion"] = s.group + "/" + v.name
	}
	hits := map[int]bool{}
	if v.prune {
		opts := structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true}
		for _, p := range pruning.PruneWithOptions(u, v.structural, true, opts) {
			if t := v.match(p, "", true); t >= 0 && !hits[t] {
				hits[t] = true
				s.hit(t, diff.Pruned, diff.Hit{Namespace: ns, Name: name, Field: p, Error: fmt.Sprintf("%s: field not declared in schema", p)})
			}
		}
		structuraldefaulting.PruneNonNullableNullsWithoutDefaults(u, v.structural)
	}
	for _, e := range v.validate(ctx, u) {
		h := diff.Hit{Namespace: ns, Name: name, Field: e.Field, Error: errorText(e)}
		t := v.match(e.Field, e.Type, false)
		switch {
		case t < 0:
			s.hitInvalid(v.name, h)
		case !hits[t]:
			hits[t] = true
			s.hit(t, diff.Rejected, h)
		}
	}
	return nil
}

// validate runs the apiserver's create path after decoding: embedded
// object metadata coercion, defaulting, then the OpenAPI schema,
// embedded metadata, list-type and CEL validation (CEL only when nothing
// else blocks it, as in the apiserver's strategy).
func (v *version) validate(ctx context.Context, u map[string]any) field.ErrorList {
	var errs field.ErrorList
	if err, _ := schemaobjectmeta.CoerceWithOptions(nil, u, v.structural, false, schemaobjectmeta.CoerceOptions{}); err != nil {
		errs = append(errs, err)
	}
	structuraldefaulting.Default(u, v.structural)
	errs = append(errs, apiservervalidation.ValidateCustomResource(nil, u, v.validator)...)
	errs = append(errs, schemaobjectmeta.Validate(ctx, nil, u, v.structural, false)...)
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, v.structural, u)...)
	if !blocking(errs) {
		celErrs, _ := v.cel.Validate(ctx, nil, v.structural, u, nil, celconfig.RuntimeCELCostBudget)
		errs = append(errs, celErrs...)
	}
	return errs
}

// blocking mirrors the apiserver's rule: these errors stop CEL rules from
// running.
func blocking(errs field.ErrorList) bool {
	for _, e := range errs {
		switch e.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return true
		}
	}
	return false
}

// match returns the check whose field is the longest prefix of the error
// path, among removal checks or the others; -1 when none. Of checks on
// the same field, one that produces errors of typ wins (a missing value
// is required-added's, a value outside an enum an enum check's, another
// invalid value a limit's or a pattern's).
func (v *version) match(path string, typ field.ErrorType, removal bool) int {
	segs := splitErrorPath(path)
	best, bestLen, bestFits := -1, -1, false
	for _, t := range v.targets {
		if t.removal != removal || len(t.segs) < bestLen || !hasPrefix(segs, t.segs) {
			continue
		}
		fits := produces(t.name, typ)
		if len(t.segs) == bestLen && (bestFits || !fits) {
			continue
		}
		best, bestLen, bestFits = t.check, len(t.segs), fits
	}
	return best
}

// produces reports whether a check makes the apiserver report errors of
// type typ at its field.
func produces(check string, typ field.ErrorType) bool {
	switch {
	case check == "required-added":
		return typ == field.ErrorTypeRequired
	case strings.HasPrefix(check, "enum-"):
		return typ == field.ErrorTypeNotSupported
	case check == "type-changed":
		return typ == field.ErrorTypeTypeInvalid
	}
	return typ != field.ErrorTypeRequired && typ != field.ErrorTypeNotSupported
}

func hasPrefix(segs, prefix []string) bool {
	if len(prefix) > len(segs) {
		return false
	}
	for i, p := range prefix {
		if p != wildcard && p != segs[i] {
			return false
		}
	}
	return true
}

const maxErrorText = 300

// errorText is the apiserver's message for e, cut to a few hundred bytes
// (a type error quotes the whole value).
func errorText(e *field.Error) string {
	s := e.Error()
	if len(s) > maxErrorText {
		s = s[:maxErrorText] + "…"
	}
	return s
}

func (s *Scanner) hit(check int, effect diff.Effect, h diff.Hit) {
	im := s.impacts[check]
	if im == nil {
		c := s.res.Checks[check]
		im = &impact{diff.Impact{Check: c.Check, Version: c.Version, Path: c.Path, Field: c.Field, Effect: effect}}
		s.impacts[check] = im
	}
	im.add(h)
}

func (s *Scanner) hitInvalid(ver string, h diff.Hit) {
	im := s.invalid[ver]
	if im == nil {
		im = &impact{diff.Impact{Check: Invalid, Version: ver, Effect: diff.Rejected}}
		s.invalid[ver] = im
	}
	im.add(h)
}

// add counts an object and keeps it among the samples when it is one of
// the first MaxSamples in namespace/name order.
func (im *impact) add(h diff.Hit) {
	im.Count++
	less := func(a, b diff.Hit) bool {
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	}
	n := len(im.Objects)
	if n == diff.MaxSamples && !less(h, im.Objects[n-1]) {
		return
	}
	i := sort.Search(n, func(i int) bool { return less(h, im.Objects[i]) })
	if n < diff.MaxSamples {
		im.Objects = append(im.Objects, diff.Hit{})
	}
	copy(im.Objects[i+1:], im.Objects[i:])
	im.Objects[i] = h
}

// Merge adds what o scanned to s, so that several Scanners, one per
// goroutine, can share one scan: o must have been made by New with the
// same CRD and Result as s, must have read other objects, and must not be
// used afterwards. Finish on s then reports the objects of both.
func (s *Scanner) Merge(o *Scanner) {
	s.scanned += o.scanned
	s.skipped += o.skipped
	for i, im := range o.impacts {
		if cur := s.impacts[i]; cur != nil {
			cur.merge(im)
		} else {
			s.impacts[i] = im
		}
	}
	for v, im := range o.invalid {
		if cur := s.invalid[v]; cur != nil {
			cur.merge(im)
		} else {
			s.invalid[v] = im
		}
	}
}

// merge adds o's objects to im: the counts summed, the samples the first
// MaxSamples of both in namespace/name order.
func (im *impact) merge(o *impact) {
	count := im.Count + o.Count
	for _, h := range o.Objects {
		im.add(h)
	}
	im.Count = count
	if im.Error == "" {
		im.Error = o.Error
	}
}

// AfterChange tells the Scanner that its objects were read from the
// apiserver after the change rather than as they were before it: the
// apiserver prunes a removed field from every read, and serves objects
// at the versions it still serves, so the objects that set a removed
// field, or that clients use at a version no longer served, cannot be
// found. Finish then reports every such check (field-removed,
// preserve-unknown-fields-removed, additional-properties-removed,
// served-version-removed) with Impact.Error set to why, its Count a lower
// bound; why is the start of that message.
func (s *Scanner) AfterChange(why string) { s.afterChange = why }

// Scanned is how many objects of the CRD's kind Add has read.
func (s *Scanner) Scanned() int { return s.scanned }

// Skipped is how many objects of other kinds Add has skipped.
func (s *Scanner) Skipped() int { return s.skipped }

// Finish records the impact in the Result: one Impact per check that hits
// objects, in the order of the checks, then the objects no check explains
// per version; and Scanned. It can be called again after more Adds.
func (s *Scanner) Finish() {
	out := []diff.Impact{}
	idx := make([]int, 0, len(s.impacts))
	for i := range s.impacts {
		idx = append(idx, i)
	}
	if s.afterChange != "" {
		for _, i := range s.unknowable() {
			if s.impacts[i] == nil {
				c := s.res.Checks[i]
				effect := diff.Pruned
				if c.Check == "served-version-removed" {
					effect = diff.Unserved
				}
				idx = append(idx, i)
				s.impacts[i] = &impact{diff.Impact{Check: c.Check, Version: c.Version, Path: c.Path, Field: c.Field, Effect: effect}}
			}
			s.impacts[i].Error = s.afterChange + ": " + unknowableReason(s.impacts[i].Impact)
		}
	}
	sort.Ints(idx)
	for _, i := range idx {
		im := s.impacts[i].Impact
		im.Objects = append([]diff.Hit(nil), im.Objects...)
		im.Message = message(im)
		out = append(out, im)
	}
	vers := make([]string, 0, len(s.invalid))
	for v := range s.invalid {
		vers = append(vers, v)
	}
	sort.Strings(vers)
	for _, v := range vers {
		im := s.invalid[v].Impact
		im.Objects = append([]diff.Hit(nil), im.Objects...)
		im.Message = message(im)
		out = append(out, im)
	}
	s.res.Impact = out
	s.res.Scanned = s.scanned
}

// unknowable returns the checks whose impact objects read after the
// change cannot show: removals and versions no longer served.
func (s *Scanner) unknowable() []int {
	var out []int
	for i, c := range s.res.Checks {
		if c.Severity == diff.Safe || c.Version == "" {
			continue
		}
		if c.Check == "served-version-removed" || (isRemoval(c.Check) && strings.HasPrefix(c.Path, "/") &&
			!strings.HasPrefix(c.Path, "/spec/") && !strings.HasPrefix(c.Path, "/status/")) {
			out = append(out, i)
		}
	}
	return out
}

// unknowableReason says why objects read after a change do not show an
// Impact's objects.
func unknowableReason(im diff.Impact) string {
	if im.Effect == diff.Unserved {
		return fmt.Sprintf("the apiserver serves them at the versions it still serves, so the objects clients use at %s cannot be told", im.Version)
	}
	field := im.Field
	if field == "" {
		field = "the removed fields"
	}
	return fmt.Sprintf("the apiserver prunes %s from every read after the change, so the objects that set it can only be found "+
		"in copies read before the change", field)
}

// message says what the apiserver does to the objects of an Impact.
func message(im diff.Impact) string {
	field := im.Field
	if field == "" {
		field = "the object"
	}
	switch {
	case im.Effect == diff.Unserved:
		return fmt.Sprintf("%d object(s) are at version %s, which is no longer served: reading or writing them at %s fails", im.Count, im.Version, im.Version)
	case im.Effect == diff.Pruned:
		return fmt.Sprintf("%d object(s) set %s, which the new schema drops: the apiserver no longer returns it, their next write deletes it, "+
			"and creating them again with strict field validation (kubectl's default) is rejected as an unknown field", im.Count, field)
	case im.Check == Invalid:
		return fmt.Sprintf("%d object(s) fail the new schema of %s for reasons no check explains (they may have been invalid before): "+
			"the apiserver rejects them when they are created again and on updates that change the invalid fields", im.Count, im.Version)
	}
	return fmt.Sprintf("%d object(s) fail the new schema at %s: the apiserver rejects them when they are created again (re-created, restored, "+
		"re-applied after a delete) and on any update that changes %s; updates that leave it as it is still pass (CRD validation ratcheting), "+
		"so nothing fails until then", im.Count, field, field)
}

// deepCopy copies a JSON value, normalising numbers to int64 and float64
// as the apiserver's decoder gives them.
func deepCopy(v any) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			c, err := deepCopy(e)
			if err != nil {
				return nil, err
			}
			out[k] = c
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			c, err := deepCopy(e)
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	case string, bool, int64, nil:
		return x, nil
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return int64(x), nil
		}
		return x, nil
	case int:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case float32:
		return deepCopy(float64(x))
	}
	return nil, fmt.Errorf("value of type %T is not JSON", v)
}
