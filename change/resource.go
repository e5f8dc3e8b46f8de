package change

// Resource is one API resource the cluster serves, at one version, with
// what discovery says about it.
type Resource struct {
	// Group is the API group; "" is the core group.
	Group string
	// Version is the API version, such as v1.
	Version string
	// Resource is the plural resource name: widgets, pods.
	Resource string
	// Kind is the kind of the resource's objects, such as ConfigMap.
	Kind string
	// Namespaced is true for namespaced resources.
	Namespaced bool
	// Custom is true when a CustomResourceDefinition serves the resource.
	Custom bool
	// Preferred is true when Version is the version discovery prefers for
	// the resource. Selectors with version "" select only such resources,
	// so that a resource watched at two versions does not fire a rule
	// twice.
	Preferred bool
}

// String returns the resource as "resource.version.group" (kubectl's
// form; "resource.version" in the core group).
func (r Resource) String() string {
	if r.Group == "" {
		return r.Resource + "." + r.Version
	}
	return r.Resource + "." + r.Version + "." + r.Group
}

// APIVersion returns the apiVersion of the resource's objects: "v1" in
// the core group, "group/version" elsewhere.
func (r Resource) APIVersion() string {
	if r.Group == "" {
		return r.Version
	}
	return r.Group + "/" + r.Version
}
