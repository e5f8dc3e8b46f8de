package watcher

import (
	"fmt"
	"path"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Resource is one API resource the cluster serves, at one version.
type Resource struct {
	schema.GroupVersionResource
	// Kind is the kind of the resource's objects, such as ConfigMap.
	Kind string
	// Namespaced is true for namespaced resources.
	Namespaced bool
	// Custom is true when a CustomResourceDefinition serves the resource.
	Custom bool
	// Preferred is true when Version is the version discovery prefers for
	// this resource.
	Preferred bool
}

// String returns the resource as "resource.version.group" (kubectl's form).
func (r Resource) String() string {
	if r.Group == "" {
		return r.Resource + "." + r.Version
	}
	return r.Resource + "." + r.Version + "." + r.Group
}

// Selector picks resources. Empty fields match everything, "*" too, and any
// field may be a glob (path.Match syntax). Group "" means the core group only
// when Core is set; otherwise it matches any group.
type Selector struct {
	// Group is the API group; "" with Core means the core group.
	Group string
	// Core makes an empty Group mean the core ("") group.
	Core bool
	// Version is the version to watch; "" means the preferred version.
	Version string
	// Kind matches the resource's kind.
	Kind string
	// Resource matches the resource's plural name.
	Resource string
	// Custom restricts the selector to CRD-backed resources.
	Custom bool
}

// All selects every resource the cluster serves, at its preferred version.
var All = []Selector{{}}

// AllCustom selects every CRD-backed resource at its preferred version.
var AllCustom = []Selector{{Custom: true}}

// Validate checks the globs of s.
func (s Selector) Validate() error {
	for _, pattern := range []string{s.Group, s.Version, s.Kind, s.Resource} {
		if _, err := path.Match(pattern, ""); err != nil {
			return fmt.Errorf("selector %+v: bad pattern %q: %w", s, pattern, err)
		}
	}
	return nil
}

// Matches reports whether s selects r.
func (s Selector) Matches(r Resource) bool {
	if s.Custom && !r.Custom {
		return false
	}
	switch {
	case s.Group == "" && s.Core:
		if r.Group != "" {
			return false
		}
	case !glob(s.Group, r.Group):
		return false
	}
	switch s.Version {
	case "":
		if !r.Preferred {
			return false
		}
	default:
		if !glob(s.Version, r.Version) {
			return false
		}
	}
	return glob(s.Kind, r.Kind) && glob(s.Resource, r.Resource)
}

// glob matches value against pattern; "" and "*" match anything.
func glob(pattern, value string) bool {
	if pattern == "" || pattern == "*" {
		return true
	}
	ok, err := path.Match(pattern, value)
	return err == nil && ok
}

// selected reports whether any selector selects r.
func selected(sels []Selector, r Resource) bool {
	for _, s := range sels {
		if s.Matches(r) {
			return true
		}
	}
	return false
}
