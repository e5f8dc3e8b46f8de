package rbac

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/rules"
)

// WebhookOptions say how the apiserver reaches fieldwatch's admission
// endpoint (`fieldwatch run --admission-addr`), for the
// ValidatingWebhookConfiguration of AdmissionWebhook.
type WebhookOptions struct {
	// Service and Port are the endpoint's Service, in Options.Namespace
	// (default <Options.Name>-admission, 443).
	Service string
	Port    int32
	// CABundle is the CA of the endpoint's serving certificate; empty
	// leaves it to whoever injects it (fieldwatch's own certificate
	// rotation, --admission-cert-secret; or cert-manager's CA injector,
	// with Annotations).
	CABundle []byte
	// TimeoutSeconds bounds each call (default 2): on a timeout the write
	// goes on (failurePolicy Ignore), unattributed.
	TimeoutSeconds int32
	// Annotations of the configuration (cert-manager.io/inject-ca-from).
	Annotations map[string]string
	// CRDGuard adds the webhook of fieldwatch's CRD guard
	// (GuardWebhookName, GuardWebhookRules) with CRDTimeoutSeconds
	// (default DefaultGuardTimeoutSeconds) and CRDFailurePolicy (default
	// Ignore: a CRD change made while no replica answers goes through
	// unchecked; Fail refuses it until one answers); the record webhook
	// then leaves CRD updates and deletions to it (GuardedCRDsCondition).
	CRDGuard          bool
	CRDFailurePolicy  admissionregistrationv1.FailurePolicyType
	CRDTimeoutSeconds int32
}

// WebhookName names the webhook in the configuration: the apiserver's
// metrics and errors say it.
const WebhookName = "record.fieldwatch.io"

// GuardWebhookName names the CRD guard's webhook in the configuration.
const GuardWebhookName = "guard.fieldwatch.io"

// DefaultGuardTimeoutSeconds is the CRD guard webhook's timeoutSeconds:
// above the guard's own bound (fieldwatch run --crd-guard-timeout, 8 s),
// with room for the network.
const DefaultGuardTimeoutSeconds = 10

// GuardWebhookRules are the rules of the CRD guard's webhook: the UPDATEs
// and DELETEs of CustomResourceDefinitions and of their status (where
// status.storedVersions is cut), whatever the rules select.
func GuardWebhookRules() []admissionregistrationv1.RuleWithOperations {
	scope := admissionregistrationv1.AllScopes
	return []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update, admissionregistrationv1.Delete},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{"apiextensions.k8s.io"}, APIVersions: []string{"v1"},
			Resources: []string{"customresourcedefinitions", "customresourcedefinitions/status"}, Scope: &scope},
	}}
}

// GuardMatchConditions are the CEL conditions of the CRD guard's webhook:
// the apiserver's own writes of CRDs (their conditions, stored versions
// and finalizer, through its loopback client) are not sent, so that a
// failurePolicy Fail never holds back the apiserver's upkeep of CRDs.
// Dry runs are sent: `kubectl apply --dry-run=server` gets the answer.
func GuardMatchConditions() []admissionregistrationv1.MatchCondition {
	return []admissionregistrationv1.MatchCondition{
		{Name: "not-apiserver", Expression: `request.userInfo.username != "system:apiserver"`},
	}
}

// GuardedCRDsCondition is the record webhook's condition with the guard
// on: CRD updates and deletions go to the guard's webhook only (which
// keeps their records too), never twice.
var GuardedCRDsCondition = admissionregistrationv1.MatchCondition{
	Name:       "not-guarded-crds",
	Expression: `!(request.resource.group == "apiextensions.k8s.io" && request.resource.resource == "customresourcedefinitions" && request.operation != "CREATE")`,
}

