package rbac

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/crd/diff"
	"github.com/fieldwatch/fieldwatch/rules"
)

// Options say whom `fieldwatch rbac` grants the permissions to, and what
// the cluster serves.
type Options struct {
	// Name names the ClusterRole and bindings (default fieldwatch).
	Name string
	// Namespace and ServiceAccount are the subject (default fieldwatch,
	// fieldwatch).
	Namespace, ServiceAccount string
	// LeaderElection adds a Role on Leases in Namespace.
	LeaderElection bool
	// HistoryAPI binds the ClusterRole system:auth-delegator (create
	// TokenReviews and SubjectAccessReviews): the history's API and page
	// authenticate and authorize their callers with the apiserver.
	HistoryAPI bool
	// Resources are what discovery sees; with nil (offline), kinds are
	// mapped to resource names by the usual plural rules.
	Resources []change.Resource
	// CRDs are, offline, the custom resources that rules selecting every
	// custom resource (of a group, or of every group) are granted, from
	// CRD manifests (`fieldwatch rbac --offline --crds FILE`). Offline
	// without them such rules are refused: "*" would grant every resource,
	// Secrets included.
	CRDs []change.Resource
	// AllowWildcardPatch allows a rule with a patch action and a wildcard
	// selector (every group, or every kind of a group): its patch grant
	// then covers every resource it matches (Secrets excepted). Without
	// it such a rule is refused.
	AllowWildcardPatch bool
}

