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
	// Namespaces, when set, ask for the RBAC of a namespaced install
	// (`fieldwatch run --namespaces`): Roles in these namespaces only,
	// and no ClusterRole but that of ReadCRDs. A rule without
	// match.namespaces is granted in each of them; a wildcard selector
	// its namespaced resources only; rules that name another namespace
	// or select cluster-scoped resources are refused
	// (rules.Set.CheckNamespaced).
	Namespaces []string
	// AdmissionCerts adds what fieldwatch needs to keep its admission
	// webhook's serving certificate itself (fieldwatch run
	// --admission-cert-secret): read the Secrets of Namespace and update
	// <Name>-admission-tls, read ValidatingWebhookConfigurations and update
	// <Name>'s caBundle. The chart adds the same when it runs admission
	// with admission.certificate.source fieldwatch.
	AdmissionCerts bool
	// CRDGuard adds what fieldwatch's CRD guard needs (fieldwatch run
	// --admission-addr, whose --crd-guard is warn by default): list on the
	// custom resources of every CRD it may review, cluster-wide, those
	// discovery shows (offline, those of CRDs). The guard reads a CRD's
	// objects to count what a change strands; a CRD the grant misses
	// (installed later, or not given offline) is listed as forbidden, and
	// its reviews say the check is incomplete. Not with Namespaces: the
	// guard reviews cluster-scoped CRDs.
	CRDGuard bool
	// ReadCRDs adds to a namespaced install's RBAC a ClusterRole that
	// reads CustomResourceDefinitions, its only cluster-wide right: the
	// watcher then follows CRDs as they come and go at once (instead of
	// at its periodic discovery) and tells custom resources by their
	// CRDs rather than by their group names.
	ReadCRDs bool
	// Metrics are the resources the metrics from fields read
	// (fieldmetrics.Set.Resources): granted get, list and watch in every
	// namespace (of Namespaces, for a namespaced install).
	Metrics []change.Selector
}

// Permissions are the RBAC rules `fieldwatch run` needs for a rules Set:
// Compute makes them; Manifests and HelmValues write them out.
type Permissions struct {
	// Cluster are the rules of the ClusterRole: cluster-wide reads (and
	// writes), and following CRDs and APIServices. In a namespaced
	// install only the CRD read of Options.ReadCRDs, if asked.
	Cluster []rbacv1.PolicyRule
	// Namespaced are the rules of the Role in each namespace: rules
	// restricted to namespaces are granted there only.
	Namespaced map[string][]rbacv1.PolicyRule
	// notes are the comment lines that say what the grants rest on.
	notes []string
}

// Generate returns the least-privilege ClusterRole and ClusterRoleBinding, a
// Role and RoleBinding in each namespace rules are restricted to, and with
// leader election a Role and RoleBinding for the Lease, that `fieldwatch
// run` needs for set: get, list and watch on what the rules select and on CRDs and
// APIServices (to follow them), create on events.k8s.io Events where an event action is
// used, and patch where a patch action is used. With opts.Namespaces, the
// RBAC of a namespaced install: Roles in those namespaces, and a
// ClusterRole only to read CRDs (opts.ReadCRDs).
//
// A wildcard selector never grants "*" where that would include core
// Secrets (which a wildcard does not select, see change.Selector): it is
// granted the resources discovery (or, offline, the CRDs given) shows it
// matches, or refused offline. A patch action of a rule with a wildcard
// selector is refused unless opts.AllowWildcardPatch.
func Generate(set *rules.Set, opts Options) ([]byte, error) {
	p, err := Compute(set, opts)
	if err != nil {
		return nil, err
	}
	return p.Manifests(opts)
}

// withDefaults fills in the names opts leaves empty.
func (opts Options) withDefaults() Options {
	if opts.Name == "" {
		opts.Name = "fieldwatch"
	}
	if opts.Namespace == "" {
		opts.Namespace = "fieldwatch"
	}
	if opts.ServiceAccount == "" {
		opts.ServiceAccount = "fieldwatch"
	}
	return opts
}

// readCRDs are the rules that let the watcher follow CRDs.
var readCRDs = []string{"get", "list", "watch"}