// AdmissionRules returns the rules of a ValidatingWebhookConfiguration
// that sends fieldwatch the writes its rules may be asked about: the
// resources they select with their status and scale subresources (one a
// resource lacks matches nothing), in the
// versions the watcher watches (discovery's preferred ones; every version
// offline or with a wildcard), for the operations that make the changes
// they fire on (a creation: CREATE; an update: UPDATE, and DELETE for a
// graceful deletion's; a deletion: DELETE, and UPDATE for the removal of
// a terminating object's last finalizer). Resources are resolved as for
// RBAC (Compute): a wildcard selector is given the resources discovery
// (or, offline, the CRDs given) shows it matches.
func AdmissionRules(set *rules.Set, opts Options) ([]admissionregistrationv1.RuleWithOperations, error) {
	opts = opts.withDefaults()
	type key struct{ group, version, ops string }
	byKey := map[key][]string{}
	var errs []error
	for _, r := range set.Rules() {
		ops := operations(r.On)
		for _, s := range r.Selectors {
			targets, err := resolve(s, opts)
			if err != nil {
				errs = append(errs, fmt.Errorf("rule %s (%s): %w", r.Name, r.Source, err))
				continue
			}
			for _, t := range targets {
				for _, g := range t.groups {
					for _, res := range t.resources {
						known := opts.Resources
						if known == nil {
							known = opts.CRDs
						}
						v := watchedVersion(s, g, res, known)
						k := key{g, v, strings.Join(ops, ",")}
						byKey[k] = append(byKey[k], res)
						if res != "*" {
							byKey[k] = append(byKey[k], res+"/status", res+"/scale")
						}
					}
				}
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	keys := make([]key, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int {
		return strings.Compare(a.group+"\x00"+a.version+"\x00"+a.ops, b.group+"\x00"+b.version+"\x00"+b.ops)
	})
	scope := admissionregistrationv1.AllScopes
	out := make([]admissionregistrationv1.RuleWithOperations, 0, len(keys))
	for _, k := range keys {
		res := slices.Compact(slices.Sorted(slices.Values(byKey[k])))
		var ops []admissionregistrationv1.OperationType
		for _, o := range strings.Split(k.ops, ",") {
			ops = append(ops, admissionregistrationv1.OperationType(o))
		}
		out = append(out, admissionregistrationv1.RuleWithOperations{Operations: ops, Rule: admissionregistrationv1.Rule{
			APIGroups: []string{k.group}, APIVersions: []string{k.version}, Resources: res, Scope: &scope}})
	}
	return out, nil
}

// operations returns the admission operations whose requests make the
// changes of types (every type when none is given), sorted.
func operations(types []change.Type) []string {
	if len(types) == 0 {
		types = []change.Type{change.Created, change.Updated, change.Deleted}
	}
	set := map[string]bool{}
	for _, t := range types {
		switch t {
		case change.Created:
			set["CREATE"] = true
		case change.Updated, change.Deleted:
			set["UPDATE"], set["DELETE"] = true, true
		}
	}
	return slices.Sorted(func(yield func(string) bool) {
		for o := range set {
			if !yield(o) {
				return
			}
		}
	})
}

// watchedVersion is the version of group/resource the watcher watches:
// the selector's, or the one discovery prefers; "*" when unknown.
func watchedVersion(s change.Selector, group, resource string, discovered []change.Resource) string {
	if s.Version != "" && s.Version != "*" {
		return s.Version
	}
	for _, r := range discovered {
		if r.Group == group && r.Resource == resource && r.Preferred {
			return r.Version
		}
	}
	return "*"
}

// MatchConditions are the CEL conditions every call must pass: fieldwatch's
// own writes (its service account's), Leases and Events are never sent,
// nor dry runs.
func MatchConditions(namespace, serviceAccount string) []admissionregistrationv1.MatchCondition {
	return []admissionregistrationv1.MatchCondition{
		{Name: "not-fieldwatch", Expression: fmt.Sprintf("request.userInfo.username != %q", "system:serviceaccount:"+namespace+":"+serviceAccount)},
		{Name: "not-leases", Expression: `!(request.resource.group == "coordination.k8s.io" && request.resource.resource == "leases")`},
		{Name: "not-events", Expression: `!(request.resource.resource == "events" && (request.resource.group == "" || request.resource.group == "events.k8s.io"))`},
		{Name: "not-dry-run", Expression: `!has(request.dryRun) || request.dryRun != true`},
	}
}

// AdmissionWebhook returns the ValidatingWebhookConfiguration (YAML) that
// sends fieldwatch's admission endpoint the writes set's rules may be
// asked about (AdmissionRules): failurePolicy Ignore and sideEffects
// None (it never denies nor changes anything), a small timeoutSeconds,
// matchPolicy Equivalent (a write in another version is sent converted to
// the watched one), admission.k8s.io/v1 only, MatchConditions, and, when
// every rule is restricted to namespaces, a namespaceSelector of them.
// With w.CRDGuard, a second webhook sends the CRD guard the updates and
// deletions of every CRD (GuardWebhookRules), and the first leaves them
// out.
func AdmissionWebhook(set *rules.Set, opts Options, w WebhookOptions) ([]byte, error) {
	opts = opts.withDefaults()
	rs, err := AdmissionRules(set, opts)
	if err != nil {
		return nil, err
	}
	if w.Service == "" {
		w.Service = opts.Name + "-admission"
	}
	if w.Port == 0 {
		w.Port = 443
	}
	if w.TimeoutSeconds == 0 {
		w.TimeoutSeconds = 2
	}
	path := "/validate"
	ignore := admissionregistrationv1.Ignore
	none := admissionregistrationv1.SideEffectClassNone
	equivalent := admissionregistrationv1.Equivalent
	hook := admissionregistrationv1.ValidatingWebhook{
		Name: WebhookName,
		ClientConfig: admissionregistrationv1.WebhookClientConfig{
			Service:  &admissionregistrationv1.ServiceReference{Namespace: opts.Namespace, Name: w.Service, Path: &path, Port: &w.Port},
			CABundle: w.CABundle,
		},
		Rules:                   rs,
		FailurePolicy:           &ignore,
		SideEffects:             &none,
		TimeoutSeconds:          &w.TimeoutSeconds,
		MatchPolicy:             &equivalent,
		AdmissionReviewVersions: []string{"v1"},
		MatchConditions:         MatchConditions(opts.Namespace, opts.ServiceAccount),
	}
	if ns := ruleNamespaces(set, opts); len(ns) > 0 {
		hook.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: ns}}}
	}
	hooks := []admissionregistrationv1.ValidatingWebhook{hook}
	if w.CRDGuard {
		hooks[0].MatchConditions = append(hooks[0].MatchConditions, GuardedCRDsCondition)
		g, err := guardWebhook(hook.ClientConfig, w)
		if err != nil {
			return nil, err
		}
		hooks = append(hooks, g)
	}
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: opts.Name, Labels: map[string]string{"app.kubernetes.io/name": "fieldwatch"}, Annotations: w.Annotations},
		Webhooks:   hooks,
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	out.WriteString("# Generated by `fieldwatch rbac -o admission-webhook`: the writes these rules may be asked about,\n")
	out.WriteString("# sent to fieldwatch's admission endpoint (fieldwatch run --admission-addr), which never denies one.\n")
	if w.CRDGuard {
		out.WriteString("# guard.fieldwatch.io: the updates and deletions of every CRD, which the CRD guard (--crd-guard)\n")
		if *hooks[1].FailurePolicy == admissionregistrationv1.Fail {
			out.WriteString("# checks and may refuse; failurePolicy Fail: while no replica answers, CRD changes are refused.\n")
		} else {
			out.WriteString("# checks and may refuse; failurePolicy Ignore: while no replica answers, CRD changes go unchecked.\n")
		}
	}
	if len(w.CABundle) == 0 {
		out.WriteString("# caBundle: kept in step by fieldwatch (--admission-cert-secret) or by cert-manager's CA injector.\n")
	}
	out.WriteString("---\n")
	out.Write(stripCreationTimestamp(b))
	return out.Bytes(), nil
}