// Generate returns the least-privilege ClusterRole and ClusterRoleBinding, a
// Role and RoleBinding in each namespace rules are restricted to, and with
// leader election a Role and RoleBinding for the Lease, that `fieldwatch
// run` needs for set: get, list and watch on what the rules select and on CRDs and
// APIServices (to follow them), create on events.k8s.io Events where an event action is
// used, and patch where a patch action is used.
//
// A wildcard selector never grants "*" where that would include core
// Secrets (which a wildcard does not select, see change.Selector): it is
// granted the resources discovery (or, offline, the CRDs given) shows it
// matches, or refused offline. A patch action of a rule with a wildcard
// selector is refused unless opts.AllowWildcardPatch.
func Generate(set *rules.Set, opts Options) ([]byte, error) {
	if opts.Name == "" {
		opts.Name = "fieldwatch"
	}
	if opts.Namespace == "" {
		opts.Namespace = "fieldwatch"
	}
	if opts.ServiceAccount == "" {
		opts.ServiceAccount = "fieldwatch"
	}
	g := grants{}
	// The watcher follows CRDs and APIServices to rediscover at once when
	// resources come and go.
	g.add([]string{"apiextensions.k8s.io"}, []string{"customresourcedefinitions"}, "get", "list", "watch")
	g.add([]string{"apiregistration.k8s.io"}, []string{"apiservices"}, "get", "list", "watch")
	// A rule restricted to namespaces is granted in those namespaces only
	// (Roles): the watcher then lists and watches there only, unless
	// another rule on the same resource watches every namespace, which the
	// cluster-wide grant of that rule covers.
	inNS := map[string]grants{}
	var errs []error
	for _, r := range set.Rules() {
		var targets []target
		wildcard := false
		for _, s := range r.Selectors {
			ts, err := resolve(s, opts)
			if err != nil {
				errs = append(errs, fmt.Errorf("rule %s (%s): %w", r.Name, r.Source, err))
			}
			targets = append(targets, ts...)
			wildcard = wildcard || isWildcard(s)
		}
		namespaces := r.Namespaces()
		grant := func(t target, resources []string, verbs ...string) {
			if t.cluster || len(namespaces) == 0 {
				g.add(t.groups, resources, verbs...)
				return
			}
			for _, ns := range namespaces {
				if inNS[ns] == nil {
					inNS[ns] = grants{}
				}
				inNS[ns].add(t.groups, resources, verbs...)
			}
		}
		for _, t := range targets {
			grant(t, t.resources, "get", "list", "watch")
		}
		// The custom resources a rule needs for the impact of CRD
		// changes are watched in every namespace.
		for _, s := range r.ImpactSelectors() {
			ts, err := resolve(s, opts)
			if err != nil {
				errs = append(errs, fmt.Errorf("rule %s (%s), crd impact: %w", r.Name, r.Source, err))
			}
			for _, t := range ts {
				g.add(t.groups, t.resources, "get", "list", "watch")
			}
		}
		for _, act := range r.Actions {
			switch {
			case act.Event != nil:
				// Events go to the object's namespace ("default" for
				// cluster-scoped objects).
				grant(target{groups: []string{"events.k8s.io"}}, []string{"events"}, "create")
			case act.Patch != nil:
				if wildcard && !opts.AllowWildcardPatch {
					errs = append(errs, fmt.Errorf("rule %s (%s) has a patch action and a wildcard selector: it would be granted patch on every resource it matches "+
						"(kube-system Deployments, webhook configurations, ...); name its resources, or pass --allow-wildcard-patch to grant that", r.Name, r.Source))
					continue
				}
				for _, t := range targets {
					res := t.resources
					if act.Patch.Subresource != "" {
						res = subresources(res, act.Patch.Subresource)
					}
					grant(t, res, "patch")
				}
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	labels := map[string]string{"app.kubernetes.io/name": "fieldwatch"}
	subject := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: opts.ServiceAccount, Namespace: opts.Namespace}
	docs := []any{
		&rbacv1.ClusterRole{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
			ObjectMeta: metav1.ObjectMeta{Name: opts.Name, Labels: labels},
			Rules:      g.rules(),
		},
		&rbacv1.ClusterRoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: opts.Name, Labels: labels},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: opts.Name},
			Subjects:   []rbacv1.Subject{subject},
		},
	}
	namespaces := make([]string, 0, len(inNS))
	for ns := range inNS {
		namespaces = append(namespaces, ns)
	}
	slices.Sort(namespaces)
	for _, ns := range namespaces {
		docs = append(docs,
			&rbacv1.Role{
				TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
				ObjectMeta: metav1.ObjectMeta{Name: opts.Name, Namespace: ns, Labels: labels},
				Rules:      inNS[ns].rules(),
			},
			&rbacv1.RoleBinding{
				TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
				ObjectMeta: metav1.ObjectMeta{Name: opts.Name, Namespace: ns, Labels: labels},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: opts.Name},
				Subjects:   []rbacv1.Subject{subject},
			})
	}
	if opts.LeaderElection {
		docs = append(docs,
			&rbacv1.Role{
				TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
				ObjectMeta: metav1.ObjectMeta{Name: opts.Name + "-leader-election", Namespace: opts.Namespace, Labels: labels},
				Rules: []rbacv1.PolicyRule{{
					APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
					Verbs: []string{"get", "create", "update"},
				}},
			},
			&rbacv1.RoleBinding{
				TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
				ObjectMeta: metav1.ObjectMeta{Name: opts.Name + "-leader-election", Namespace: opts.Namespace, Labels: labels},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: opts.Name + "-leader-election"},
				Subjects:   []rbacv1.Subject{subject},
			})
	}
	if opts.HistoryAPI {
		docs = append(docs, &rbacv1.ClusterRoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: opts.Name + "-auth-delegator", Labels: labels},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:auth-delegator"},
			Subjects:   []rbacv1.Subject{subject},
		})
	}
	var out bytes.Buffer
	out.WriteString("# Generated by `fieldwatch rbac`: the least privilege these rules need.\n")
	switch {
	case enumerated(set) && opts.Resources != nil:
		out.WriteString("# Wildcard selectors are granted the resources the cluster serves now (Secrets only where\n")
		out.WriteString("# a rule names them): run `fieldwatch rbac` again after installing CRDs of new groups.\n")
	case enumerated(set):
		out.WriteString("# Rules for every custom resource are granted those of the CRDs given (--crds): run\n")
		out.WriteString("# `fieldwatch rbac` against your cluster, or with your CRDs, for the ones it serves.\n")
	}
	for _, d := range docs {
		b, err := yaml.Marshal(d)
		if err != nil {
			return nil, err
		}
		out.WriteString("---\n")
		out.Write(stripCreationTimestamp(b))
	}
	return out.Bytes(), nil
}

