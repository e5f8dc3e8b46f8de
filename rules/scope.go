package rules

import (
	"fmt"
	"slices"
	"strings"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/fileerr"
	"github.com/fieldwatch/fieldwatch/internal/yamlstrict"
)

// matchPositions are where a rule's match, its match.resources entries
// and its match.namespaces entries were written (only the field path for
// rules given to Compile).
type matchPositions struct {
	match      fileerr.Error
	resources  []fileerr.Error
	namespaces []fileerr.Error
}

// place sets the file and the line and column of each position.
func (m *matchPositions) place(file string, pos *yamlstrict.Positions) {
	for _, e := range m.all() {
		e.File = file
		e.Line, e.Col = pos.At(e.Path)
	}
}

func (m *matchPositions) all() []*fileerr.Error {
	out := []*fileerr.Error{&m.match}
	for i := range m.resources {
		out = append(out, &m.resources[i])
	}
	for i := range m.namespaces {
		out = append(out, &m.namespaces[i])
	}
	return out
}

// at returns an error at position e with message msg.
func at(e fileerr.Error, format string, args ...any) *fileerr.Error {
	e.Msg = fmt.Sprintf(format, args...)
	return &e
}

// Namespaced describes a namespaced install (`fieldwatch run
// --namespaces`): fieldwatch may read only in Namespaces, through Roles,
// and reads no cluster-scoped resource.
type Namespaced struct {
	// Namespaces are the namespaces fieldwatch watches. A rule without
	// match.namespaces watches all of them.
	Namespaces []string
	// Resources are what the cluster serves (discovery), to tell which
	// selectors select cluster-scoped resources only; nil offline, when
	// the built-in ones (BuiltinClusterScoped) tell.
	Resources []change.Resource
}

// CheckNamespaced returns nil when s can run in the namespaced install n,
// else a fileerr.List with every rule entry that reaches outside it, each
// at the place it was written:
//
//   - a match.namespaces entry that is not one of n.Namespaces;
//   - a match.resources entry that selects cluster-scoped resources only
//     (Namespaces, Nodes, ClusterRoles, CustomResourceDefinitions...), as
//     ClusterScoped says: reading them needs a ClusterRole.
//
// A wildcard entry (every kind of a group, every custom resource) is not
// refused: it selects the namespaced resources it matches, in
// n.Namespaces.
func (s *Set) CheckNamespaced(n Namespaced) error {
	var errs fileerr.List
	list := strings.Join(n.Namespaces, ",")
	for _, r := range s.rules {
		for i, ns := range r.filter.namespaces {
			if !slices.Contains(n.Namespaces, ns) && i < len(r.where.namespaces) {
				errs = append(errs, at(r.where.namespaces[i],
					"namespace %q is not watched: fieldwatch runs namespaced (--namespaces %s) and may read nothing outside those namespaces", ns, list))
			}
		}
		for i, sel := range r.Selectors {
			if ClusterScoped(sel, n.Resources) && i < len(r.where.resources) {
				errs = append(errs, at(r.where.resources[i],
					"%s is cluster-scoped: fieldwatch runs namespaced (--namespaces %s) and watches namespaced resources only; reading it needs a ClusterRole, so run fieldwatch cluster-wide for this rule",
					selectorText(sel), list))
			}
		}
	}
	return errs.Err()
}

// selectorText names what a selector selects, for an error.
func selectorText(s change.Selector) string {
	name := s.Kind
	if name == "" || name == "*" {
		name = s.Resource
	}
	switch s.Group {
	case "":
		return name
	case "*":
		return name + " (every group)"
	}
	return name + " (" + s.Group + ")"
}