// guardWebhook is the CRD guard's webhook of w, calling client.
func guardWebhook(client admissionregistrationv1.WebhookClientConfig, w WebhookOptions) (admissionregistrationv1.ValidatingWebhook, error) {
	policy := w.CRDFailurePolicy
	switch policy {
	case "":
		policy = admissionregistrationv1.Ignore
	case admissionregistrationv1.Ignore, admissionregistrationv1.Fail:
	default:
		return admissionregistrationv1.ValidatingWebhook{}, fmt.Errorf("the CRD guard's failure policy %q: want Ignore or Fail", policy)
	}
	timeout := w.CRDTimeoutSeconds
	if timeout == 0 {
		timeout = DefaultGuardTimeoutSeconds
	}
	if timeout < 3 || timeout > 30 {
		return admissionregistrationv1.ValidatingWebhook{}, fmt.Errorf("the CRD guard's timeoutSeconds %d: want 3 to 30 (the apiserver's bound), and fieldwatch run --crd-guard-timeout 2 s below it", timeout)
	}
	none := admissionregistrationv1.SideEffectClassNone
	equivalent := admissionregistrationv1.Equivalent
	return admissionregistrationv1.ValidatingWebhook{
		Name:                    GuardWebhookName,
		ClientConfig:            client,
		Rules:                   GuardWebhookRules(),
		FailurePolicy:           &policy,
		SideEffects:             &none,
		TimeoutSeconds:          &timeout,
		MatchPolicy:             &equivalent,
		AdmissionReviewVersions: []string{"v1"},
		MatchConditions:         GuardMatchConditions(),
	}, nil
}