// stripCreationTimestamp drops the "creationTimestamp: null" lines that
// marshalling typed objects leaves.
func stripCreationTimestamp(b []byte) []byte {
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(line) != "creationTimestamp: null" {
			out = append(out, line)
		}
	}
	return []byte(strings.Join(out, "\n"))
}

// target is the API groups and resources a selector reaches. cluster is
// set when discovery says they are all cluster-scoped: those are granted
// cluster-wide whatever the rule's namespaces.
type target struct {
	groups, resources []string
	cluster           bool
}

// isWildcard reports whether s selects every group or every kind of a
// group.
func isWildcard(s change.Selector) bool {
	return s.Group == "*" || (s.Resource == "" || s.Resource == "*") && (s.Kind == "" || s.Kind == "*")
}

// resolve maps a selector to groups and resource names. Kinds become the
// resource names discovery gives them. A wildcard selector becomes the
// resources it matches among those discovery sees now (or, offline, among
// the CRDs given, for custom ones), never "*" where that would include
// core Secrets; offline, a wildcard over the core group or every group is
// an error, and one over the kinds of another group stays "*" (no Secrets
// there).
func resolve(s change.Selector, opts Options) ([]target, error) {
	wildGroup := s.Group == "*"
	wildName := (s.Resource == "" || s.Resource == "*") && (s.Kind == "" || s.Kind == "*")
	discovered := opts.Resources
	if (s.Custom && wildGroup) || wildName {
		candidates := discovered
		if candidates == nil { // offline
			switch {
			case s.Custom && opts.CRDs != nil:
				candidates = opts.CRDs
			case s.Custom && (wildGroup || s.Group == ""):
				return nil, fmt.Errorf("selects every custom resource%s: offline, fieldwatch does not know them, and \"*\" would grant every resource, Secrets included; "+
					"run `fieldwatch rbac` against the cluster, or give the CRDs with --crds FILE", groupText(s.Group))
			case wildGroup || s.Group == "":
				return nil, fmt.Errorf("selects every resource%s: offline, \"*\" would grant Secrets too; run `fieldwatch rbac` against the cluster", groupText(s.Group))
			default:
				// Every kind of one group other than the core group: no
				// Secrets there.
				t := target{groups: []string{s.Group}, resources: []string{"*"}}
				return []target{t}, nil
			}
		}
		var out []target
		seen := map[[2]string]bool{}
		anyVersion := s // permissions do not depend on the version
		anyVersion.Version = "*"
		for _, r := range candidates {
			k := [2]string{r.Group, r.Resource}
			if seen[k] || strings.Contains(r.Resource, "/") || !anyVersion.Matches(r) {
				continue
			}
			seen[k] = true
			out = append(out, target{groups: []string{r.Group}, resources: []string{r.Resource}, cluster: !r.Namespaced})
		}
		return out, nil
	}
	t := target{groups: []string{s.Group}}
	switch {
	case s.Resource != "" && s.Resource != "*":
		t.resources = []string{s.Resource}
	case s.Kind != "" && s.Kind != "*":
		for _, r := range discovered {
			if r.Kind == s.Kind && (wildGroup || r.Group == s.Group) && !slices.Contains(t.resources, r.Resource) {
				t.resources = append(t.resources, r.Resource)
			}
		}
		if len(t.resources) == 0 {
			// Not served (yet): the conventional plural.
			plural, _ := meta.UnsafeGuessKindToResource(schema.GroupVersionKind{Kind: s.Kind})
			t.resources = []string{plural.Resource}
		}
	default:
		t.resources = []string{"*"} // not reached: wildcards are resolved above
	}
	t.cluster = clusterScoped(t, discovered)
	return []target{t}, nil
}

