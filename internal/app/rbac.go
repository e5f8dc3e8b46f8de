package app

import (
	"bytes"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/rules"
)

// RBACOptions say whom `fieldwatch rbac` grants the permissions to.
type RBACOptions struct {
	// Name names the ClusterRole and bindings (default fieldwatch).
	Name string
	// Namespace and ServiceAccount are the subject (default fieldwatch,
	// fieldwatch).
	Namespace, ServiceAccount string
	// LeaderElection adds a Role on Leases in Namespace.
	LeaderElection bool
	// Resources are what discovery sees; with nil, kinds are mapped to
	// resource names by the usual plural rules.
	Resources []change.Resource
}

// RBAC returns the least-privilege ClusterRole and ClusterRoleBinding, a
// Role and RoleBinding in each namespace rules are restricted to, and with
// leader election a Role and RoleBinding for the Lease, that `fieldwatch
// run` needs for set: get, list and watch on what the rules select and on CRDs and
// APIServices (to follow them), create on events.k8s.io Events where an event action is
// used, and patch where a patch action is used.
func RBAC(set *rules.Set, opts RBACOptions) ([]byte, error) {
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
	for _, r := range set.Rules() {
		var targets []target
		for _, s := range r.Selectors {
			targets = append(targets, resolve(s, opts.Resources)...)
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
			for _, t := range resolve(s, opts.Resources) {
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
	var out bytes.Buffer
	out.WriteString("# Generated by `fieldwatch rbac`: the least privilege these rules need.\n")
	if enumerated(set, opts.Resources) {
		out.WriteString("# Rules for every custom resource are granted the custom resources served now:\n")
		out.WriteString("# run `fieldwatch rbac` again after installing CRDs of new groups.\n")
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

// resolve maps a selector to groups and resource names. Kinds become the
// resource names discovery gives them. A wildcard selector of custom
// resources becomes the custom resources discovery sees now, rather than
// every resource (secrets included); without discovery, and for other
// wildcards, the wildcard stays.
func resolve(s change.Selector, discovered []change.Resource) []target {
	wildGroup := s.Group == "*"
	wildName := (s.Resource == "" || s.Resource == "*") && (s.Kind == "" || s.Kind == "*")
	if s.Custom && (wildGroup || wildName) && discovered != nil {
		var out []target
		seen := map[[2]string]bool{}
		anyVersion := s // permissions do not depend on the version
		anyVersion.Version = "*"
		for _, r := range discovered {
			k := [2]string{r.Group, r.Resource}
			if !r.Custom || seen[k] || !anyVersion.Matches(r) {
				continue
			}
			seen[k] = true
			out = append(out, target{groups: []string{r.Group}, resources: []string{r.Resource}, cluster: !r.Namespaced})
		}
		return out
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
		t.resources = []string{"*"}
	}
	t.cluster = clusterScoped(t, discovered)
	return []target{t}
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

// enumerated reports whether a wildcard custom selector was resolved
// through discovery.
func enumerated(set *rules.Set, discovered []change.Resource) bool {
	if discovered == nil {
		return false
	}
	for _, r := range set.Rules() {
		for _, s := range append(slices.Clone(r.Selectors), r.ImpactSelectors()...) {
			if s.Custom && (s.Group == "*" || (s.Resource == "" || s.Resource == "*") && (s.Kind == "" || s.Kind == "*")) {
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