// ClusterScoped reports whether sel selects cluster-scoped resources only.
// resources are what the cluster serves: sel is cluster-scoped when it
// matches some of them (at any version) and each is cluster-scoped. When
// it matches none of them (not served yet, or resources is nil offline),
// a selector that names its kind or resource is cluster-scoped when it
// matches one of BuiltinClusterScoped; a wildcard one is not.
func ClusterScoped(sel change.Selector, resources []change.Resource) bool {
	anyVersion := sel
	anyVersion.Version = "*"
	matched := false
	for _, r := range resources {
		if strings.Contains(r.Resource, "/") || !anyVersion.Matches(r) {
			continue
		}
		if r.Namespaced {
			return false
		}
		matched = true
	}
	if matched {
		return true
	}
	if (sel.Kind == "" || sel.Kind == "*") && (sel.Resource == "" || sel.Resource == "*") {
		return false
	}
	for _, r := range BuiltinClusterScoped {
		if anyVersion.Matches(r) {
			return true
		}
	}
	return false
}

// BuiltinClusterScoped are the cluster-scoped resources kube-apiserver
// itself serves that can be listed and watched (Kubernetes 1.37, alpha
// and beta APIs included), at version "*": what `fieldwatch validate
// --namespaces` refuses without asking a cluster. A test holds it to the
// resources a real kube-apiserver serves.
var BuiltinClusterScoped = []change.Resource{
	builtin("", "namespaces", "Namespace"),
	builtin("", "nodes", "Node"),
	builtin("", "persistentvolumes", "PersistentVolume"),
	builtin("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "MutatingWebhookConfiguration"),
	builtin("admissionregistration.k8s.io", "validatingwebhookconfigurations", "ValidatingWebhookConfiguration"),
	builtin("admissionregistration.k8s.io", "mutatingadmissionpolicies", "MutatingAdmissionPolicy"),
	builtin("admissionregistration.k8s.io", "mutatingadmissionpolicybindings", "MutatingAdmissionPolicyBinding"),
	builtin("admissionregistration.k8s.io", "validatingadmissionpolicies", "ValidatingAdmissionPolicy"),
	builtin("admissionregistration.k8s.io", "validatingadmissionpolicybindings", "ValidatingAdmissionPolicyBinding"),
	builtin("apiextensions.k8s.io", "customresourcedefinitions", "CustomResourceDefinition"),
	builtin("apiregistration.k8s.io", "apiservices", "APIService"),
	builtin("certificates.k8s.io", "certificatesigningrequests", "CertificateSigningRequest"),
	builtin("certificates.k8s.io", "clustertrustbundles", "ClusterTrustBundle"),
	builtin("flowcontrol.apiserver.k8s.io", "flowschemas", "FlowSchema"),
	builtin("flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations", "PriorityLevelConfiguration"),
	builtin("internal.apiserver.k8s.io", "storageversions", "StorageVersion"),
	builtin("networking.k8s.io", "ingressclasses", "IngressClass"),
	builtin("networking.k8s.io", "ipaddresses", "IPAddress"),
	builtin("networking.k8s.io", "servicecidrs", "ServiceCIDR"),
	builtin("node.k8s.io", "runtimeclasses", "RuntimeClass"),
	builtin("rbac.authorization.k8s.io", "clusterroles", "ClusterRole"),
	builtin("rbac.authorization.k8s.io", "clusterrolebindings", "ClusterRoleBinding"),
	builtin("resource.k8s.io", "deviceclasses", "DeviceClass"),
	builtin("resource.k8s.io", "devicetaintrules", "DeviceTaintRule"),
	builtin("resource.k8s.io", "resourceslices", "ResourceSlice"),
	builtin("scheduling.k8s.io", "priorityclasses", "PriorityClass"),
	builtin("storage.k8s.io", "csidrivers", "CSIDriver"),
	builtin("storage.k8s.io", "csinodes", "CSINode"),
	builtin("storage.k8s.io", "storageclasses", "StorageClass"),
	builtin("storage.k8s.io", "volumeattachments", "VolumeAttachment"),
	builtin("storage.k8s.io", "volumeattributesclasses", "VolumeAttributesClass"),
	builtin("storagemigration.k8s.io", "storageversionmigrations", "StorageVersionMigration"),
}

func builtin(group, resource, kind string) change.Resource {
	return change.Resource{Group: group, Version: "*", Resource: resource, Kind: kind}
}