// groupText names a selector's group for an error.
func groupText(group string) string {
	switch group {
	case "*":
		return " of every group"
	case "":
		return " of the core group"
	}
	return " of group " + group
}

// clusterScoped reports whether discovery knows every resource of t and
// each is cluster-scoped.
func clusterScoped(t target, discovered []change.Resource) bool {
	for _, name := range t.resources {
		found := false
		for _, r := range discovered {
			if r.Resource == name && (t.groups[0] == "*" || r.Group == t.groups[0]) {
				if r.Namespaced {
					return false
				}
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return len(t.resources) > 0
}

// enumerated reports whether set has a wildcard selector, which is
// granted what discovery (or the CRDs given) shows it matches.
func enumerated(set *rules.Set) bool {
	for _, r := range set.Rules() {
		for _, s := range append(slices.Clone(r.Selectors), r.ImpactSelectors()...) {
			if isWildcard(s) {
				return true
			}
		}
	}
	return false
}

func subresources(resources []string, sub string) []string {
	out := make([]string, len(resources))
	for i, r := range resources {
		out[i] = r + "/" + sub
	}
	return out
}

// grants collects verbs per (group, resource) and renders them as few
// policy rules.
type grants map[[2]string]map[string]bool

func (g grants) add(groups, resources []string, verbs ...string) {
	for _, grp := range groups {
		for _, res := range resources {
			k := [2]string{grp, res}
			if g[k] == nil {
				g[k] = map[string]bool{}
			}
			for _, v := range verbs {
				g[k][v] = true
			}
		}
	}
}

// rules groups the grants by API group and verb set.
func (g grants) rules() []rbacv1.PolicyRule {
	type ruleKey struct{ group, verbs string }
	byKey := map[ruleKey][]string{}
	for k, verbs := range g {
		vs := make([]string, 0, len(verbs))
		for v := range verbs {
			vs = append(vs, v)
		}
		slices.Sort(vs)
		rk := ruleKey{k[0], strings.Join(vs, ",")}
		byKey[rk] = append(byKey[rk], k[1])
	}
	keys := make([]ruleKey, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b ruleKey) int {
		return strings.Compare(a.group+"\x00"+a.verbs, b.group+"\x00"+b.verbs)
	})
	out := make([]rbacv1.PolicyRule, 0, len(keys))
	for _, k := range keys {
		res := byKey[k]
		slices.Sort(res)
		out = append(out, rbacv1.PolicyRule{APIGroups: []string{k.group}, Resources: res, Verbs: strings.Split(k.verbs, ",")})
	}
	return out
}

// CRDResources reads CustomResourceDefinition manifests (files, or every
// *.yaml, *.yml and *.json file under a directory; Lists such as `kubectl
// get crd -o yaml` writes included) and returns the custom resources they
// define, one per served version, for Options.CRDs.
func CRDResources(paths ...string) ([]change.Resource, error) {
	docs, err := diff.ReadCRDs(paths...)
	if err != nil {
		return nil, err
	}
	var out []change.Resource
	for _, d := range docs {
		crd := d.CRD
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			out = append(out, change.Resource{
				Group: crd.Spec.Group, Version: v.Name, Resource: crd.Spec.Names.Plural, Kind: crd.Spec.Names.Kind,
				Namespaced: crd.Spec.Scope == apiextensionsv1.NamespaceScoped, Custom: true, Preferred: v.Storage,
			})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no served version of a CustomResourceDefinition in %s", strings.Join(paths, ", "))
	}
	return out, nil
}
