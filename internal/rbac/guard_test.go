package rbac

import (
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"

	"github.com/fieldwatch/fieldwatch/rules"
)

// configMapRules select ConfigMaps only: no custom resource.
const configMapRules = `rules:
  - name: cms
    match: {resources: [{group: "", kind: ConfigMap}]}
    actions: [{log: {}}]
`

// TestGuardWebhook: with the CRD guard the configuration has a second
// webhook for the updates and deletions of every CRD and of their status,
// with its failure policy and timeout, that skips the apiserver's own
// writes and not dry runs; the record webhook then leaves those to it.
func TestGuardWebhook(t *testing.T) {
	set, err := rules.Parse("rules.yaml", []byte(configMapRules))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		w       WebhookOptions
		policy  admissionregistrationv1.FailurePolicyType
		timeout int32
		err     string
	}{
		{"defaults", WebhookOptions{CRDGuard: true}, admissionregistrationv1.Ignore, 10, ""},
		{"fail", WebhookOptions{CRDGuard: true, CRDFailurePolicy: admissionregistrationv1.Fail, CRDTimeoutSeconds: 15}, admissionregistrationv1.Fail, 15, ""},
		{"another policy", WebhookOptions{CRDGuard: true, CRDFailurePolicy: "Retry"}, "", 0, `"Retry": want Ignore or Fail`},
		{"a timeout past the apiserver's bound", WebhookOptions{CRDGuard: true, CRDTimeoutSeconds: 31}, "", 0, "want 3 to 30"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := AdmissionWebhook(set, Options{Resources: discovered}, tt.w)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var cfg admissionregistrationv1.ValidatingWebhookConfiguration
			if err := yaml.Unmarshal([]byte(strings.SplitN(string(out), "\n---\n", 2)[1]), &cfg); err != nil {
				t.Fatal(err)
			}
			if len(cfg.Webhooks) != 2 {
				t.Fatalf("%d webhooks, want the record's and the guard's", len(cfg.Webhooks))
			}
			record, guard := cfg.Webhooks[0], cfg.Webhooks[1]
			if !slices.ContainsFunc(record.MatchConditions, func(c admissionregistrationv1.MatchCondition) bool { return c == GuardedCRDsCondition }) {
				t.Errorf("the record webhook's conditions %v lack %s", record.MatchConditions, GuardedCRDsCondition.Name)
			}
			if got, want := ruleLines(guard.Rules), []string{"apiextensions.k8s.io/v1 customresourcedefinitions,customresourcedefinitions/status: UPDATE,DELETE"}; !slices.Equal(got, want) {
				t.Errorf("guard rules %v, want %v", got, want)
			}
			var conds []string
			for _, c := range guard.MatchConditions {
				conds = append(conds, c.Name)
			}
			switch {
			case guard.Name != GuardWebhookName || *guard.FailurePolicy != tt.policy || *guard.TimeoutSeconds != tt.timeout:
				t.Errorf("guard webhook %s, failurePolicy %s, timeoutSeconds %d", guard.Name, *guard.FailurePolicy, *guard.TimeoutSeconds)
			case *guard.SideEffects != admissionregistrationv1.SideEffectClassNone || guard.ClientConfig.Service == nil || *guard.ClientConfig.Service.Path != "/validate":
				t.Errorf("guard webhook %+v", guard)
			case !slices.Equal(conds, []string{"not-apiserver"}):
				t.Errorf("guard conditions %v: want the apiserver's writes skipped, dry runs sent", conds)
			}
			if !strings.Contains(string(out), "failurePolicy "+string(tt.policy)+":") {
				t.Errorf("the header does not say the failure policy:\n%s", strings.SplitN(string(out), "---", 2)[0])
			}
		})
	}
}

// TestGuardRBAC: with the CRD guard fieldwatch may list the custom
// resources of every CRD the cluster serves (or, offline, of those given),
// whatever the rules select; a namespaced install is refused it.
func TestGuardRBAC(t *testing.T) {
	set, err := rules.Parse("rules.yaml", []byte(configMapRules))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		opts Options
		want []string // grants beside the CRDs', APIServices' and ConfigMaps'
		note string
		err  string
	}{
		{"discovered", Options{Resources: discovered, CRDGuard: true},
			[]string{"example.com/gadgets:list", "example.com/widgets:list", "other.io/things:list"}, "a CRD installed later", ""},
		{"offline with CRDs", Options{CRDs: discovered[3:5], CRDGuard: true},
			[]string{"example.com/gadgets:list", "example.com/widgets:list"}, "the CRDs given (--crds)", ""},
		{"offline without", Options{CRDGuard: true}, nil, "none known", ""},
		{"no guard", Options{Resources: discovered}, nil, "", ""},
		{"namespaced", Options{Resources: discovered, CRDGuard: true, Namespaces: []string{"a"}}, nil, "", "namespaced install"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := Generate(set, tt.opts)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := slices.DeleteFunc(grantsOf(t, out), func(g string) bool {
				return strings.HasPrefix(g, "apiextensions.k8s.io/") || strings.HasPrefix(g, "apiregistration.k8s.io/") || strings.HasPrefix(g, "/configmaps:")
			})
			if !slices.Equal(got, tt.want) {
				t.Errorf("grants %v, want %v", got, tt.want)
			}
			if tt.note != "" && !strings.Contains(string(out), tt.note) {
				t.Errorf("no note with %q:\n%s", tt.note, out)
			}
		})
	}
}

// TestGuardHelmValues: the chart's crdGuard values are printed where they
// differ from its defaults.
func TestGuardHelmValues(t *testing.T) {
	tests := []struct {
		name string
		w    WebhookOptions
		want string
	}{
		{"defaults", WebhookOptions{CRDGuard: true, CRDFailurePolicy: admissionregistrationv1.Ignore, CRDTimeoutSeconds: DefaultGuardTimeoutSeconds}, ""},
		{"off", WebhookOptions{}, "crdGuard:\n  mode: \"off\"\n"},
		{"fail", WebhookOptions{CRDGuard: true, CRDFailurePolicy: admissionregistrationv1.Fail, CRDTimeoutSeconds: 12}, "crdGuard:\n  failurePolicy: Fail\n  timeoutSeconds: 12\n"},
	}
	for _, tt := range tests {
		got, err := GuardHelmValues(tt.w)
		if err != nil || string(got) != tt.want {
			t.Errorf("%s: %q (%v), want %q", tt.name, got, err, tt.want)
		}
	}
}
