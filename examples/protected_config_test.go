package examples_test

import (
	"context"
	"encoding/base64"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// TestProtectedConfig runs examples/protected-config while Secrets and
// ConfigMaps change in and out of the protected namespaces, and checks
// that no secret value, nor the ConfigMap's credential, ever reaches the
// output, also when kubectl's last-applied annotation copies them.
func TestProtectedConfig(t *testing.T) {
	env := testenv.Shared(t)
	cs := env.Clientset(t)
	ctx := context.Background()
	const (
		prod     = "production"
		staging  = "protected-config-staging"
		password = "s3cr3t-pr0tected-config-test"
		rotated  = "r0tated-pr0tected-config-test"
		dbURL    = "postgres://app:" + password + "@db:5432/app"
	)
	ensureNamespace(t, prod)
	ensureNamespace(t, staging)
	fw := startFieldwatch(t, "protected-config/rules.yaml")

	// What must never be printed: the values, plain and base64.
	var secrets []string
	for _, v := range []string{password, rotated, password + "-2"} {
		secrets = append(secrets, v, base64.StdEncoding.EncodeToString([]byte(v)))
	}

	// As `kubectl apply` writes it: with a copy of itself in an annotation.
	lastApplied := func(password string) map[string]string {
		return map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"apiVersion":"v1","kind":"Secret",` +
			`"metadata":{"name":"protected-config-db","namespace":"production"},"stringData":{"password":"` + password + `","username":"app"}}`}
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "protected-config-db", Namespace: prod, Annotations: lastApplied(password)},
		StringData: map[string]string{"username": "app", "password": password},
	}
	var secretRVs []string
	writeSecret := func(what string, do func() (*corev1.Secret, error)) {
		t.Helper()
		fw.step(t, what, func() error {
			s, err := do()
			if err == nil {
				secret = s
				secretRVs = append(secretRVs, s.ResourceVersion)
			}
			return err
		})
	}
	writeSecret("kubectl apply: create a Secret in production", func() (*corev1.Secret, error) {
		return cs.CoreV1().Secrets(prod).Create(ctx, secret, metav1.CreateOptions{FieldManager: "kubectl-client-side-apply"})
	})
	writeSecret("rotate its password", func() (*corev1.Secret, error) {
		s := secret.DeepCopy()
		s.Data["password"] = []byte(rotated)
		return cs.CoreV1().Secrets(prod).Update(ctx, s, metav1.UpdateOptions{FieldManager: "kubectl-edit"})
	})
	writeSecret("kubectl apply: the password and its copy in the annotation", func() (*corev1.Secret, error) {
		s := secret.DeepCopy()
		s.Data["password"] = []byte(password + "-2")
		s.Annotations = lastApplied(password + "-2")
		return cs.CoreV1().Secrets(prod).Update(ctx, s, metav1.UpdateOptions{FieldManager: "kubectl-client-side-apply"})
	})

	fw.unwatched(t, "a Secret in another namespace: quiet", func() error {
		_, err := cs.CoreV1().Secrets(staging).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "protected-config-db", Namespace: staging},
			StringData: map[string]string{"password": password},
		}, metav1.CreateOptions{})
		return err
	})

	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "protected-config-app", Namespace: prod},
		Data:       map[string]string{"log.level": "info", "database.url": dbURL},
	}
	var cmRVs []string
	writeConfigMap := func(what string, change func(*corev1.ConfigMap)) {
		t.Helper()
		fw.step(t, what, func() error {
			c := cm.DeepCopy()
			change(c)
			c, err := cs.CoreV1().ConfigMaps(prod).Update(ctx, c, metav1.UpdateOptions{})
			if err == nil {
				cm = c
				cmRVs = append(cmRVs, c.ResourceVersion)
			}
			return err
		})
	}
	fw.step(t, "create a ConfigMap in production", func() (err error) {
		cm, err = cs.CoreV1().ConfigMaps(prod).Create(ctx, cm, metav1.CreateOptions{})
		if err == nil {
			cmRVs = append(cmRVs, cm.ResourceVersion)
		}
		return err
	})
	writeConfigMap("log level", func(c *corev1.ConfigMap) { c.Data["log.level"] = "debug" })
	writeConfigMap("the credential", func(c *corev1.ConfigMap) {
		c.Data["database.url"] = strings.ReplaceAll(dbURL, password, rotated)
	})
	fw.step(t, "a ConfigMap in kube-system", func() error {
		_, err := cs.CoreV1().ConfigMaps("kube-system").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "protected-config-test"},
			Data:       map[string]string{"a": "b"},
		}, metav1.CreateOptions{})
		return err
	})
	t.Cleanup(func() {
		_ = cs.CoreV1().ConfigMaps("kube-system").Delete(context.Background(), "protected-config-test", metav1.DeleteOptions{})
	})
	// The last change of each object fires, so the payloads are complete.
	fw.step(t, "delete the Secret", func() error {
		return cs.CoreV1().Secrets(prod).Delete(ctx, secret.Name, metav1.DeleteOptions{})
	})
	fw.waitFiring(t, "protected-configmap-changed", "kube-system", "protected-config-test", "")
	fw.waitFiring(t, "protected-configmap-changed", prod, cm.Name, cmRVs[2])
	waitFor(t, "the Secret's deletion is reported", func() (bool, string) {
		ps := fw.firings(t, "protected-secret-changed", prod, secret.Name)
		return len(ps) > 0 && ps[len(ps)-1].Type == "deleted", fw.stdout.String()
	})

	// The Secret: created, two updates, deleted; the changes name the key
	// with the values redacted, and the annotation is left out.
	ps := fw.firings(t, "protected-secret-changed", prod, secret.Name)
	var types []string
	for _, p := range ps {
		types = append(types, string(p.Type))
	}
	if want := []string{"created", "updated", "updated", "deleted"}; !slices.Equal(types, want) {
		t.Fatalf("Secret firings %v, want %v", types, want)
	}
	if got := resourceVersions(ps[:3]); !slices.Equal(got, secretRVs) {
		t.Errorf("Secret firings at %v, want %v", got, secretRVs)
	}
	redactedPassword := `[{"op":"replace","path":"/data/password","value":"<redacted>","oldValue":"<redacted>"}]`
	checkChanges(t, ps[1], redactedPassword)
	checkChanges(t, ps[2], redactedPassword)
	if ps[1].Actor == nil || ps[1].Actor.Manager != "kubectl-edit" {
		t.Errorf("rotation actor = %+v, want kubectl-edit", ps[1].Actor)
	}

	// The ConfigMap: settings show, the credential does not.
	cps := fw.firings(t, "protected-configmap-changed", prod, cm.Name)
	if got := resourceVersions(cps); !slices.Equal(got, cmRVs) {
		t.Fatalf("ConfigMap firings at %v, want %v", got, cmRVs)
	}
	checkChanges(t, cps[1], `[{"op":"replace","path":"/data/log.level","value":"debug","oldValue":"info"}]`)
	checkChanges(t, cps[2], `[{"op":"replace","path":"/data/database.url","value":"<redacted>","oldValue":"<redacted>"}]`)

	for _, p := range fw.payloads(t) {
		if p.Namespace == staging {
			t.Errorf("a Secret outside the protected namespaces fired: %s", p.raw)
		}
	}
	out := fw.stdout.String()
	for _, s := range secrets {
		if strings.Contains(out, s) {
			t.Errorf("the output holds the secret value %q:\n%s", s, out)
		}
	}
}
