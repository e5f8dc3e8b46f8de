package charts

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/fieldwatch/fieldwatch/internal/rbac"
)

// webhooksOf decodes the ValidatingWebhookConfiguration of a render.
func webhooksOf(t *testing.T, vals map[string]any) (*admissionregistrationv1.ValidatingWebhookConfiguration, []string) {
	t.Helper()
	r := mustRender(t, vals)
	var args []string
	objs := objects(t, r.manifest)
	if sts := find(objs, "StatefulSet", releaseNamespace, releaseName); sts != nil {
		containers, _, _ := unstructured.NestedSlice(sts.Object, "spec", "template", "spec", "containers")
		if len(containers) > 0 {
			for _, a := range containers[0].(map[string]any)["args"].([]any) {
				args = append(args, a.(string))
			}
		}
	}
	o := find(objs, "ValidatingWebhookConfiguration", "", releaseName)
	if o == nil {
		return nil, args
	}
	var cfg admissionregistrationv1.ValidatingWebhookConfiguration
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &cfg); err != nil {
		t.Fatal(err)
	}
	return &cfg, args
}

// TestCRDGuardWebhook: the chart's CRD guard webhook is the one `fieldwatch
// rbac -o admission-webhook` prints (its rules, conditions, failure policy
// and timeout), the record webhook leaves CRD updates and deletions to it,
// and fieldwatch runs with the mode and a timeout 2 s below the webhook's;
// with the guard off, or in a namespaced install, there is no guard
// webhook and fieldwatch runs with --crd-guard=off.
func TestCRDGuardWebhook(t *testing.T) {
	tests := []struct {
		name    string
		vals    map[string]any
		guard   bool
		policy  admissionregistrationv1.FailurePolicyType
		timeout int32
		args    []string
	}{
		{"defaults", nil, true, admissionregistrationv1.Ignore, 10, []string{"--crd-guard=warn", "--crd-guard-timeout=8s"}},
		{"deny, fail", map[string]any{"crdGuard": map[string]any{"mode": "deny", "failurePolicy": "Fail", "timeoutSeconds": 20, "denyIncomplete": true}},
			true, admissionregistrationv1.Fail, 20, []string{"--crd-guard=deny", "--crd-guard-timeout=18s", "--crd-guard-deny-incomplete"}},
		{"off", map[string]any{"crdGuard": map[string]any{"mode": "off"}}, false, "", 0, []string{"--crd-guard=off"}},
		{"namespaced", map[string]any{"watchNamespaces": []any{"shop"}, "rbac": map[string]any{"clusterRules": []any{}},
			"admission": map[string]any{"certificate": map[string]any{"source": "secret", "secretName": "tls", "caBundle": "CA"}}},
			false, "", 0, []string{"--crd-guard=off"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, args := webhooksOf(t, tt.vals)
			for _, a := range tt.args {
				if !slices.Contains(args, a) {
					t.Errorf("fieldwatch runs with %q, want %s among them", args, a)
				}
			}
			if cfg == nil {
				t.Fatal("no ValidatingWebhookConfiguration")
			}
			record := cfg.Webhooks[0]
			excludes := slices.ContainsFunc(record.MatchConditions, func(c admissionregistrationv1.MatchCondition) bool { return c == rbac.GuardedCRDsCondition })
			if excludes != tt.guard {
				t.Errorf("the record webhook leaves CRDs to the guard: %v, want %v", excludes, tt.guard)
			}
			if !tt.guard {
				if len(cfg.Webhooks) != 1 {
					t.Errorf("%d webhooks without the guard", len(cfg.Webhooks))
				}
				return
			}
			if len(cfg.Webhooks) != 2 {
				t.Fatalf("%d webhooks, want the record's and the guard's", len(cfg.Webhooks))
			}
			g := cfg.Webhooks[1]
			switch {
			case g.Name != rbac.GuardWebhookName || !reflect.DeepEqual(g.Rules, rbac.GuardWebhookRules()) || !reflect.DeepEqual(g.MatchConditions, rbac.GuardMatchConditions()):
				t.Errorf("guard webhook %s, rules %+v, conditions %+v: not fieldwatch rbac's", g.Name, g.Rules, g.MatchConditions)
			case *g.FailurePolicy != tt.policy || *g.TimeoutSeconds != tt.timeout:
				t.Errorf("failurePolicy %s, timeoutSeconds %d; want %s, %d", *g.FailurePolicy, *g.TimeoutSeconds, tt.policy, tt.timeout)
			case !reflect.DeepEqual(g.ClientConfig, record.ClientConfig) || *g.SideEffects != admissionregistrationv1.SideEffectClassNone:
				t.Errorf("guard webhook calls %+v, the record webhook %+v", g.ClientConfig, record.ClientConfig)
			}
			if !strings.Contains(strings.Join(g.AdmissionReviewVersions, ","), "v1") {
				t.Errorf("admissionReviewVersions %v", g.AdmissionReviewVersions)
			}
		})
	}
}