// Compute returns the permissions that `fieldwatch run` needs for set (see
// Generate), or every error of the rules that cannot be granted.
func Compute(set *rules.Set, opts Options) (*Permissions, error) {
	opts = opts.withDefaults()
	namespaced := len(opts.Namespaces) > 0
	if namespaced {
		resources := opts.Resources
		if resources == nil {
			resources = opts.CRDs
		}
		if err := set.CheckNamespaced(rules.Namespaced{Namespaces: opts.Namespaces, Resources: resources}); err != nil {
			return nil, err
		}
	}
	if namespaced && opts.CRDGuard {
		return nil, errors.New("the CRD guard reviews CRDs, cluster-wide: a namespaced install (--namespaces) runs without it (fieldwatch run --crd-guard off)")
	}
	g := grants{}
	switch {
	case !namespaced:
		// The watcher follows CRDs and APIServices to rediscover at once
		// when resources come and go.
		g.add([]string{"apiextensions.k8s.io"}, []string{"customresourcedefinitions"}, readCRDs...)
		g.add([]string{"apiregistration.k8s.io"}, []string{"apiservices"}, "get", "list", "watch")
	case opts.ReadCRDs:
		g.add([]string{"apiextensions.k8s.io"}, []string{"customresourcedefinitions"}, readCRDs...)
	}
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
		if namespaced {
			// CheckNamespaced refused the selectors of cluster-scoped
			// resources: these are what wildcards match, which a
			// namespaced watcher does not watch.
			targets = slices.DeleteFunc(targets, func(t target) bool { return t.cluster })
		}
		namespaces := r.Namespaces()
		if len(namespaces) == 0 {
			namespaces = opts.Namespaces // nil: every namespace
		}
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
		// changes are watched in every namespace (such a rule selects
		// CRDs: a namespaced install refused it above).
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
	for _, s := range opts.Metrics {
		ts, err := resolve(s, opts)
		if err != nil {
			errs = append(errs, fmt.Errorf("metrics of %s: %w", metricsText(s), err))
		}
		for _, t := range ts {
			switch {
			case !namespaced:
				g.add(t.groups, t.resources, "get", "list", "watch")
			case !t.cluster:
				for _, ns := range opts.Namespaces {
					if inNS[ns] == nil {
						inNS[ns] = grants{}
					}
					inNS[ns].add(t.groups, t.resources, "get", "list", "watch")
				}
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var guardNote []string
	if opts.CRDGuard {
		guardNote = grantGuard(g, opts)
	}
	p := &Permissions{Cluster: g.rules(), Namespaced: map[string][]rbacv1.PolicyRule{}}
	for ns, gr := range inNS {
		p.Namespaced[ns] = gr.rules()
	}
	switch {
	case enumerated(set) && opts.Resources != nil:
		p.notes = []string{
			"Wildcard selectors are granted the resources the cluster serves now (Secrets only where",
			"a rule names them): run `fieldwatch rbac` again after installing CRDs of new groups.",
		}
	case enumerated(set):
		p.notes = []string{
			"Rules for every custom resource are granted those of the CRDs given (--crds): run",
			"`fieldwatch rbac` against your cluster, or with your CRDs, for the ones it serves.",
		}
	}
	p.notes = append(p.notes, guardNote...)
	if namespaced {
		p.notes = append(p.notes,
			"A namespaced install (fieldwatch run --namespaces "+strings.Join(opts.Namespaces, ",")+"): Roles in those namespaces only.")
		if !opts.ReadCRDs {
			p.notes = append(p.notes,
				"Without --read-crds no ClusterRole: new CRDs are found by the periodic discovery (30 s).")
		}
	}
	return p, nil
}

// grantGuard grants the CRD guard list on the custom resources opts
// knows (discovery's, or offline the CRDs given), and returns the note
// that says what it rests on.
func grantGuard(g grants, opts Options) []string {
	known := opts.Resources
	if known == nil {
		known = opts.CRDs
	}
	n := 0
	for _, r := range known {
		if r.Custom {
			g.add([]string{r.Group}, []string{r.Resource}, "list")
			n++
		}
	}
	if n == 0 {
		return []string{
			"The CRD guard may list no custom resource (none known: offline without --crds): its reviews",
			"of CRDs with objects say the check is incomplete. Run `fieldwatch rbac` against the cluster.",
		}
	}
	if opts.Resources == nil {
		return []string{
			"The CRD guard lists the custom resources of the CRDs given (--crds): the reviews of other CRDs",
			"with objects say the check is incomplete (their list is forbidden).",
		}
	}
	return []string{
		"The CRD guard lists the custom resources of the CRDs there are now: a CRD installed later is",
		"reviewed as incomplete (its list is forbidden) until `fieldwatch rbac` runs again.",
	}
}

// namespaces returns the namespaces of the Roles, sorted.
func (p *Permissions) namespaces() []string {
	out := make([]string, 0, len(p.Namespaced))
	for ns := range p.Namespaced {
		out = append(out, ns)
	}
	slices.Sort(out)
	return out
}

// Manifests returns the permissions as RBAC manifests to apply: the
// ClusterRole and its binding (when there are cluster-wide rules), a Role
// and RoleBinding per namespace, and with opts.LeaderElection the Role
// and RoleBinding of the Lease, for the service account opts names.
func (p *Permissions) Manifests(opts Options) ([]byte, error) {
	opts = opts.withDefaults()
	labels := map[string]string{"app.kubernetes.io/name": "fieldwatch"}
	subject := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: opts.ServiceAccount, Namespace: opts.Namespace}
	var docs []any
	cluster := p.Cluster
	if opts.AdmissionCerts {
		cluster = append(slices.Clone(cluster), AdmissionCertClusterRules(opts.Name)...)
	}
	if len(cluster) > 0 {
		docs = append(docs,
			&rbacv1.ClusterRole{
				TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
				ObjectMeta: metav1.ObjectMeta{Name: opts.Name, Labels: labels},
				Rules:      cluster,
			},
			&rbacv1.ClusterRoleBinding{
				TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
				ObjectMeta: metav1.ObjectMeta{Name: opts.Name, Labels: labels},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: opts.Name},
				Subjects:   []rbacv1.Subject{subject},
			})
	}
	for _, ns := range p.namespaces() {
		docs = append(docs,
			&rbacv1.Role{
				TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
				ObjectMeta: metav1.ObjectMeta{Name: opts.Name, Namespace: ns, Labels: labels},
				Rules:      p.Namespaced[ns],
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
				Rules:      LeaderElectionRules(),
			},
			&rbacv1.RoleBinding{
				TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
				ObjectMeta: metav1.ObjectMeta{Name: opts.Name + "-leader-election", Namespace: opts.Namespace, Labels: labels},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: opts.Name + "-leader-election"},
				Subjects:   []rbacv1.Subject{subject},
			})
	}
	if opts.AdmissionCerts {
		docs = append(docs,
			&rbacv1.Role{
				TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
				ObjectMeta: metav1.ObjectMeta{Name: opts.Name + "-admission-certs", Namespace: opts.Namespace, Labels: labels},
				Rules:      AdmissionCertRules(opts.Name),
			},
			&rbacv1.RoleBinding{
				TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
				ObjectMeta: metav1.ObjectMeta{Name: opts.Name + "-admission-certs", Namespace: opts.Namespace, Labels: labels},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: opts.Name + "-admission-certs"},
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
	for _, n := range p.notes {
		out.WriteString("# " + n + "\n")
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

// LeaderElectionRules are the rules of the leader election Role, on the
// Leases of the service account's namespace.
func LeaderElectionRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{{
		APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
		Verbs: []string{"get", "create", "update"},
	}}
}

// AdmissionCertClusterRules are the cluster rules with which fieldwatch
// keeps the caBundle of its ValidatingWebhookConfiguration name:
// cert-controller watches the configurations and updates that one.
func AdmissionCertClusterRules(name string) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingwebhookconfigurations"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingwebhookconfigurations"}, ResourceNames: []string{name}, Verbs: []string{"update"}},
	}
}

