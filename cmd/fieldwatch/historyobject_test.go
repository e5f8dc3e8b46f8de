package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fieldwatch/fieldwatch/internal/history/web"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// TestHistoryObjectCLI: fieldwatch history show and diff against a
// running fieldwatch that keeps a ConfigMap's states (its password
// redacted) and offline on its state directory: the object as a client
// read it, the unified diff and the changes between two times, and
// clear errors (exit 2) for bad input.
func TestHistoryObjectCLI(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	ns := namespace(t, env, "history-states")
	kc := env.WriteKubeconfig(t)
	rules := writeFile(t, "rules.yaml", `rules:
  - name: states
    match: {resources: [{group: "", kind: ConfigMap}], namespaces: [`+ns+`]}
    on: [delete]
    redact: [data.password]
    history: {states: true}
    actions: [{log: {}}]
`)
	dir := t.TempDir()
	p := startFieldwatch(t, kc, "--rules", rules, "--state-dir", dir, "--http-addr", "127.0.0.1:0", "--history-insecure-loopback")
	server := "http://" + p.httpAddr()
	cli := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append([]string{"history"}, args...), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	ctx := context.Background()
	cms := env.Clientset(t).CoreV1().ConfigMaps(ns)
	// waitFor polls show until the history's state is rv, and returns a
	// time after it.
	waitFor := func(rv string) time.Time {
		t.Helper()
		testenv.EventuallyWhy(t, time.Minute, "the state of resourceVersion "+rv, func() (bool, string) {
			code, out, stderr := cli("show", "configmaps", ns+"/c1", "--server", server, "-o", "json")
			var o web.APIObject
			if code != 0 || json.Unmarshal([]byte(out), &o) != nil {
				return false, stderr
			}
			return o.Last.ResourceVersion == rv, "last " + o.Last.ResourceVersion
		})
		return time.Now()
	}
	cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c1"}, Data: map[string]string{"k": "1", "password": "hunter1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tA := waitFor(cm.ResourceVersion)
	for _, v := range []string{"2", "3"} {
		cm.Data = map[string]string{"k": v, "password": "hunter" + v}
		if cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tB := waitFor(cm.ResourceVersion)
	at := tB.UTC().Format(time.RFC3339Nano)

	code, out, stderr := cli("show", "configmaps", ns+"/c1", "--at", at, "--server", server, "-o", "json")
	var o web.APIObject
	if code != 0 || json.Unmarshal([]byte(out), &o) != nil {
		t.Fatalf("show -o json: exit %d\n%s%s", code, out, stderr)
	}
	var got corev1.ConfigMap
	if err := json.Unmarshal(o.Object, &got); err != nil {
		t.Fatal(err)
	}
	if got.Data["k"] != "3" || got.Data["password"] != "<redacted>" || got.ResourceVersion != cm.ResourceVersion || got.UID != cm.UID || len(got.ManagedFields) != 0 {
		t.Errorf("show -o json: %+v", got)
	}
	code, yamlOut, stderr := cli("show", "configmaps", ns+"/c1", "--at", at, "--server", server)
	if code != 0 || !strings.Contains(yamlOut, "# last change: updated at ") || !strings.Contains(yamlOut, "\n  k: \"3\"\n") ||
		!strings.Contains(yamlOut, "password: <redacted>") {
		t.Errorf("show: exit %d\n%s%s", code, yamlOut, stderr)
	}
	// Offline, the same.
	if code, out, stderr := cli("show", "configmaps", ns+"/c1", "--at", at, "--state-dir", dir); code != 0 || out != yamlOut {
		t.Errorf("show --state-dir: exit %d\n%s%s\nwant\n%s", code, out, stderr, yamlOut)
	}
	code, out, stderr = cli("diff", "configmaps", ns+"/c1", "--from", tA.UTC().Format(time.RFC3339Nano), "--to", at, "--server", server)
	if code != 0 || !strings.Contains(out, "\n-  k: \"1\"\n") || !strings.Contains(out, "\n+  k: \"3\"\n") || !strings.Contains(out, "2 change(s) between:") ||
		strings.Contains(out, "hunter") {
		t.Errorf("diff: exit %d\n%s%s", code, out, stderr)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"show", "configmaps", ns + "/c1", "--at", "yesterday", "--server", server}, "want an RFC 3339 time"},
		{[]string{"show", "configmaps", ns + "/c1", "--at", "2199-01-01T00:00:00Z", "--server", server}, "in the future"},
		{[]string{"show", "configmaps", ns + "/c1", "--at", "24h", "--server", server}, "before the oldest recorded state"},
		{[]string{"show", "configmaps", ns + "/c1", "--at", "24h", "--state-dir", dir}, "before the oldest recorded state"},
		{[]string{"show", "configmaps", ns + "/never", "--server", server}, "no recorded states"},
		{[]string{"show", "nosuchresources", ns + "/c1", "--state-dir", dir}, "no recorded states"},
		{[]string{"show", "configmaps", "--server", server}, "want RESOURCE[.GROUP] and [NAMESPACE/]NAME, got 1"},
		{[]string{"show", "configmaps", ns + "/c1", "-o", "table"}, `-o "table"`},
		{[]string{"diff", "configmaps", ns + "/c1", "--from", at, "--to", tA.UTC().Format(time.RFC3339Nano)}, "--from must be before --to"},
		{[]string{"diff", "configmaps", ns + "/c1", "--to", at}, "--from: no time"},
	} {
		if code, out, stderr := cli(tc.args...); code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, want 2 saying %q\n%s%s", tc.args, code, tc.want, out, stderr)
		}
	}
}
