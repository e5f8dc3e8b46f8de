package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// runCLI runs the command line in process.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// cliCase is one run of the command line in process and what it must
// give.
type cliCase struct {
	name   string
	args   []string
	code   int
	stdout string // regexp the output must match ("": anything)
	stderr string // regexp the errors must match
}

// runCLICases runs each case as a subtest.
func runCLICases(t *testing.T, tests []cliCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, stdout, stderr)
			}
			if tt.stdout != "" && !regexp.MustCompile(tt.stdout).MatchString(stdout) {
				t.Errorf("stdout does not match %q:\n%s", tt.stdout, stdout)
			}
			if tt.stderr != "" && !regexp.MustCompile(tt.stderr).MatchString(stderr) {
				t.Errorf("stderr does not match %q:\n%s", tt.stderr, stderr)
			}
		})
	}
}

// TestCLI is not parallel: its run cases set klog's global logger, which
// client-go in the other tests' goroutines reads. Parallel tests start
// once it is done.
func TestCLI(t *testing.T) {
	bad := writeFile(t, "bad.yaml", "rules:\n  - name: x\n    match: {resources: [{group: '', kind: ConfigMap}]}\n    fields: [spec..size]\n    actions: [{webhook: {url: 'ftp://nowhere'}}]\n")
	failing := writeFile(t, "cases.yaml", `cases:
  - name: expects a firing that does not happen
    type: updated
    resource: {group: example.com, version: v1, resource: widgets, kind: Widget, namespaced: true, custom: true}
    oldObject: {apiVersion: example.com/v1, kind: Widget, metadata: {name: w, namespace: default, uid: u, resourceVersion: "1"}, spec: {size: 1}}
    object: {apiVersion: example.com/v1, kind: Widget, metadata: {name: w, namespace: default, uid: u, resourceVersion: "2"}, spec: {size: 1}}
    expect: {fire: [crd-audit]}
`)
	crdKeys := writeFile(t, "crd.yaml", "rules:\n  - name: x\n    match: {resources: [{group: '', kind: ConfigMap}]}\n    when: crd.breaking > 0\n"+
		"    crd: {impact: yes}\n    actions: [{log: {}}]\n")
	users := writeFile(t, "users.yaml", "rules:\n  - name: humans\n    match: {resources: [{group: '', kind: ConfigMap}], excludeUsers: ['system:serviceaccount:*']}\n    actions: [{log: {}}]\n")
	badUsers := writeFile(t, "badusers.yaml", "rules:\n  - name: x\n    match: {resources: [{group: '', kind: ConfigMap}], users: ['group:', 'a\\']}\n    actions: [{log: {}}]\n")
	kubeconfig := writeFile(t, "kc", "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {}}]\ncurrent-context: c\n")
	audit := repo(t, "examples/crd-audit/rules.yaml")
	tests := []cliCase{
		{name: "help", args: []string{"--help"}, code: 0, stdout: `(?s)run.*validate.*test.*api-resources.*rbac.*version`},
		{name: "no command", args: nil, code: 2, stderr: `Usage`},
		{name: "unknown command", args: []string{"frobnicate"}, code: 2, stderr: `unknown command "frobnicate"`},
		{name: "version", args: []string{"version"}, code: 0, stdout: `^fieldwatch \S+ \(go1\.\d+.*client-go v0\.37\.2`},
		{name: "validate a valid file", args: []string{"validate", audit}, code: 0, stdout: `1 file\(s\) valid`},
		{name: "validate reports every error with its position", args: []string{"validate", bad}, code: 1,
			stderr: `(?s)bad\.yaml:4:\d+: rules\[0\]\.fields\[0\].*bad\.yaml:5:\d+: rules\[0\]\.actions\[0\]\.webhook\.url`},
		{name: "validate without files", args: []string{"validate"}, code: 2},
		{name: "validate checks crd", args: []string{"validate", crdKeys}, code: 1,
			stderr: `(?s)crd\.yaml:4:11: rules\[0\]\.when: CEL: undeclared reference to 'crd' \(crd is declared only in rules whose every match.resources entry selects CustomResourceDefinitions.*` +
				`crd\.yaml:5:10: rules\[0\]\.crd: only rules that match CustomResourceDefinitions only have crd.*` +
				`crd\.yaml:5:19: rules\[0\]\.crd\.impact: must be true or false, not "yes"`},
		{name: "test the cases of CRD changes", args: []string{"test", "-q", "--rules", repo(t, "examples/crd-definitions/rules.yaml"), repo(t, "examples/crd-definitions/cases.yaml")},
			code: 0, stdout: `^16 of 16 cases passed`},
		{name: "test passing cases", args: []string{"test", "--rules", audit, repo(t, "examples/crd-audit/cases.yaml")}, code: 0, stdout: `5 of 5 cases passed`},
		{name: "test a failing case", args: []string{"test", "--rules", audit, failing}, code: 1, stdout: `(?s)FAIL expects a firing.*0 of 1 cases passed`},
		{name: "test with broken rules", args: []string{"test", "--rules", bad, failing}, code: 1, stderr: `bad\.yaml:4`},
		{name: "run without rules", args: []string{"run"}, code: 2, stderr: `--rules FILE is required`},
		{name: "run with broken rules", args: []string{"run", "--rules", bad, "--kubeconfig", writeFile(t, "kc", "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {}}]\ncurrent-context: c\n"), "--http-addr", ""},
			code: 1, stderr: `bad\.yaml:4`},
		{name: "validate checks users", args: []string{"validate", badUsers}, code: 1,
			stderr: `(?s)badusers\.yaml:3:\d+: rules\[0\]\.match\.users\[0\]: "group:" names no group.*rules\[0\]\.match\.users\[1\]: .* is not a valid glob`},
		{name: "run with user rules and no audit source", args: []string{"run", "--rules", users, "--kubeconfig", kubeconfig, "--http-addr", ""},
			code: 1, stderr: `rules humans use match\.users, match\.excludeUsers or the audit fields of the CEL actor.*set --audit-webhook-addr or --audit-log`},
		{name: "run with a client CA and no client name", args: []string{"run", "--rules", users, "--kubeconfig", kubeconfig, "--http-addr", "",
			"--audit-webhook-addr", "127.0.0.1:0", "--audit-webhook-cert-file", kubeconfig, "--audit-webhook-key-file", kubeconfig, "--audit-webhook-client-ca-file", kubeconfig},
			code: 1, stderr: `--audit-webhook-client-ca-file needs --audit-webhook-client-name: the name of the apiserver's client certificate`},
		{name: "run with an empty client name", args: []string{"run", "--rules", users, "--audit-webhook-client-name", "kube-apiserver,"},
			code: 2, stderr: `invalid value "kube-apiserver," for flag -audit-webhook-client-name: an empty name`},
		{name: "run with a bad --audit-webhook-max-body", args: []string{"run", "--rules", users, "--audit-webhook-max-body", "lots"},
			code: 2, stderr: `invalid value "lots" for flag -audit-webhook-max-body`},
		{name: "run with a bad --crd-guard", args: []string{"run", "--rules", users, "--crd-guard", "block"},
			code: 2, stderr: `--crd-guard: crd guard mode "block": want off, warn or deny`},
		{name: "run with --history-dsn and --history-dsn-file", args: []string{"run", "--rules", audit, "--history-dsn", "host=x", "--history-dsn-file", kubeconfig},
			code: 2, stderr: `give --history-dsn or --history-dsn-file, not both`},
		{name: "run with an empty --history-dsn-file", args: []string{"run", "--rules", audit, "--history-dsn-file", writeFile(t, "dsn", "\n")},
			code: 2, stderr: `--history-dsn-file .*dsn is empty`},
		{name: "run with a missing --history-dsn-file", args: []string{"run", "--rules", audit, "--history-dsn-file", "/nonexistent/dsn"},
			code: 2, stderr: `--history-dsn-file: open /nonexistent/dsn`},
		{name: "run with the history's bytes in flight under a response's", args: []string{"run", "--rules", audit, "--kubeconfig", kubeconfig, "--http-addr", "",
			"--history-max-response-bytes", "8Mi", "--history-max-bytes-in-flight", "1Mi"},
			code: 1, stderr: `--history-max-bytes-in-flight 1048576: at least --history-max-response-bytes \(8388608\)`},
		{name: "rbac offline", args: []string{"rbac", "--offline", "--rules", audit, "--crds", repo(t, "examples/crds")}, code: 0,
			stdout: `(?s)kind: ClusterRole.*- example\.com\n  resources:\n  - gadgets\n  - widgets.*kind: ClusterRoleBinding`},
		{name: "rbac offline refuses every custom resource without CRDs", args: []string{"rbac", "--offline", "--rules", audit}, code: 1,
			stderr: `rule crd-audit \(.*rules\.yaml:\d+:\d+\): selects every custom resource of every group: offline, .*--crds FILE`},
	}
	runCLICases(t, tests)
}

