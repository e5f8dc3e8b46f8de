package examples_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// TestNATSEvents runs examples/nats-events through `fieldwatch run`
// against an embedded NATS server with JetStream on file storage and the
// stream its README creates: each change is one CloudEvent in the stream
// (decoded with the CloudEvents SDK), on the subject the rule's template
// names; a quiet change publishes nothing.
func TestNATSEvents(t *testing.T) {
	const token = "example-nats-token"
	js := startNATS(t, token)
	ctx := context.Background()
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "FIELDWATCH", Subjects: []string{"fieldwatch.>"}, Storage: jetstream.FileStorage, Duplicates: 10 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}

	// The example's rules, with the server and token file of this test.
	src, err := os.ReadFile("nats-events/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rulesText := strings.NewReplacer("nats://nats.nats.svc:4222", js.url, "/var/run/secrets/nats/token", tokenFile).Replace(string(src))
	if rulesText == string(src) {
		t.Fatal("the example's url and token file are not where this test expects them")
	}
	rulesFile := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rulesFile, []byte(rulesText), 0o600); err != nil {
		t.Fatal(err)
	}

	for _, ns := range []string{"shop", "payments"} {
		ensureNamespace(t, ns)
	}
	fw := startFieldwatch(t, rulesFile)
	cs := testenv.Shared(t).Clientset(t)
	deploys := cs.AppsV1().Deployments("shop")
	replicas := int32(2)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "nats-checkout"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "nats-checkout"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "nats-checkout"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example.com/checkout:1.4"}}},
			},
		},
	}
	var rvs []string
	change := func(what string, do func() (*appsv1.Deployment, error)) {
		t.Helper()
		fw.step(t, what, func() error {
			got, err := do()
			if err == nil {
				d = got
				rvs = append(rvs, got.ResourceVersion)
			}
			return err
		})
	}
	update := func(what string, mutate func(*appsv1.Deployment)) {
		t.Helper()
		change(what, func() (*appsv1.Deployment, error) {
			c := d.DeepCopy()
			mutate(c)
			return deploys.Update(ctx, c, metav1.UpdateOptions{})
		})
	}
	change("create", func() (*appsv1.Deployment, error) { return deploys.Create(ctx, d, metav1.CreateOptions{}) })
	update("new image", func(c *appsv1.Deployment) {
		c.Spec.Template.Spec.Containers[0].Image = "registry.example.com/checkout:1.5"
	})
	update("a label: quiet", func(c *appsv1.Deployment) { c.Labels = map[string]string{"team": "web"} })
	update("scaled", func(c *appsv1.Deployment) { five := int32(5); c.Spec.Replicas = &five })
	fw.step(t, "delete", func() error { return deploys.Delete(ctx, d.Name, metav1.DeleteOptions{}) })
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "nats-config"}, Data: map[string]string{"currency": "EUR"}}
	fw.step(t, "configmap created", func() error {
		c, err := cs.CoreV1().ConfigMaps("payments").Create(ctx, cm, metav1.CreateOptions{})
		cm = c
		return err
	})

	uid := string(d.UID)
	want := []struct{ subject, id, typ string }{
		{"fieldwatch.deployments.shop.created", uid + "/" + rvs[0] + "/deployment-rollout", "io.fieldwatch.created"},
		{"fieldwatch.deployments.shop.updated", uid + "/" + rvs[1] + "/deployment-rollout", "io.fieldwatch.updated"},
		{"fieldwatch.deployments.shop.updated", uid + "/" + rvs[3] + "/deployment-rollout", "io.fieldwatch.updated"},
		{"fieldwatch.deployments.shop.deleted", uid + "/deleted/deployment-rollout", "io.fieldwatch.deleted"},
		{"fieldwatch.configmaps.payments.created", string(cm.UID) + "/" + cm.ResourceVersion + "/configmap-changed", "io.fieldwatch.created"},
	}
	var msgs []jetstream.Msg
	waitFor(t, "every change in the stream", func() (bool, string) {
		info, err := stream.Info(ctx)
		if err != nil {
			return false, err.Error()
		}
		return info.State.Msgs >= uint64(len(want)), fmt.Sprintf("%d messages; logs:\n%s", info.State.Msgs, fw.logs.String())
	})
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(len(want)+10, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	if len(msgs) != len(want) {
		t.Fatalf("the stream holds %d messages, want %d", len(msgs), len(want))
	}
	for i, w := range want {
		m := msgs[i]
		var e cloudevents.Event
		if err := json.Unmarshal(m.Data(), &e); err != nil {
			t.Fatalf("message %d: the SDK does not decode it: %v\n%s", i, err, m.Data())
		}
		var p payload
		if err := json.Unmarshal(e.Data(), &p); err != nil {
			t.Fatalf("message %d: data %s: %v", i, e.Data(), err)
		}
		if m.Subject() != w.subject || e.ID() != w.id || e.Type() != w.typ || p.ID != w.id || m.Headers().Get(jetstream.MsgIDHeader) != w.id {
			t.Errorf("message %d: subject %s, event id %s, type %s, payload id %s, Nats-Msg-Id %s; want %+v",
				i, m.Subject(), e.ID(), e.Type(), p.ID, m.Headers().Get(jetstream.MsgIDHeader), w)
		}
		if !strings.HasPrefix(e.Source(), "//shop-prod/api") {
			t.Errorf("message %d: source %s", i, e.Source())
		}
	}
}

// natsTest is an embedded NATS server for one test.
type natsTest struct {
	jetstream.JetStream
	url string
}

// startNATS starts nats-server with JetStream on file storage on
// 127.0.0.1, token authentication, and a client of it; both stop when the
// test ends.
func startNATS(t *testing.T, token string) natsTest {
	t.Helper()
	srv, err := natsserver.NewServer(&natsserver.Options{
		Host: "127.0.0.1", Port: -1 /* a free port */, JetStream: true, StoreDir: t.TempDir(),
		Authorization: token, NoSigs: true, NoLog: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	url := fmt.Sprintf("nats://127.0.0.1:%d", srv.Addr().(*net.TCPAddr).Port)
	nc, err := nats.Connect(url, nats.Token(token))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return natsTest{JetStream: js, url: url}
}
