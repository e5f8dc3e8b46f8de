package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Options change how the control plane is started.
type Options struct {
	// FeatureGates are passed to kube-apiserver as --feature-gates, for
	// example "ShardedListAndWatch=true".
	FeatureGates []string
	// APIServerArgs are extra kube-apiserver flags, name to values.
	APIServerArgs map[string][]string
	// CRDPaths are files or directories of CRD manifests installed (and
	// waited for) before Start returns.
	CRDPaths []string
	// Audit, when set, turns on the apiserver's auditing.
	Audit *Audit
}

// Env is a running control plane.
type Env struct {
	env     *envtest.Environment
	certDir string
	mu      sync.Mutex // serialises restarts
}

func init() {
	// envtest logs through controller-runtime's logger and warns after 30 s
	// when none is set; the tests read errors, not its progress.
	ctrllog.SetLogger(logr.Discard())
}

// Start starts a control plane for one test and stops it when the test ends.
// It fails the test when the control plane cannot start, and skips it
// under `go test -short` (the unit tier).
func Start(t testing.TB, opts Options) *Env {
	t.Helper()
	SkipShort(t, NeedsControlPlane)
	e, err := New(opts)
	if err != nil {
		t.Fatalf("start control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Errorf("stop control plane: %v", err)
		}
	})
	return e
}

// New starts a control plane; the caller must Stop it. Under `go test
// -short` it refuses with an error: a test that needs a control plane
// skips itself first (SkipShort, or Shared and Start which call it), so
// the unit tier never starts one by mistake.
func New(opts Options) (*Env, error) {
	if err := refuseShort(NeedsControlPlane); err != nil {
		return nil, err
	}
	assets, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	certDir, err := os.MkdirTemp("", "fieldwatch-certs-")
	if err != nil {
		return nil, fmt.Errorf("cert dir: %w", err)
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		CRDDirectoryPaths:        opts.CRDPaths,
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: 90 * time.Second,
		ControlPlaneStopTimeout:  60 * time.Second,
	}
	// A fixed certificate directory lets RestartAPIServer bring the
	// apiserver back with the same serving certificate, so that clients
	// created before the restart keep working.
	api := env.ControlPlane.GetAPIServer()
	api.CertDir = certDir
	args := api.Configure()
	// Without a grace period kube-apiserver does not end open watches on
	// SIGTERM and waits for them until envtest kills it: stopping it for a
	// fault test would take a minute instead of a second.
	args.Set("shutdown-watch-termination-grace-period", "2s")
	if len(opts.FeatureGates) > 0 {
		args.Set("feature-gates", strings.Join(opts.FeatureGates, ","))
	}
	if opts.Audit != nil {
		auditArgs, err := opts.Audit.args(certDir)
		if err != nil {
			_ = os.RemoveAll(certDir)
			return nil, err
		}
		for name, values := range auditArgs {
			args.Set(name, values...)
		}
	}
	for name, values := range opts.APIServerArgs {
		args.Set(name, values...)
	}
	if _, err := env.Start(); err != nil {
		_ = env.Stop()
		_ = os.RemoveAll(certDir)
		return nil, fmt.Errorf("envtest with binaries in %s: %w", assets, err)
	}
	return &Env{env: env, certDir: certDir}, nil
}

// Stop stops the apiserver and etcd and removes their data.
func (e *Env) Stop() error {
	err := e.env.Stop()
	return errors.Join(err, os.RemoveAll(e.certDir))
}

// Config returns a fresh copy of the admin rest.Config.
func (e *Env) Config() *rest.Config {
	return rest.CopyConfig(e.env.Config)
}

// Dynamic returns a dynamic client for the admin user.
func (e *Env) Dynamic(t testing.TB) dynamic.Interface {
	t.Helper()
	c, err := dynamic.NewForConfig(e.Config())
	if err != nil {
		t.Fatalf("dynamic client: %v", err)
	}
	return c
}

// Clientset returns a typed client for the admin user.
func (e *Env) Clientset(t testing.TB) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(e.Config())
	if err != nil {
		t.Fatalf("clientset: %v", err)
	}
	return c
}

// Kubeconfig writes a kubeconfig for the admin user into path.
func (e *Env) Kubeconfig(path string) error {
	return os.WriteFile(path, e.env.KubeConfig, 0o600)
}

// WriteKubeconfig writes the admin kubeconfig into the test's temporary
// directory and returns its path.
func (e *Env) WriteKubeconfig(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := e.Kubeconfig(path); err != nil {
		t.Fatalf("write kubeconfig: %v", err)
	}
	return path
}

