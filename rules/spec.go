package rules

import (
	"errors"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/fieldwatch/fieldwatch/crd/diff"
	"github.com/fieldwatch/fieldwatch/internal/yamlstrict"
)

// The schema of a rules file, as written: plain structs with yaml and json
// tags. Load and Parse decode a file into a File; Compile turns a File into
// a Set. docs/rules.md documents every key for users.

// File is a rules file.
type File struct {
	Rules []RuleSpec `yaml:"rules" json:"rules"`
	// Metrics is the file's metrics section, as written: package
	// fieldmetrics reads it (docs/metrics-from-fields.md), rules does not.
	Metrics *yaml.Node `yaml:"metrics" json:"-"`
}

// RuleSpec is one rule as written.
type RuleSpec struct {
	// Name is required and unique across all files.
	Name        string `yaml:"name" json:"name"`
	Description string `yaml:"description,omitempty" json:"description,omitempty"`
	// Match is required.
	Match *MatchSpec `yaml:"match" json:"match"`
	// On lists create, update and delete; nil means all three (an empty,
	// non-nil list is an error).
	On           []string    `yaml:"on,omitempty" json:"on,omitempty"`
	Fields       []FieldSpec `yaml:"fields,omitempty" json:"fields,omitempty"`
	IgnoreFields []string    `yaml:"ignoreFields,omitempty" json:"ignoreFields,omitempty"`
	// When is a CEL expression; "" means none.
	When          Expression `yaml:"when,omitempty" json:"when,omitempty"`
	IncludeObject bool       `yaml:"includeObject,omitempty" json:"includeObject,omitempty"`
	Redact        []string   `yaml:"redact,omitempty" json:"redact,omitempty"`
	// CRD, for rules that match CustomResourceDefinitions only, puts the
	// comparison of the old and new CRD into the payload (nil: only when
	// the when expression reads crd).
	CRD *CRDSpec `yaml:"crd,omitempty" json:"crd,omitempty"`
	// History says what the history keeps besides the rule's firings
	// (nil: nothing more).
	History *HistorySpec `yaml:"history,omitempty" json:"history,omitempty"`
	// Actions are required: at least one.
	Actions []Action `yaml:"actions" json:"actions"`
}

// MatchSpec is a rule's match: which resources and objects it watches.
type MatchSpec struct {
	Resources         []SelectorSpec `yaml:"resources" json:"resources"`
	Custom            bool           `yaml:"custom,omitempty" json:"custom,omitempty"`
	Namespaces        []string       `yaml:"namespaces,omitempty" json:"namespaces,omitempty"`
	ExcludeNamespaces []string       `yaml:"excludeNamespaces,omitempty" json:"excludeNamespaces,omitempty"`
	LabelSelector     string         `yaml:"labelSelector,omitempty" json:"labelSelector,omitempty"`
	Names             []string       `yaml:"names,omitempty" json:"names,omitempty"`
	// Users and ExcludeUsers select changes by who made them, as the
	// Kubernetes audit stream tells (fieldwatch run with an audit source):
	// globs on the username, "group:GLOB" on the groups.
	Users        []string `yaml:"users,omitempty" json:"users,omitempty"`
	ExcludeUsers []string `yaml:"excludeUsers,omitempty" json:"excludeUsers,omitempty"`
}

// CRDSpec is a rule's crd key: what a rule on CustomResourceDefinitions
// gets of the comparison of the old and the new CRD (package
// crd/diff), in its payload and as the CEL variable crd.
type CRDSpec struct {
	// Impact asks for the custom resources each breaking check of an
	// update hits (package crd/impact). The caller of Eval computes
	// it (Set.WantsCRDImpact says when); `fieldwatch run` also watches
	// the custom resources of the CRDs such a rule matches, and caches
	// them whole, so that it has them as they were before the change.
	Impact bool `yaml:"impact,omitempty" json:"impact,omitempty"`
	// Policy reports the checks with other severities, or not at all
	// (diff.PolicySpec: fieldwatch's checks map or crdify's
	// configuration); the impact is dropped for checks it makes safe.
	Policy *diff.PolicySpec `yaml:"policy,omitempty" json:"policy,omitempty"`
}

// HistorySpec is a rule's history key.
type HistorySpec struct {
	// States makes the history keep, for every object the rule's match
	// selects, the state fieldwatch first saw and every change after it,
	// whatever the rule fires on (Set.State), so that the object can be
	// rebuilt as it was at any time. It needs the whole object: the
	// watcher caches it whole.
	States bool `yaml:"states,omitempty" json:"states,omitempty"`
}

// SelectorSpec is one entry of match.resources.
type SelectorSpec struct {
	// Group is required: nil is an error rather than silently the core
	// group ("").
	Group    *string `yaml:"group" json:"group"`
	Version  string  `yaml:"version,omitempty" json:"version,omitempty"`
	Kind     string  `yaml:"kind,omitempty" json:"kind,omitempty"`
	Resource string  `yaml:"resource,omitempty" json:"resource,omitempty"`
}

// FieldSpec is one entry of a rule's fields. In YAML it may be written as
// its path alone.
type FieldSpec struct {
	Path string `yaml:"path" json:"path"`
	// From and To are conditions on the old and new value when set; a
	// pointer to nil is the condition "null or absent".
	From    *any `yaml:"from,omitempty" json:"from,omitempty"`
	To      *any `yaml:"to,omitempty" json:"to,omitempty"`
	Added   bool `yaml:"added,omitempty" json:"added,omitempty"`
	Removed bool `yaml:"removed,omitempty" json:"removed,omitempty"`
}

// YAMLShorthand lets a field be written as its path alone
// (yamlstrict.Shorthand).
func (*FieldSpec) YAMLShorthand() string { return "path" }

// Expression is a CEL expression. In YAML it must be written as a
// string, and not an empty one (leave the key out instead).
type Expression string

// UnmarshalYAML implements yaml.Unmarshaler: it accepts a non-blank
// string scalar only.
func (e *Expression) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return errors.New("must be a CEL expression string, not " + yamlstrict.Describe(n))
	}
	if strings.TrimSpace(n.Value) == "" {
		return errors.New("empty expression (leave when out instead)")
	}
	*e = Expression(n.Value)
	return nil
}