// TestAPIResources lists what the control plane serves, the example CRD
// marked as such.
func TestAPIResources(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	if _, err := env.ApplyFiles(context.Background(), testenv.ApplyOptions{}, repo(t, "examples/crds/widgets.yaml")); err != nil {
		t.Fatal(err)
	}
	kc := env.WriteKubeconfig(t)
	code, stdout, stderr := runCLI(t, "api-resources", "--kubeconfig", kc)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := map[string]string{}
	for _, line := range strings.Split(stdout, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			lines[f[0]] = line
		}
	}
	if !regexp.MustCompile(`^widgets\s+example\.com/v1\s+true\s+Widget\s+crd$`).MatchString(lines["widgets"]) {
		t.Errorf("widgets line: %q", lines["widgets"])
	}
	if !regexp.MustCompile(`^configmaps\s+v1\s+true\s+ConfigMap\s*$`).MatchString(lines["configmaps"]) {
		t.Errorf("configmaps line: %q", lines["configmaps"])
	}
	code, stdout, _ = runCLI(t, "api-resources", "--kubeconfig", kc, "--custom")
	if code != 0 || strings.Contains(stdout, "configmaps") || !strings.Contains(stdout, "widgets") {
		t.Errorf("--custom: exit %d\n%s", code, stdout)
	}
}