// ruleNamespaces returns the namespaces the rules are confined to, sorted:
// nil when a rule watches every namespace.
func ruleNamespaces(set *rules.Set, opts Options) []string {
	var out []string
	for _, r := range set.Rules() {
		ns := r.Namespaces()
		if len(ns) == 0 {
			ns = opts.Namespaces
		}
		if len(ns) == 0 {
			return nil
		}
		out = append(out, ns...)
	}
	return slices.Compact(slices.Sorted(slices.Values(out)))
}

// AdmissionHelmValues returns admission.rules of the Helm chart
// (charts/fieldwatch) for set: the rules of the ValidatingWebhookConfiguration
// the chart makes when admission is on (AdmissionRules), to append to
// HelmValues' output.
func AdmissionHelmValues(set *rules.Set, opts Options) ([]byte, error) {
	rs, err := AdmissionRules(set, opts)
	if err != nil {
		return nil, err
	}
	var v struct {
		Admission struct {
			Rules []admissionregistrationv1.RuleWithOperations `json:"rules"`
		} `json:"admission"`
	}
	v.Admission.Rules = rs
	return yaml.Marshal(v)
}

// GuardHelmValues returns the chart's crdGuard values for w where they
// differ from the chart's defaults (mode warn, failurePolicy Ignore,
// timeoutSeconds DefaultGuardTimeoutSeconds): mode off without
// w.CRDGuard, the failure policy and timeout otherwise; nothing when all
// are the defaults.
func GuardHelmValues(w WebhookOptions) ([]byte, error) {
	v := map[string]any{}
	switch {
	case !w.CRDGuard:
		v["mode"] = "off"
	default:
		if w.CRDFailurePolicy != "" && w.CRDFailurePolicy != admissionregistrationv1.Ignore {
			v["failurePolicy"] = string(w.CRDFailurePolicy)
		}
		if w.CRDTimeoutSeconds != 0 && w.CRDTimeoutSeconds != DefaultGuardTimeoutSeconds {
			v["timeoutSeconds"] = w.CRDTimeoutSeconds
		}
	}
	if len(v) == 0 {
		return nil, nil
	}
	return yaml.Marshal(map[string]any{"crdGuard": v})
}
