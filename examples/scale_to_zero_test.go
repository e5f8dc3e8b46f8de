package examples_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fieldwatch/fieldwatch/action"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// exampleWebhookURL is the receiver rules.yaml names; the test points it
// at its own.
const exampleWebhookURL = "https://alerts.example.com/fieldwatch/scale-to-zero"

// receiver records the webhook requests it gets.
type receiver struct {
	mu   sync.Mutex
	reqs []request
}

type request struct {
	header http.Header
	body   []byte
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	rc.reqs = append(rc.reqs, request{header: r.Header.Clone(), body: body})
	rc.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (rc *receiver) requests() []request {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.reqs)
}

// TestScaleToZero runs examples/scale-to-zero with its webhook pointed at
// a local receiver: production Deployments scaled through the scale
// subresource (what `kubectl scale` does) to 1, then to 0, back up, and
// edited to 0 again, and a Deployment elsewhere scaled to 0. Only the two
// scale-downs to zero in production fire: a log line, a signed webhook request with
// the same bytes, and a Warning Event on the Deployment.
func TestScaleToZero(t *testing.T) {
	env := testenv.Shared(t)
	cs := env.Clientset(t)
	ctx := context.Background()
	const (
		prod    = "production"
		staging = "scale-to-zero-staging"
		name    = "scale-to-zero-checkout"
		secret  = "scale-to-zero-test-hmac-secret"
	)
	ensureNamespace(t, prod)
	ensureNamespace(t, staging)

	rc := &receiver{}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	t.Setenv("FIELDWATCH_WEBHOOK_SECRET", secret)
	fw := startFieldwatch(t, withWebhookURL(t, "scale-to-zero/rules.yaml", srv.URL+"/hook"))

	deployment := func(ns string) *appsv1.Deployment {
		replicas := int32(2)
		labels := map[string]string{"app": "checkout"}
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: appsv1.DeploymentSpec{
				Replicas: &replicas,
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example.com/checkout:1.4"}}},
				},
			},
		}
	}
	var prodDeploy *appsv1.Deployment
	fw.step(t, "create the Deployment in "+prod, func() (err error) {
		prodDeploy, err = cs.AppsV1().Deployments(prod).Create(ctx, deployment(prod), metav1.CreateOptions{})
		return err
	})
	fw.unwatched(t, "create the Deployment in "+staging, func() error {
		_, err := cs.AppsV1().Deployments(staging).Create(ctx, deployment(staging), metav1.CreateOptions{})
		return err
	})
	t.Cleanup(func() {
		_ = cs.AppsV1().Deployments(prod).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	// scale does what `kubectl scale` does and returns the Deployment's
	// resource version afterwards.
	scale := func(ns string, replicas int32) string {
		t.Helper()
		var rv string
		step := fw.step
		if ns != prod {
			step = fw.unwatched
		}
		step(t, fmt.Sprintf("scale %s/%s to %d", ns, name, replicas), func() error {
			s := &autoscalingv1.Scale{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Spec:       autoscalingv1.ScaleSpec{Replicas: replicas},
			}
			s, err := cs.AppsV1().Deployments(ns).UpdateScale(ctx, name, s, metav1.UpdateOptions{FieldManager: "kubectl"})
			if err == nil {
				rv = s.ResourceVersion
			}
			return err
		})
		return rv
	}
	scale(prod, 1)
	scale(staging, 0)
	rvZero := scale(prod, 0)
	scale(prod, 3)
	// The second time through the Deployment itself, as `kubectl edit` does.
	var rvZeroAgain string
	fw.step(t, "edit the Deployment to 0 replicas", func() error {
		d, err := cs.AppsV1().Deployments(prod).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		d.Spec.Replicas = new(int32(0))
		d, err = cs.AppsV1().Deployments(prod).Update(ctx, d, metav1.UpdateOptions{FieldManager: "kubectl-edit"})
		if err == nil {
			rvZeroAgain = d.ResourceVersion
		}
		return err
	})

	// The log: the two scale-downs to zero and nothing else; the second
	// shows that the changes before it did not fire (the log writes in
	// order).
	fw.waitFiring(t, "production-scaled-to-zero", prod, name, rvZeroAgain)
	ps := fw.firings(t, "production-scaled-to-zero", prod, name)
	if got := resourceVersions(ps); !slices.Equal(got, []string{rvZero, rvZeroAgain}) {
		t.Fatalf("fired at %v, want %v", got, []string{rvZero, rvZeroAgain})
	}
	checkChanges(t, ps[0], `[{"op":"replace","path":"/spec/replicas","value":0,"oldValue":1}]`)
	checkChanges(t, ps[1], `[{"op":"replace","path":"/spec/replicas","value":0,"oldValue":3}]`)
	if p := ps[0]; p.Type != "updated" || p.UID != string(prodDeploy.UID) || p.Resource.Group != "apps" || p.Resource.Kind != "Deployment" {
		t.Errorf("payload: %s", p.raw)
	}
	// A scale to 0 through the scale subresource leaves no managedFields
	// entry, so only the edit has a meaningful actor.
	if a := ps[1].Actor; a == nil || a.Manager != "kubectl-edit" || a.Operation != "Update" {
		t.Errorf("actor of the edit = %+v, want kubectl-edit", a)
	}
	for _, p := range fw.payloads(t) {
		if p.Namespace != prod {
			t.Errorf("a Deployment outside production fired: %s", p.raw)
		}
	}

	// The webhook: one signed request per firing (at least once: a retry
	// may repeat one, with the same Idempotency-Key), its body the bytes
	// of the log line.
	waitFor(t, "the webhook receives both firings", func() (bool, string) {
		keys := map[string]bool{}
		for _, r := range rc.requests() {
			keys[r.header.Get("Idempotency-Key")] = true
		}
		return keys[ps[0].ID] && keys[ps[1].ID], fmt.Sprintf("Idempotency-Keys %v", keys)
	})
	for _, r := range rc.requests() {
		key := r.header.Get("Idempotency-Key")
		i := slices.IndexFunc(ps, func(p payload) bool { return p.ID == key })
		if i < 0 {
			t.Errorf("webhook request for no firing: Idempotency-Key %q, body %s", key, r.body)
			continue
		}
		if !bytes.Equal(r.body, []byte(ps[i].raw)) {
			t.Errorf("webhook body differs from the log line:\n%s\n%s", r.body, ps[i].raw)
		}
		ts, sig := r.header.Get(action.TimestampHeader), r.header.Get("X-Fieldwatch-Signature")
		if err := action.VerifySignature([]byte(secret), ts, sig, r.body, 5*time.Minute, time.Now()); err != nil {
			t.Errorf("signature of %s: %v", key, err)
		}
		// The check can fail: a wrong secret or a changed body does not verify.
		if err := action.VerifySignature([]byte("not-"+secret), ts, sig, r.body, 5*time.Minute, time.Now()); !errors.Is(err, action.ErrBadSignature) {
			t.Errorf("a wrong secret verifies %s: %v", key, err)
		}
		if got := r.header.Get("X-Fieldwatch-Rule"); got != "production-scaled-to-zero" {
			t.Errorf("header X-Fieldwatch-Rule = %q", got)
		}
		if got := r.header.Get("Content-Type"); got != "application/json" {
			t.Errorf("Content-Type = %q", got)
		}
	}

	// The Event: on the Deployment, a Warning, saying from what.
	ev := waitEvent(t, prod, prodDeploy.UID, "ScaledToZero")
	if ev.Type != corev1.EventTypeWarning || ev.Regarding.Kind != "Deployment" || ev.Regarding.Name != name ||
		(ev.Note != "scaled from 1 to 0 replicas" && ev.Note != "scaled from 3 to 0 replicas") {
		t.Errorf("Event: type %q, regarding %+v, note %q", ev.Type, ev.Regarding, ev.Note)
	}
}

// withWebhookURL writes a copy of an example's rules with its webhook URL
// replaced by url, and returns its path.
func withWebhookURL(t *testing.T, rulesFile, url string) string {
	t.Helper()
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(exampleWebhookURL)) {
		t.Fatalf("%s does not name the webhook %s", rulesFile, exampleWebhookURL)
	}
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, bytes.ReplaceAll(data, []byte(exampleWebhookURL), []byte(url)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