// UserKubeconfig provisions a user with the given groups (for example a
// service account's identity is better reached through impersonation) and
// returns a kubeconfig for it.
func (e *Env) UserKubeconfig(name string, groups ...string) ([]byte, *rest.Config, error) {
	u, err := e.env.AddUser(envtest.User{Name: name, Groups: groups}, &rest.Config{QPS: 1000, Burst: 2000})
	if err != nil {
		return nil, nil, fmt.Errorf("add user %s: %w", name, err)
	}
	kc, err := u.KubeConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("kubeconfig for %s: %w", name, err)
	}
	return kc, u.Config(), nil
}

// InstallCRDs installs the CRD manifests found in paths (files or
// directories) and waits until they are served.
func (e *Env) InstallCRDs(paths ...string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	return envtest.InstallCRDs(e.Config(), envtest.CRDInstallOptions{
		Paths:              paths,
		ErrorIfPathMissing: true,
	})
}

// InstallCRD installs one CRD and waits until it is served.
func (e *Env) InstallCRD(crd *apiextensionsv1.CustomResourceDefinition) error {
	_, err := envtest.InstallCRDs(e.Config(), envtest.CRDInstallOptions{
		CRDs: []*apiextensionsv1.CustomResourceDefinition{crd},
	})
	return err
}

// RestartAPIServer stops kube-apiserver and starts it again on the same
// port with the same certificate; etcd keeps running, so no data is lost.
func (e *Env) RestartAPIServer(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.StopAPIServer(); err != nil {
		return err
	}
	return e.StartAPIServer(ctx)
}

// StopAPIServer stops kube-apiserver only.
func (e *Env) StopAPIServer() error {
	if err := e.env.ControlPlane.GetAPIServer().Stop(); err != nil {
		return fmt.Errorf("stop kube-apiserver: %w", err)
	}
	return nil
}

// StartAPIServer starts a stopped kube-apiserver again and waits until it
// answers.
func (e *Env) StartAPIServer(ctx context.Context) error {
	if err := e.env.ControlPlane.GetAPIServer().Start(); err != nil {
		return fmt.Errorf("start kube-apiserver: %w", err)
	}
	cs, err := kubernetes.NewForConfig(e.Config())
	if err != nil {
		return err
	}
	return Wait(ctx, 100*time.Millisecond, 0, "kube-apiserver to answer after its restart", func() bool {
		_, err := cs.Discovery().ServerVersion()
		return err == nil
	})
}

// KillAPIServer kills kube-apiserver with SIGKILL (no graceful shutdown:
// open watches break mid-stream), then lets envtest notice, so that
// StartAPIServer can bring it back.
func (e *Env) KillAPIServer() error {
	api := e.env.ControlPlane.GetAPIServer()
	port := api.Port
	pid, err := findProcess("kube-apiserver", "--secure-port="+port)
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill kube-apiserver %d: %w", pid, err)
	}
	return e.StopAPIServer()
}

// findProcess returns the pid of the process whose program ends in name
// and whose arguments include arg.
func findProcess(name, arg string) (int, error) {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if len(args) == 0 || !strings.HasSuffix(args[0], name) {
			continue
		}
		for _, a := range args[1:] {
			if a == arg {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("no %s process with %s", name, arg)
}

// EtcdURL returns the URL of the control plane's etcd.
func (e *Env) EtcdURL() string { return e.env.ControlPlane.Etcd.URL.String() }

// CompactEtcd compacts etcd's history up to its current revision, through
// etcd's JSON gateway: watches resuming from an older resourceVersion then
// get 410 Gone and must relist.
func (e *Env) CompactEtcd(ctx context.Context) (int64, error) {
	post := func(path, body string, out any) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.EtcdURL()+path, strings.NewReader(body))
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("etcd %s: %s: %s", path, resp.Status, b)
		}
		return json.Unmarshal(b, out)
	}
	var status struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	// Any range request returns the current revision in its header.
	if err := post("/v3/kv/range", `{"key":"AA=="}`, &status); err != nil {
		return 0, err
	}
	rev, err := strconv.ParseInt(status.Header.Revision, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("etcd revision %q: %w", status.Header.Revision, err)
	}
	var done map[string]any
	if err := post("/v3/kv/compaction", fmt.Sprintf(`{"revision":"%d","physical":true}`, rev), &done); err != nil {
		return 0, err
	}
	return rev, nil
}
