// Command demo is `make demo`: it starts a local control plane (the
// kube-apiserver and etcd that `make controlplane` builds) whose audit
// webhook posts to fieldwatch, applies the example Widget CRD and objects,
// runs bin/fieldwatch with the crd-audit and crd-definitions examples and
// attribution on, has three people make a few changes (create, update,
// scale, a status-only change, a CRD installed at runtime, a breaking
// change to the Widget CRD, delete), shows the payloads that fired (who
// made each change; for the CRD change, the checks and the widgets it
// breaks) and the history fieldwatch kept of them (fieldwatch history,
// and the page to open), and stops everything it started.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		_, _ = fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}

var (
	widgets = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	crds    = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

func run(ctx context.Context) error {
	hold := flag.Bool("hold", false, "keep the control plane and fieldwatch running until Ctrl-C after the scripted changes")
	flag.Parse()
	start := time.Now()
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "fieldwatch-demo-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()

	say("starting a local control plane (kube-apiserver + etcd from bin/) that audits writes and posts the events to fieldwatch")
	c, err := startCluster(dir)
	if err != nil {
		return err
	}
	defer func() {
		say("stopping the control plane")
		_ = c.env.Stop()
	}()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := c.env.Kubeconfig(kubeconfig); err != nil {
		return err
	}
	say("applying examples/crds/widgets.yaml and examples/crd-audit/widgets.yaml")
	if _, err := c.env.ApplyFiles(ctx, testenv.ApplyOptions{FieldManager: "kubectl"},
		filepath.Join(root, "examples/crds/widgets.yaml"), filepath.Join(root, "examples/crd-audit/widgets.yaml")); err != nil {
		return err
	}

	fw, err := startFieldwatch(ctx, root, kubeconfig, filepath.Join(dir, "state"), c)
	if err != nil {
		return err
	}
	defer fw.stop()
	say("fieldwatch is ready (http://%s/metrics); the objects that existed before it started fire nothing", fw.addr)
	if err := fw.warmUp(ctx, c); err != nil {
		return err
	}

	steps, err := changes(ctx, c, root)
	if err != nil {
		return err
	}
	fired := 0
	deadline := time.After(30 * time.Second)
	for _, step := range steps {
		say("%s", step.what)
		if err := step.do(); err != nil {
			return fmt.Errorf("%s: %w", step.what, err)
		}
		for range step.fires {
			select {
			case line, ok := <-fw.lines:
				if !ok {
					return errors.New("fieldwatch exited")
				}
				fired++
				show(line)
			case <-deadline:
				return fmt.Errorf("expected %d payloads by now, saw %d", step.fires, fired)
			}
		}
		if step.fires == 0 {
			fmt.Println("   (nothing fires)")
		}
	}
	select {
	case line := <-fw.lines:
		return fmt.Errorf("unexpected payload: %s", line)
	case <-time.After(time.Second):
	}
	say("%d payloads, as expected, %s after the start", fired, time.Since(start).Round(100*time.Millisecond))
	if err := showHistory(ctx, root, fw.addr, fired); err != nil {
		return err
	}
	if *hold {
		say("holding: KUBECONFIG=%s kubectl get widgets -A; Ctrl-C to stop", kubeconfig)
		for {
			select {
			case <-ctx.Done():
				return nil
			case line := <-fw.lines:
				show(line)
			}
		}
	}
	return nil
}

// fieldwatch is the running bin/fieldwatch: its HTTP address and its
// payloads, one JSON line each.
type fieldwatch struct {
	cmd   *exec.Cmd
	addr  string
	lines chan string
}

// startFieldwatch runs bin/fieldwatch with the crd-audit and
// crd-definitions rules, the audit webhook receiver and its history in
// stateDir, and waits until it is ready.
func startFieldwatch(ctx context.Context, root, kubeconfig, stateDir string, c *cluster) (*fieldwatch, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	say("running: fieldwatch run --rules examples/crd-audit/rules.yaml --rules examples/crd-definitions/rules.yaml --audit-webhook-addr %s ...", c.auditAddr)
	// The demo's history is read from this machine without a token.
	args := append([]string{"run", "--kubeconfig", kubeconfig, "--http-addr", addr, "--log-level", "warn", "--state-dir", stateDir, "--history-insecure-loopback",
		"--rules", filepath.Join(root, "examples/crd-audit/rules.yaml"),
		"--rules", filepath.Join(root, "examples/crd-definitions/rules.yaml")}, c.fieldwatchArgs()...)
	cmd := exec.Command(filepath.Join(root, "bin/fieldwatch"), args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start fieldwatch (run `make build`): %w", err)
	}
	fw := &fieldwatch{cmd: cmd, addr: addr, lines: make(chan string, 100)}
	go func() {
		defer close(fw.lines)
		s := bufio.NewScanner(stdout)
		s.Buffer(make([]byte, 1<<20), 1<<20)
		for s.Scan() {
			fw.lines <- s.Text()
		}
	}()
	if err := waitFor(ctx, time.Minute, "fieldwatch ready", func() bool {
		code, _ := fw.get("/readyz")
		return code == http.StatusOK
	}); err != nil {
		fw.stop()
		return nil, err
	}
	return fw, nil
}

// warmUp writes a ConfigMap (no rule fires on it) and waits until its
// audit event reached fieldwatch: the apiserver retried its batches until
// fieldwatch listened.
func (fw *fieldwatch) warmUp(ctx context.Context, c *cluster) error {
	if _, err := c.env.Apply(ctx, testenv.ApplyOptions{FieldManager: "kubectl"},
		[]byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: warm-up, namespace: default}\n")); err != nil {
		return err
	}
	return waitFor(ctx, 30*time.Second, "the apiserver's first audit events", func() bool {
		_, body := fw.get("/metrics")
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, `fieldwatch_audit_events_total{result="indexed",source="webhook"} `) && !strings.HasSuffix(line, " 0") {
				return true
			}
		}
		return false
	})
}

func (fw *fieldwatch) get(path string) (int, string) {
	resp, err := http.Get("http://" + fw.addr + path)
	if err != nil {
		return 0, ""
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (fw *fieldwatch) stop() {
	_ = fw.cmd.Process.Signal(syscall.SIGTERM)
	_ = fw.cmd.Wait()
}

func say(format string, args ...any) {
	fmt.Printf("== "+format+"\n", args...)
}

// waitFor polls cond every 100ms until it holds, ctx ends or timeout
// passes.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
	return testenv.Wait(ctx, 100*time.Millisecond, timeout, what, cond)
}
