// Command demo is `make demo`: it starts a local control plane (the
// kube-apiserver and etcd that `make controlplane` builds), applies the
// example Widget CRD and objects, runs bin/fieldwatch with the crd-audit
// example, makes a few changes (create, update, scale, a status-only change,
// a CRD installed at runtime, delete), shows the JSON lines that fired and
// the history fieldwatch kept of them (fieldwatch history, and the page to
// open), and stops everything it started.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

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

var widgets = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

func run(ctx context.Context) error {
	hold := flag.Bool("hold", false, "keep the control plane and fieldwatch running until Ctrl-C after the scripted changes")
	flag.Parse()
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	say("starting a local control plane (kube-apiserver + etcd from bin/)")
	env, err := testenv.New(testenv.Options{})
	if err != nil {
		return err
	}
	defer func() {
		say("stopping the control plane")
		_ = env.Stop()
	}()
	dir, err := os.MkdirTemp("", "fieldwatch-demo-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		return err
	}

	say("applying examples/crds/widgets.yaml and examples/crd-audit/widgets.yaml")
	if _, err := env.ApplyFiles(ctx, testenv.ApplyOptions{FieldManager: "kubectl"},
		filepath.Join(root, "examples/crds/widgets.yaml"), filepath.Join(root, "examples/crd-audit/widgets.yaml")); err != nil {
		return err
	}

	addr, err := freeAddr()
	if err != nil {
		return err
	}
	rulesFile := filepath.Join(root, "examples/crd-audit/rules.yaml")
	say("running: fieldwatch run --rules examples/crd-audit/rules.yaml --kubeconfig %s", kubeconfig)
	cmd := exec.Command(filepath.Join(root, "bin/fieldwatch"), "run", "--rules", rulesFile,
		"--kubeconfig", kubeconfig, "--http-addr", addr, "--log-level", "warn", "--state-dir", filepath.Join(dir, "state"))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start fieldwatch (run `make build`): %w", err)
	}
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		s := bufio.NewScanner(stdout)
		s.Buffer(make([]byte, 1<<20), 1<<20)
		for s.Scan() {
			lines <- s.Text()
		}
	}()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	if err := waitReady(ctx, "http://"+addr+"/readyz"); err != nil {
		return err
	}
	say("fieldwatch is ready (http://%s/metrics); the objects that existed before it started fire nothing", addr)

	steps, err := changes(ctx, env, root)
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
			case line, ok := <-lines:
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
	case line := <-lines:
		return fmt.Errorf("unexpected payload: %s", line)
	case <-time.After(time.Second):
	}
	say("%d payloads, as expected", fired)
	if err := showHistory(ctx, root, addr, fired); err != nil {
		return err
	}
	if *hold {
		say("holding: KUBECONFIG=%s kubectl get widgets -A; Ctrl-C to stop", kubeconfig)
		for {
			select {
			case <-ctx.Done():
				return nil
			case line := <-lines:
				show(line)
			}
		}
	}
	return nil
}

// step is one scripted change and how many payloads it fires.
type step struct {
	what  string
	do    func() error
	fires int
}

func changes(ctx context.Context, env *testenv.Env, root string) ([]step, error) {
	dyn, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		return nil, err
	}
	w := dyn.Resource(widgets).Namespace("default")
	apply := func(manifest string) func() error {
		return func() error {
			_, err := env.Apply(ctx, testenv.ApplyOptions{FieldManager: "kubectl"}, []byte(manifest))
			return err
		}
	}
	patch := func(name, body string, sub ...string) func() error {
		return func() error {
			_, err := w.Patch(ctx, name, types.MergePatchType, []byte(body), metav1.PatchOptions{FieldManager: "kubectl-patch"}, sub...)
			return err
		}
	}
	return []step{
		{"kubectl apply: create widget default/demo (size 1, blue)",
			apply("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: demo, namespace: default}\nspec: {size: 1, color: blue}\n"), 1},
		{"kubectl patch: demo's color blue -> red", patch("demo", `{"spec":{"color":"red"}}`), 1},
		{"kubectl scale --replicas=3 widget/demo (the scale subresource)", patch("demo", `{"spec":{"replicas":3}}`, "scale"), 1},
		{"a controller sets demo's status (status churn is left out)", patch("demo", `{"status":{"phase":"Ready","size":3}}`, "status"), 0},
		{"install a new CRD at runtime (examples/crds/gadgets.yaml) and create a gadget", func() error {
			if _, err := env.ApplyFiles(ctx, testenv.ApplyOptions{FieldManager: "kubectl"}, filepath.Join(root, "examples/crds/gadgets.yaml")); err != nil {
				return err
			}
			return apply("apiVersion: example.com/v1alpha1\nkind: Gadget\nmetadata: {name: g1, namespace: default}\nspec: {mode: eco}\n")()
		}, 1},
		{"kubectl delete widget default/demo", func() error { return w.Delete(ctx, "demo", metav1.DeleteOptions{}) }, 1},
	}, nil
}

// show prints a payload: a one-line summary, then the JSON.
func show(line string) {
	var p struct {
		Type      string `json:"type"`
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
		Resource  struct {
			Kind string `json:"kind"`
		} `json:"resource"`
		Actor *struct {
			Manager string `json:"manager"`
		} `json:"actor"`
		Changes []struct {
			Path     string `json:"path"`
			Value    any    `json:"value"`
			OldValue any    `json:"oldValue"`
		} `json:"changes"`
	}
	if err := json.Unmarshal([]byte(line), &p); err != nil {
		fmt.Println("   " + line)
		return
	}
	var what []string
	for _, c := range p.Changes {
		what = append(what, fmt.Sprintf("%s: %v -> %v", c.Path, c.OldValue, c.Value))
	}
	summary := []string{p.Type, p.Resource.Kind, p.Namespace + "/" + p.Name}
	if p.Actor != nil {
		summary = append(summary, "by", p.Actor.Manager)
	}
	summary = append(summary, what...)
	fmt.Printf("   -> %s\n", strings.Join(summary, " "))
	fmt.Printf("      %s\n", line)
}

func say(format string, args ...any) {
	fmt.Printf("== "+format+"\n", args...)
}

// freeAddr returns a free 127.0.0.1 port.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().String(), nil
}

func waitReady(ctx context.Context, url string) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return errors.New("fieldwatch not ready after 60s")
}