// TestValidateStopsOnSIGTERM sends SIGTERM to `fieldwatch validate` (and
// `fieldwatch test`) stuck reading a rules file that never ends (a FIFO
// held open, never written): it exits at once with 1 and says so.
func TestValidateStopsOnSIGTERM(t *testing.T) {
	t.Parallel()
	for _, cmdline := range []string{"validate FIFO", "test --rules FIFO FIFO"} {
		t.Run(cmdline, func(t *testing.T) {
			fifo := filepath.Join(t.TempDir(), "rules.yaml")
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(binary, strings.Fields(strings.ReplaceAll(cmdline, "FIFO", fifo))...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// Opening the FIFO for writing returns once fieldwatch has
			// opened it for reading: it is then reading the rules.
			opened := make(chan *os.File, 1)
			go func() {
				w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
				if err != nil {
					t.Error(err)
				}
				opened <- w
			}()
			select {
			case w := <-opened:
				defer func() { _ = w.Close() }()
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatal("fieldwatch did not open the rules file")
			}
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			select {
			case err := <-exited:
				if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(stderr.String(), "interrupted") {
					t.Errorf("exit %d (%v), want 1; stderr: %s", code, err, stderr.String())
				}
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatalf("still running 30s after SIGTERM; stderr: %s", stderr.String())
			}
		})
	}
}

// TestTestCommandStopsCostlyRules: `fieldwatch test` on a rule that would
// match a regex of 10,003 instructions against 1 MiB (3 minutes of RE2
// before) fails the case quickly and says the cost limit stopped it.
func TestTestCommandStopsCostlyRules(t *testing.T) {
	t.Parallel()
	rulesFile := writeFile(t, "rules.yaml", "rules:\n  - name: costly\n    match: {resources: [{group: '', kind: ConfigMap}]}\n"+
		"    when: object.data.v.matches('"+strings.Repeat("a{1000}", 10)+"b')\n    actions: [{log: {}}]\n")
	casesFile := writeFile(t, "cases.yaml", "cases:\n  - name: a large value\n    type: created\n    resource: {resource: configmaps}\n"+
		"    object: {apiVersion: v1, kind: ConfigMap, metadata: {name: c, namespace: d}, data: {v: "+strings.Repeat("a", 1<<20)+"}}\n"+
		"    expect: {fire: []}\n")
	type result struct {
		code           int
		stdout, stderr string
	}
	done := make(chan result, 1)
	go func() {
		code, stdout, stderr := runCLI(t, "test", "--rules", rulesFile, casesFile)
		done <- result{code, stdout, stderr}
	}()
	select {
	case r := <-done:
		want := regexp.MustCompile(`(?s)^FAIL a large value \(.*cases\.yaml:2:5\)\n  error: rule costly: when: cost limit exceeded: matches would cost 262249858 units .*\n0 of 1 cases passed\n$`)
		if r.code != 1 || !want.MatchString(r.stdout) {
			t.Errorf("exit %d, want 1; stdout does not match %s:\n%.2000s\nstderr: %s", r.code, want, r.stdout, r.stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("fieldwatch test still runs after 30s")
	}
}
