package change

// Selector selects resources by group, version, kind and plural resource
// name, as a rule's match.resources entry says:
//
//   - Group "" is the core group; "*" is any group.
//   - Version "" is the preferred version (Resource.Preferred); "*" is any
//     version.
//   - Kind and Resource "" or "*" match any kind or resource.
//   - Any other value matches itself only (case-sensitive).
//   - Custom limits the selector to resources a CustomResourceDefinition
//     serves.
//   - Core Secrets are matched only by a selector that names them (Kind
//     "Secret" or Resource "secrets"): a wildcard never covers them, so
//     that no rule (nor the RBAC granted for it) reads Secrets by accident.
type Selector struct {
	Group, Version, Kind, Resource string
	Custom                         bool
}

// Matches reports whether s selects r.
func (s Selector) Matches(r Resource) bool {
	return (s.Group == "*" || s.Group == r.Group) &&
		(s.Version == "*" || s.Version == r.Version || (s.Version == "" && r.Preferred)) &&
		anyOr(s.Kind, r.Kind) &&
		anyOr(s.Resource, r.Resource) &&
		(!s.Custom || r.Custom) &&
		(r.Group != "" || r.Resource != "secrets" || s.NamesSecrets())
}

// NamesSecrets reports whether s names Secrets (Kind "Secret" or Resource
// "secrets") rather than reaching them through a wildcard.
func (s Selector) NamesSecrets() bool {
	return (s.Group == "" || s.Group == "*") && (s.Kind == "Secret" || s.Resource == "secrets")
}

// anyOr matches a kind or resource field: "" and "*" match anything.
func anyOr(pattern, value string) bool {
	return pattern == "" || pattern == "*" || pattern == value
}

// Selected reports whether any of sels selects r.
func Selected(sels []Selector, r Resource) bool {
	for _, s := range sels {
		if s.Matches(r) {
			return true
		}
	}
	return false
}
