package rbac

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"

	"github.com/fieldwatch/fieldwatch/rules"
)

// ruleLines renders webhook rules as "group/version resources: ops".
func ruleLines(rs []admissionregistrationv1.RuleWithOperations) []string {
	var out []string
	for _, r := range rs {
		ops := make([]string, len(r.Operations))
		for i, o := range r.Operations {
			ops[i] = string(o)
		}
		out = append(out, fmt.Sprintf("%s/%s %s: %s", r.APIGroups[0], r.APIVersions[0], strings.Join(r.Resources, ","), strings.Join(ops, ",")))
	}
	return out
}

func TestAdmissionRules(t *testing.T) {
	tests := []struct {
		name       string
		rules      string
		discovered bool
		want       []string
	}{{
		name: "kinds in their watched versions, with status and scale; operations by change type",
		rules: `rules:
  - name: created
    match: {resources: [{group: "", kind: ConfigMap}]}
    on: [create]
    actions: [{log: {}}]
  - name: any
    match: {resources: [{group: apps, kind: Deployment}]}
    actions: [{log: {}}]
`,
		discovered: true,
		want: []string{
			"/v1 configmaps,configmaps/scale,configmaps/status: CREATE",
			"apps/v1 deployments,deployments/scale,deployments/status: CREATE,DELETE,UPDATE",
		},
	}, {
		name: "every custom resource: those served now, not Secrets",
		rules: `rules:
  - name: audit
    match: {resources: [{group: "*", kind: "*"}], custom: true}
    on: [update]
    actions: [{log: {}}]
`,
		discovered: true,
		want: []string{
			"example.com/v1 widgets,widgets/scale,widgets/status: DELETE,UPDATE",
			"example.com/v1alpha1 gadgets,gadgets/scale,gadgets/status: DELETE,UPDATE",
			"other.io/v2 things,things/scale,things/status: DELETE,UPDATE",
		},
	}, {
		name: "offline: guessed plurals in every version",
		rules: `rules:
  - name: r
    match: {resources: [{group: example.com, kind: Widget}]}
    on: [delete]
    actions: [{log: {}}]
`,
		want: []string{"example.com/* widgets,widgets/scale,widgets/status: DELETE,UPDATE"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := rules.Parse("rules.yaml", []byte(tt.rules))
			if err != nil {
				t.Fatal(err)
			}
			opts := Options{}
			if tt.discovered {
				opts.Resources = discovered
			}
			rs, err := AdmissionRules(set, opts)
			if err != nil {
				t.Fatal(err)
			}
			if got := ruleLines(rs); !slices.Equal(got, tt.want) {
				t.Errorf("rules\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// TestAdmissionWebhook: the configuration never denies, changes nothing,
// speaks v1 only, skips fieldwatch's own writes, Leases, Events and dry
// runs, and is confined to the namespaces of rules that all name some.
func TestAdmissionWebhook(t *testing.T) {
	set, err := rules.Parse("rules.yaml", []byte(`rules:
  - name: prod
    match: {resources: [{group: "", kind: ConfigMap}], namespaces: [prod, staging]}
    actions: [{log: {}}]
  - name: dev
    match: {resources: [{group: apps, kind: Deployment}], namespaces: [dev]}
    actions: [{log: {}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	out, err := AdmissionWebhook(set, Options{Resources: discovered, Namespace: "watch", ServiceAccount: "fw"},
		WebhookOptions{Annotations: map[string]string{"cert-manager.io/inject-ca-from": "watch/fieldwatch-admission"}})
	if err != nil {
		t.Fatal(err)
	}
	var cfg admissionregistrationv1.ValidatingWebhookConfiguration
	if err := yaml.Unmarshal([]byte(strings.SplitN(string(out), "\n---\n", 2)[1]), &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Webhooks) != 1 {
		t.Fatalf("%d webhooks", len(cfg.Webhooks))
	}
	h := cfg.Webhooks[0]
	svc := h.ClientConfig.Service
	switch {
	case cfg.Kind != "ValidatingWebhookConfiguration" || cfg.Name != "fieldwatch" || cfg.Annotations["cert-manager.io/inject-ca-from"] == "":
		t.Errorf("configuration %s %s %v", cfg.Kind, cfg.Name, cfg.Annotations)
	case *h.FailurePolicy != admissionregistrationv1.Ignore || *h.SideEffects != admissionregistrationv1.SideEffectClassNone ||
		*h.MatchPolicy != admissionregistrationv1.Equivalent || *h.TimeoutSeconds != 2 || !slices.Equal(h.AdmissionReviewVersions, []string{"v1"}):
		t.Errorf("webhook %+v", h)
	case svc == nil || svc.Namespace != "watch" || svc.Name != "fieldwatch-admission" || *svc.Path != "/validate" || *svc.Port != 443:
		t.Errorf("service %+v", svc)
	case h.NamespaceSelector == nil || !slices.Equal(h.NamespaceSelector.MatchExpressions[0].Values, []string{"dev", "prod", "staging"}):
		t.Errorf("namespaceSelector %+v", h.NamespaceSelector)
	}
	conds := map[string]string{}
	for _, c := range h.MatchConditions {
		conds[c.Name] = c.Expression
	}
	if !strings.Contains(conds["not-fieldwatch"], `"system:serviceaccount:watch:fw"`) || conds["not-leases"] == "" || conds["not-events"] == "" || conds["not-dry-run"] == "" {
		t.Errorf("matchConditions %v", conds)
	}
}
