package examples_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// TestAlertmanagerExample runs examples/alertmanager: fieldwatch posts to
// a real Alertmanager (Debian's, on 127.0.0.1) started with the example's
// alertmanager.yml, its Slack API pointed at a local receiver and its
// group_wait cut to 1s. Three image changes in one namespace are one
// Slack message to #platform; a production Deployment scaled to zero is a
// message to #oncall, and inhibits the image alerts of that Deployment.
func TestAlertmanagerExample(t *testing.T) {
	const bin = "/usr/bin/prometheus-alertmanager"
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s: %v (make testdeps installs Debian's prometheus-alertmanager)", bin, err)
	}
	slack := &receiver{}
	slackSrv := httptest.NewServer(slack)
	t.Cleanup(slackSrv.Close)
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg, err := os.ReadFile("alertmanager/alertmanager.yml")
	if err != nil {
		t.Fatal(err)
	}
	amConfig := strings.NewReplacer(
		"/etc/alertmanager/secrets/slack-webhook-url", write("slack-url", slackSrv.URL+"/slack"),
		"/etc/alertmanager/secrets/smtp-password", write("smtp-password", "unused"),
		"smtp.example.com:587", "127.0.0.1:1",
		"group_wait: 30s", "group_wait: 1s",
	).Replace(string(cfg))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	var out testenv.SyncBuffer
	am := exec.Command(bin, "--config.file="+write("alertmanager.yml", amConfig), "--storage.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--cluster.listen-address=")
	am.Stdout, am.Stderr = &out, &out
	if err := am.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = am.Process.Signal(syscall.SIGTERM)
		_ = am.Wait()
		if t.Failed() {
			t.Logf("alertmanager:\n%s", out.String())
		}
	})
	base := "http://" + addr
	waitFor(t, "Alertmanager ready", func() (bool, string) {
		resp, err := http.Get(base + "/-/ready")
		if err != nil {
			return false, err.Error()
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	rulesSrc, err := os.ReadFile("alertmanager/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rulesFile := write("rules.yaml", strings.NewReplacer(
		"http://alertmanager-0.alertmanager.monitoring:9093", base,
		"http://alertmanager-1.alertmanager.monitoring:9093", "http://127.0.0.1:1",
	).Replace(string(rulesSrc)))
	fw := startFieldwatch(t, rulesFile)

	env := testenv.Shared(t)
	cs := env.Clientset(t)
	ctx := context.Background()
	const team = "am-example-shop"
	ensureNamespace(t, team)
	ensureNamespace(t, "production")
	deploy := func(ns, name string) {
		replicas := int32(1)
		labels := map[string]string{"app": name}
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: appsv1.DeploymentSpec{
			Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example.com/" + name + ":1"}}}},
		}}
		if _, err := cs.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.AppsV1().Deployments(ns).Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	patch := func(ns, name, p string) {
		fw.step(t, "patch "+ns+"/"+name, func() error {
			_, err := cs.AppsV1().Deployments(ns).Patch(ctx, name, types.StrategicMergePatchType, []byte(p), metav1.PatchOptions{})
			return err
		})
	}
	for i := range 3 {
		deploy(team, fmt.Sprintf("web-%d", i))
	}
	deploy("production", "am-example-checkout")
	for i := range 3 {
		patch(team, fmt.Sprintf("web-%d", i), `{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"registry.example.com/web:2"}]}}}}`)
	}
	patch("production", "am-example-checkout", `{"spec":{"replicas":0}}`)
	patch("production", "am-example-checkout", `{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"registry.example.com/checkout:2"}]}}}}`)

	type slackMsg struct {
		Channel     string `json:"channel"`
		Attachments []struct{ Title, Text string }
	}
	messages := func() []slackMsg {
		var ms []slackMsg
		for _, r := range slack.requests() {
			var m slackMsg
			if err := json.Unmarshal(r.body, &m); err == nil {
				ms = append(ms, m)
			}
		}
		return ms
	}
	waitFor(t, "the #platform and #oncall messages", func() (bool, string) {
		var platform, oncall bool
		for _, m := range messages() {
			platform = platform || (m.Channel == "#platform" && len(m.Attachments) == 1 && m.Attachments[0].Title == "deployment-image in "+team+" (3)")
			oncall = oncall || (m.Channel == "#oncall" && len(m.Attachments) == 1 && strings.HasPrefix(m.Attachments[0].Title, "production-scaled-to-zero: 1 in production"))
		}
		return platform && oncall, fmt.Sprintf("messages %+v", messages())
	})
	waitFor(t, "the production image alert inhibited", func() (bool, string) {
		resp, err := http.Get(base + "/api/v2/alerts?filter=" + url.QueryEscape(`rule="deployment-image"`) + "&filter=" + url.QueryEscape(`namespace="production"`))
		if err != nil {
			return false, err.Error()
		}
		defer func() { _ = resp.Body.Close() }()
		var alerts []struct {
			Status struct {
				State       string   `json:"state"`
				InhibitedBy []string `json:"inhibitedBy"`
			} `json:"status"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&alerts); err != nil {
			return false, err.Error()
		}
		return len(alerts) == 1 && alerts[0].Status.State == "suppressed" && len(alerts[0].Status.InhibitedBy) == 1, fmt.Sprintf("alerts %+v", alerts)
	})
	for _, m := range messages() {
		if strings.Contains(m.Attachments[0].Title, "deployment-image in production") {
			t.Errorf("the image alert of a Deployment scaled to zero was not inhibited: %+v", m)
		}
		if m.Channel == "#platform" && strings.HasPrefix(m.Attachments[0].Title, "deployment-image in "+team) && m.Attachments[0].Title != "deployment-image in "+team+" (3)" {
			t.Errorf("the three image changes of %s in more than one message: %+v", team, m)
		}
	}
}
