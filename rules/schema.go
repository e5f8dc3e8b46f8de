package rules

import "gopkg.in/yaml.v3"

// The YAML schema of a rules file, as written. The loader decodes a file
// into these, then compiles each ruleSpec into a Rule. doc.go documents
// every key for users.

type fileSpec struct {
	Rules []ruleSpec `yaml:"rules"`
}

type ruleSpec struct {
	Name          string      `yaml:"name"`
	Description   string      `yaml:"description"`
	Match         *matchSpec  `yaml:"match"`
	On            []string    `yaml:"on"`
	Fields        []fieldSpec `yaml:"fields"`
	IgnoreFields  []string    `yaml:"ignoreFields"`
	When          *yaml.Node  `yaml:"when"`
	IncludeObject bool        `yaml:"includeObject"`
	Redact        []string    `yaml:"redact"`
	Actions       []Action    `yaml:"actions"`
}

type matchSpec struct {
	Resources         []selectorSpec `yaml:"resources"`
	Custom            bool           `yaml:"custom"`
	Namespaces        []string       `yaml:"namespaces"`
	ExcludeNamespaces []string       `yaml:"excludeNamespaces"`
	LabelSelector     string         `yaml:"labelSelector"`
	Names             []string       `yaml:"names"`
}

type selectorSpec struct {
	// Group is a pointer so that a missing group (which would silently
	// mean the core group) is an error.
	Group    *string `yaml:"group"`
	Version  string  `yaml:"version"`
	Kind     string  `yaml:"kind"`
	Resource string  `yaml:"resource"`
}

type fieldSpec struct {
	Path    string     `yaml:"path"`
	From    *yaml.Node `yaml:"from"`
	To      *yaml.Node `yaml:"to"`
	Added   bool       `yaml:"added"`
	Removed bool       `yaml:"removed"`
}

// shorthandKey lets a field be written as its path alone.
func (*fieldSpec) shorthandKey() string { return "path" }
