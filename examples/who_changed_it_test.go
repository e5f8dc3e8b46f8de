package examples_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/audit/policy"
	"k8s.io/client-go/dynamic"

	"github.com/fieldwatch/fieldwatch/internal/app"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// TestWhoChangedIt runs examples/who-changed-it on a control plane of its
// own that audits with the example's audit-policy.yaml and sends the
// events to fieldwatch's audit webhook: a person's edit of a ConfigMap in
// production is reported with her name, Flux's is not, and a person's
// kubectl scale (impersonated by the admin) both fires and leaves a
// Warning Event naming him.
func TestWhoChangedIt(t *testing.T) {
	policyYAML, err := os.ReadFile("who-changed-it/audit-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := policy.LoadPolicyFromBytes(policyYAML); err != nil {
		t.Fatalf("audit-policy.yaml: %v", err)
	}
	dir := t.TempDir()
	certs, err := testenv.NewAuditTLS(dir, "who-changed-it")
	if err != nil {
		t.Fatal(err)
	}
	// The apiserver is told the webhook's address before fieldwatch runs
	// (and picks its port): a proxy holds the address.
	px := testenv.NewProxy(t, "")
	addr := px.Addr()
	env := testenv.Start(t, testenv.Options{Audit: &testenv.Audit{Policy: string(policyYAML),
		Webhook: certs.Webhook("https://" + addr + "/")}})
	ctx := context.Background()
	cs := env.Clientset(t)
	for _, ns := range []string{"production", "flux-system"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	fw := &fieldwatch{}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	addrc := make(chan string, 1)
	go func() {
		done <- app.Run(runCtx, app.Config{
			RulesFiles: []string{"who-changed-it/rules.yaml"}, Rest: env.Config(), GracePeriod: 10 * time.Second,
			HTTPAddr: "127.0.0.1:0", Ready: func(a string) { addrc <- a },
			Logger: slog.New(slog.NewJSONHandler(&fw.logs, nil)), Stdout: &fw.stdout,
			Audit: app.AuditConfig{WebhookAddr: "127.0.0.1:0", WebhookReady: px.SetTarget,
				WebhookCertFile: certs.CertFile, WebhookKeyFile: certs.KeyFile, WebhookClientCAFile: certs.CAFile,
				WebhookClientNames: []string{certs.ClientName}},
		})
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("app.Run: %v", err)
		}
		if t.Failed() {
			t.Logf("fieldwatch stdout:\n%s\nlogs:\n%s", fw.stdout.String(), fw.logs.String())
		}
	})
	select {
	case fw.addr = <-addrc:
	case err := <-done:
		t.Fatalf("app.Run: %v", err)
	}
	waitFor(t, "fieldwatch ready", func() (bool, string) {
		code, body := fw.get(t, "/readyz")
		return code == 200, body
	})
	// The apiserver retried its batches until fieldwatch listened: wait
	// for one to come through.
	cms := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	deployments := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	admin := env.Dynamic(t)
	warm := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "warm-up"}}}
	if _, err := admin.Resource(cms).Namespace("default").Create(ctx, warm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first audit batch", func() (bool, string) {
		n := fw.metric(t, `fieldwatch_audit_events_total{result="indexed",source="webhook"}`)
		return n > 0, fmt.Sprintf("%d events", n)
	})
	payloadAt := func(rv string) *payload {
		for _, p := range fw.payloads(t) {
			if p.ResourceVersion == rv {
				return &p
			}
		}
		return nil
	}
	cm := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "settings"}, "data": map[string]any{"log.level": "info"}}}
	created, err := admin.Resource(cms).Namespace("production").Create(ctx, cm, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the admin's create", func() (bool, string) {
		return payloadAt(created.GetResourceVersion()) != nil, fw.stdout.String()
	})

	alice := env.Impersonating(t, "alice@example.com").Dynamic
	flux := env.ServiceAccountWriter(t, "flux-system", "kustomize-controller").Dynamic
	patch := func(d dynamic.Interface, gvr schema.GroupVersionResource, name, body string, sub ...string) string {
		t.Helper()
		o, err := d.Resource(gvr).Namespace("production").Patch(ctx, name, types.MergePatchType, []byte(body), metav1.PatchOptions{}, sub...)
		if err != nil {
			t.Fatal(err)
		}
		return o.GetResourceVersion()
	}
	// One writer after the other: two writers of one object within the
	// match window would be ambiguous at Metadata level (and then kept).
	matched := fw.metric(t, `fieldwatch_audit_matches_total{match="window"}`)
	byFlux := patch(flux, cms, "settings", `{"data":{"log.level":"warn"}}`)
	waitFor(t, "flux's edit attributed", func() (bool, string) {
		n := fw.metric(t, `fieldwatch_audit_matches_total{match="window"}`)
		return n > matched, fmt.Sprintf("%d window matches", n)
	})
	byAlice := patch(alice, cms, "settings", `{"data":{"log.level":"debug"}}`)
	waitFor(t, "alice's edit", func() (bool, string) { return payloadAt(byAlice) != nil, fw.stdout.String() })
	if p := payloadAt(byAlice); p.Rule != "human-changes" || p.Actor == nil || p.Actor.Username() != "alice@example.com" {
		t.Errorf("alice's edit: %s", p.raw)
	}
	if p := payloadAt(byFlux); p != nil {
		t.Errorf("flux's edit fired: %s", p.raw)
	}

	web, err := admin.Resource(deployments).Namespace("production").Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "web"},
		"spec": map[string]any{"replicas": int64(2), "selector": map[string]any{"matchLabels": map[string]any{"app": "web"}},
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "web"}},
				"spec": map[string]any{"containers": []any{map[string]any{"name": "web", "image": "nginx"}}}}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bob := env.Impersonating(t, "bob@example.com").Dynamic
	scaled := patch(bob, deployments, "web", `{"spec":{"replicas":10}}`, "scale")
	waitFor(t, "bob's kubectl scale", func() (bool, string) { return payloadAt(scaled) != nil, fw.stdout.String() })
	if p := payloadAt(scaled); p.Actor == nil || p.Actor.Username() != "bob@example.com" {
		t.Errorf("the scale: %s", p.raw)
	}
	waitFor(t, "the ScaledByHand Event", func() (bool, string) {
		events, err := cs.EventsV1().Events("production").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range events.Items {
			if e.Reason == "ScaledByHand" && e.Regarding.UID == web.GetUID() {
				if !strings.HasPrefix(e.Note, "bob@example.com scaled it to 10 (patch by ") {
					t.Errorf("note %q", e.Note)
				}
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(events.Items))
	})
}
