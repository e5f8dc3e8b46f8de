package diff

import (
	"errors"
	"fmt"
	"github.com/fieldwatch/fieldwatch/fileerr"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// Ignore is the PolicySpec setting of a check that is not reported.
const Ignore = "ignore"

// Policy says how a comparison reports each check: with the severity it
// gives the check, or not at all. The zero Policy, and a nil one, is the
// default: every check with the severity the package documentation
// gives it, descriptions not compared, served versions compared pairwise
// only when the new CRD does not convert.
type Policy struct {
	// Severity overrides the severity of the checks it names.
	Severity map[string]Severity
	// Ignore drops the checks it names from the Result.
	Ignore map[string]bool
	// Descriptions compares descriptions (the check description-changed,
	// safe unless Severity says otherwise).
	Descriptions bool
	// WebhookServedVersions compares the served versions of a CRD
	// pairwise also when it converts with a webhook (crdify's
	// conversion: None).
	WebhookServedVersions bool
}

func (p *Policy) descriptions() bool          { return p != nil && p.Descriptions }
func (p *Policy) webhookServedVersions() bool { return p != nil && p.WebhookServedVersions }
func (p *Policy) ignored(check string) bool   { return p != nil && p.Ignore[check] }

func (p *Policy) severity(check string, s Severity) Severity {
	if p == nil {
		return s
	}
	if o, ok := p.Severity[check]; ok {
		return o
	}
	return s
}

// apply rewrites r's checks under p and counts them again.
func (p *Policy) apply(r *Result) {
	if p == nil {
		return
	}
	checks := r.Checks[:0:0]
	for _, c := range r.Checks {
		if p.ignored(c.Check) {
			continue
		}
		c.Severity = p.severity(c.Check, c.Severity)
		checks = append(checks, c)
	}
	r.Checks, r.Breaking, r.Unknown, r.Safe = nil, 0, 0, 0
	for _, c := range checks {
		r.add(c)
	}
	if r.Checks == nil {
		r.Checks = []Check{}
	}
}

// NeedsCompare reports whether p changes what a comparison computes, not
// only how it reports it: Apply cannot then be used on a Result computed
// without p.
func (p *Policy) NeedsCompare() bool { return p.descriptions() || p.webhookServedVersions() }

// Apply returns a copy of r with its checks reported under p (severities
// overridden, ignored checks dropped, counts recomputed) and the impact
// of the checks that are no longer breaking or unknown dropped. r is not
// modified.
func (p *Policy) Apply(r *Result) *Result {
	out := *r
	out.Checks = slices.Clone(r.Checks)
	p.apply(&out)
	kept := map[string]bool{}
	for _, c := range out.Checks {
		if c.Severity != Safe {
			kept[c.Check+"\x00"+c.Version+"\x00"+c.Path+"\x00"+c.Field] = true
		}
	}
	out.Impact = []Impact{}
	for _, im := range r.Impact {
		if im.Effect == Unserved || kept[im.Check+"\x00"+im.Version+"\x00"+im.Path+"\x00"+im.Field] || !slices.Contains(CheckNames, im.Check) {
			out.Impact = append(out.Impact, im)
		}
	}
	return &out
}

// CheckNames are the names of every check a comparison reports.
var CheckNames = []string{
	"crd-removed", "crd-added", "scope-changed", "kind-changed", "names-changed",
	"preserve-unknown-fields-removed", "preserve-unknown-fields-added",
	"stored-version-removed", "stored-version-cleared", "storage-version-changed", "conversion-changed", "conversion-ca-bundle-changed",
	"served-version-removed", "version-removed", "version-added", "version-served", "version-deprecated",
	"status-subresource-removed", "status-subresource-added",
	"scale-subresource-removed", "scale-subresource-added", "scale-subresource-changed",
	"selectable-field-removed", "selectable-field-added", "printer-columns-changed", "schema-changed",
	"field-removed", "field-added", "type-changed", "type-widened", "required-added", "required-removed",
	"default-added", "default-changed", "default-removed", "description-changed",
	"enum-added", "enum-values-removed", "enum-values-added", "enum-removed",
	"minimum-added", "minimum-tightened", "minimum-relaxed", "minimum-removed",
	"maximum-added", "maximum-tightened", "maximum-relaxed", "maximum-removed",
	"min-length-added", "min-length-tightened", "min-length-relaxed", "min-length-removed",
	"max-length-added", "max-length-tightened", "max-length-relaxed", "max-length-removed",
	"min-items-added", "min-items-tightened", "min-items-relaxed", "min-items-removed",
	"max-items-added", "max-items-tightened", "max-items-relaxed", "max-items-removed",
	"min-properties-added", "min-properties-tightened", "min-properties-relaxed", "min-properties-removed",
	"max-properties-added", "max-properties-tightened", "max-properties-relaxed", "max-properties-removed",
	"multiple-of-added", "multiple-of-changed", "multiple-of-relaxed", "multiple-of-removed",
	"pattern-added", "pattern-changed", "pattern-removed", "format-added", "format-changed", "format-removed",
	"nullable-removed", "nullable-added", "embedded-resource-added", "embedded-resource-removed",
	"unique-items-added", "unique-items-removed", "list-type-changed", "list-map-keys-changed", "map-type-changed",
	"validation-rule-added", "validation-rule-changed", "validation-rule-message-changed", "validation-rule-removed",
	"additional-properties-removed", "additional-properties-added", "allof-added", "allof-removed",
	"anyof-added", "anyof-removed", "anyof-alternatives-added", "anyof-changed",
	"oneof-added", "oneof-removed", "oneof-changed", "not-added", "not-removed", "not-changed",
}

// PolicySpec is a policy as written in a file (crd-diff --policy) or in
// a rule's crd block. It reads two formats, alone or together:
//
//   - fieldwatch's: checks maps a check name to the severity it is
//     reported with (breaking, unknown, safe) or to ignore;
//   - the reference checker's (kubernetes-sigs/crdify, which OLM v1
//     runs): validations, unhandledEnforcement and conversion, as
//     crdify's configuration file has them. A spec with either of the
//     first two starts from crdify's defaults rather than fieldwatch's
//     (every validation Error, every Allow/Disallow setting Disallow,
//     descriptions compared), so that a configuration moved from crdify
//     keeps its meaning; checks then overrides single checks.
//
// docs/crd-checks.md maps every check to crdify's validations.
type PolicySpec struct {
	// Checks maps check names to breaking, unknown, safe or ignore.
	Checks map[string]string `json:"checks,omitempty" yaml:"checks,omitempty"`
	// Validations are crdify's validation settings.
	Validations []ValidationSpec `json:"validations,omitempty" yaml:"validations,omitempty"`
	// UnhandledEnforcement is crdify's setting for changes no validation
	// handles: Error (unknown checks stay unknown), Warn (they are
	// reported safe) or None (not reported).
	UnhandledEnforcement string `json:"unhandledEnforcement,omitempty" yaml:"unhandledEnforcement,omitempty"`
	// Conversion is crdify's setting for served versions of a CRD that
	// converts with a webhook: Ignore (not compared with each other,
	// fieldwatch's default and OLM v1's) or None (compared; crdify's
	// default).
	Conversion string `json:"conversion,omitempty" yaml:"conversion,omitempty"`
}

// ValidationSpec is one entry of crdify's validations list.
type ValidationSpec struct {
	Name string `json:"name" yaml:"name"`
	// Enforcement is Error (the checks the validation flags are
	// breaking), Warn (reported safe: crdify warns and exits 0) or None
	// (not reported).
	Enforcement string `json:"enforcement" yaml:"enforcement"`
	// Configuration holds the validation's Allow/Disallow settings
	// (additionPolicy, removalPolicy).
	Configuration map[string]any `json:"configuration,omitempty" yaml:"configuration,omitempty"`
}

// crdifyValidation is what one crdify validation covers: the checks it
// flags, and for each of its settings the checks that setting allows.
type crdifyValidation struct {
	checks   []string
	settings map[string][]string
}

// crdifyValidations maps crdify's validations to fieldwatch's checks.
var crdifyValidations = map[string]crdifyValidation{
	"scope":                {checks: []string{"scope-changed"}},
	"existingFieldRemoval": {checks: []string{"field-removed"}},
	"storedVersionRemoval": {checks: []string{"stored-version-removed"}},
	"default":              {checks: []string{"default-added", "default-changed", "default-removed"}},
	"enum": {checks: []string{"enum-added", "enum-values-removed", "enum-removed"},
		settings: map[string][]string{"additionPolicy": {"enum-values-added"}}},
	"required":      {checks: []string{"required-added"}},
	"type":          {checks: []string{"type-changed", "type-widened"}},
	"maximum":       {checks: []string{"maximum-added", "maximum-tightened"}},
	"maxItems":      {checks: []string{"max-items-added", "max-items-tightened"}},
	"maxLength":     {checks: []string{"max-length-added", "max-length-tightened"}},
	"maxProperties": {checks: []string{"max-properties-added", "max-properties-tightened"}},
	"minimum":       {checks: []string{"minimum-added", "minimum-tightened"}},
	"minItems":      {checks: []string{"min-items-added", "min-items-tightened"}},
	"minLength":     {checks: []string{"min-length-added", "min-length-tightened"}},
	"minProperties": {checks: []string{"min-properties-added", "min-properties-tightened"}},
	// exclusiveMaximum and exclusiveMinimum: fieldwatch folds them into
	// maximum-tightened/-relaxed and minimum-tightened/-relaxed.
	"exclusiveMaximum": {settings: map[string][]string{"additionPolicy": nil, "removalPolicy": nil}},
	"exclusiveMinimum": {settings: map[string][]string{"additionPolicy": nil, "removalPolicy": nil}},
	"description":      {checks: []string{"description-changed"}},
	"format":           {checks: []string{"format-added", "format-changed", "format-removed"}},
	"pattern": {checks: []string{"pattern-added", "pattern-changed"},
		settings: map[string][]string{"removalPolicy": {"pattern-removed"}}},
	"nullable": {settings: map[string][]string{"additionPolicy": {"nullable-added"}, "removalPolicy": {"nullable-removed"}}},
	"oneOf": {checks: []string{"oneof-changed"},
		settings: map[string][]string{"additionPolicy": {"oneof-added"}, "removalPolicy": {"oneof-removed"}}},
	"anyOf": {checks: []string{"anyof-added", "anyof-removed", "anyof-changed"},
		settings: map[string][]string{"additionPolicy": {"anyof-alternatives-added"}}},
	"allOf":       {checks: []string{"allof-added"}, settings: map[string][]string{"additionPolicy": nil}},
	"not":         {checks: []string{"not-added", "not-removed", "not-changed"}},
	"uniqueItems": {checks: []string{"unique-items-added"}},
	"xvalidations": {checks: []string{"validation-rule-changed"},
		settings: map[string][]string{"additionPolicy": {"validation-rule-added"}, "removalPolicy": {"validation-rule-removed"}}},
}

// crdifyCovered is every check some crdify validation covers.
func crdifyCovered() map[string]bool {
	out := map[string]bool{}
	for _, v := range crdifyValidations {
		for _, c := range v.checks {
			out[c] = true
		}
		for _, cs := range v.settings {
			for _, c := range cs {
				out[c] = true
			}
		}
	}
	return out
}

// PolicyError is one error of a PolicySpec: Path is the key it is about
// (checks.enum-values-added, validations[2].enforcement).
type PolicyError struct {
	Path, Msg string
}

func (e PolicyError) Error() string { return e.Path + ": " + e.Msg }

// Compile checks s and returns its Policy; the errors are PolicyErrors.
func (s *PolicySpec) Compile() (*Policy, error) {
	p := &Policy{Severity: map[string]Severity{}, Ignore: map[string]bool{}}
	var errs []error
	fail := func(path, format string, args ...any) {
		errs = append(errs, PolicyError{Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	if len(s.Validations) > 0 || s.UnhandledEnforcement != "" {
		p.crdifyDefaults()
	}
	for i, v := range s.Validations {
		base := "validations[" + strconv.Itoa(i) + "]"
		cv, ok := crdifyValidations[v.Name]
		if !ok {
			fail(base+".name", "unknown crdify validation %q (known: %s)", v.Name, strings.Join(sortedKeys(crdifyValidations), ", "))
			continue
		}
		sev, ignore, err := enforcement(v.Enforcement)
		if err != nil {
			fail(base+".enforcement", "%v", err)
			continue
		}
		set := func(check string, sev Severity) {
			if ignore {
				p.Ignore[check] = true
				return
			}
			delete(p.Ignore, check)
			p.Severity[check] = sev
		}
		for _, c := range cv.checks {
			set(c, sev)
		}
		for _, key := range sortedKeys(cv.settings) {
			allowed := false
			if raw, ok := v.Configuration[key]; ok {
				switch raw {
				case "Allow":
					allowed = true
				case "Disallow":
				default:
					fail(base+".configuration."+key, "must be Allow or Disallow, not %v", raw)
				}
			}
			for _, c := range cv.settings[key] {
				if allowed {
					set(c, Safe)
				} else {
					set(c, sev)
				}
			}
		}
		for _, key := range sortedKeys(v.Configuration) {
			if _, ok := cv.settings[key]; !ok {
				fail(base+".configuration."+key, "the %s validation has no setting %q", v.Name, key)
			}
		}
		if v.Name == "description" {
			p.Descriptions = !ignore
		}
	}
	switch s.UnhandledEnforcement {
	case "", "Error":
	case "Warn", "None":
		covered := crdifyCovered()
		for _, c := range unknownChecks {
			if covered[c] {
				continue
			}
			if s.UnhandledEnforcement == "None" {
				p.Ignore[c] = true
			} else {
				p.Severity[c] = Safe
			}
		}
	default:
		fail("unhandledEnforcement", "must be Error, Warn or None, not %q", s.UnhandledEnforcement)
	}
	switch s.Conversion {
	case "":
		p.WebhookServedVersions = len(s.Validations) > 0 || s.UnhandledEnforcement != ""
	case "None":
		p.WebhookServedVersions = true
	case "Ignore":
		p.WebhookServedVersions = false
	default:
		fail("conversion", "must be None or Ignore, not %q", s.Conversion)
	}
	for _, name := range sortedKeys(s.Checks) {
		path := "checks." + name
		if !slices.Contains(CheckNames, name) {
			fail(path, "unknown check (docs/crd-checks.md lists them)")
			continue
		}
		switch v := s.Checks[name]; v {
		case Ignore:
			p.Ignore[name] = true
			delete(p.Severity, name)
		case string(Breaking), string(Unknown), string(Safe):
			delete(p.Ignore, name)
			p.Severity[name] = Severity(v)
		default:
			fail(path, "must be breaking, unknown, safe or ignore, not %q", v)
		}
		if name == "description-changed" {
			p.Descriptions = !p.Ignore[name]
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return p, nil
}

// unknownChecks are the checks whose default severity is unknown (the
// ones crdify's unhandledEnforcement may apply to).
var unknownChecks = []string{
	"conversion-changed", "status-subresource-added", "scale-subresource-changed", "schema-changed",
	"pattern-changed", "format-changed", "embedded-resource-removed", "list-type-changed",
	"list-map-keys-changed", "map-type-changed", "validation-rule-changed", "anyof-changed", "oneof-changed", "not-changed",
}

// crdifyDefaults sets the severities crdify gives the checks its
// validations cover when nothing configures them: every one breaking,
// descriptions compared, served versions compared whatever the
// conversion.
func (p *Policy) crdifyDefaults() {
	for c := range crdifyCovered() {
		p.Severity[c] = Breaking
	}
	p.Descriptions = true
}

func enforcement(s string) (Severity, bool, error) {
	switch s {
	case "Error":
		return Breaking, false, nil
	case "Warn":
		return Safe, false, nil
	case "None":
		return "", true, nil
	case "":
		return "", false, errors.New("required: Error, Warn or None")
	}
	return "", false, fmt.Errorf("must be Error, Warn or None, not %q", s)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ParsePolicy reads a policy file (YAML or JSON, see PolicySpec) named
// name. Errors carry the file, the line of the key they are about and
// the key's path.
func ParsePolicy(name string, data []byte) (*Policy, error) {
	var spec PolicySpec
	if err := yaml.UnmarshalStrict(data, &spec); err != nil {
		line, msg := yamlErrorLine(err)
		return nil, &fileerr.Error{File: name, Line: line, Msg: msg}
	}
	p, err := spec.Compile()
	if err == nil {
		return p, nil
	}
	var out []error
	for _, e := range unjoin(err) {
		pe, ok := e.(PolicyError)
		if !ok {
			out = append(out, &fileerr.Error{File: name, Msg: e.Error()})
			continue
		}
		fe := &fileerr.Error{File: name, Path: pe.Path, Msg: pe.Msg}
		fe.Line, fe.Col = locateExact(data, splitPath(pe.Path))
		out = append(out, fe)
	}
	return nil, errors.Join(out...)
}

// ReadPolicy reads a policy file (see ParsePolicy).
func ReadPolicy(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParsePolicy(path, data)
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