// AdmissionCertRules are the rules of the Role in fieldwatch's namespace
// with which it keeps its serving certificate in Secret
// <name>-admission-tls: cert-controller watches the namespace's Secrets
// and updates that one.
func AdmissionCertRules(name string) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{name + "-admission-tls"}, Verbs: []string{"update"}},
	}
}

// helmValues are the values of charts/fieldwatch that HelmValues writes.
type helmValues struct {
	WatchNamespaces []string `json:"watchNamespaces,omitempty"`
	RBAC            struct {
		ClusterRules   []rbacv1.PolicyRule            `json:"clusterRules"`
		NamespaceRules map[string][]rbacv1.PolicyRule `json:"namespaceRules"`
		ReadCRDs       bool                           `json:"readCRDs"`
		HistoryAPI     bool                           `json:"historyAPI"`
	} `json:"rbac"`
}

// HelmValues returns the permissions as values of the Helm chart
// (charts/fieldwatch): rbac.clusterRules, rbac.namespaceRules,
// rbac.historyAPI (opts.HistoryAPI) and, for a namespaced install,
// watchNamespaces and rbac.readCRDs (its ClusterRole is the chart's). The
// chart adds the leader election Role itself.
func (p *Permissions) HelmValues(opts Options) ([]byte, error) {
	var v helmValues
	v.RBAC.ClusterRules = p.Cluster
	v.RBAC.NamespaceRules = p.Namespaced
	v.RBAC.HistoryAPI = opts.HistoryAPI
	if len(opts.Namespaces) > 0 {
		v.WatchNamespaces = opts.Namespaces
		v.RBAC.ClusterRules = []rbacv1.PolicyRule{}
		v.RBAC.ReadCRDs = opts.ReadCRDs
	}
	b, err := yaml.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	out.WriteString("# Generated by `fieldwatch rbac -o helm-values`: the chart's RBAC for these rules, the least\n")
	out.WriteString("# privilege they need. helm install fieldwatch charts/fieldwatch -f THIS-FILE --set-file rules.inline=RULES-FILE\n")
	for _, n := range p.notes {
		out.WriteString("# " + n + "\n")
	}
	out.Write(b)
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

// metricsText names the resource of a metrics configuration for an
// error: group/version/kind, "*" where any.
func metricsText(s change.Selector) string {
	kind := s.Kind
	if kind == "" {
		kind = "*"
	}
	return s.Group + "/" + s.Version + "/" + kind
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
