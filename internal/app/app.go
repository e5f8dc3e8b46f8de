package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/time/rate"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fieldwatch/fieldwatch/rules"
	"github.com/fieldwatch/fieldwatch/rules/action"
	"github.com/fieldwatch/fieldwatch/watcher"
)

// Config is what `fieldwatch run` is told on its command line.
type Config struct {
	// RulesFiles are the rules files, merged.
	RulesFiles []string
	// Rest is the client configuration (in-cluster or kubeconfig).
	Rest *rest.Config
	// HTTPAddr serves /metrics, /healthz and /readyz; "" serves nothing.
	HTTPAddr string
	// StateDir holds the dead-letter file and the restart baseline.
	StateDir string
	// Workers is the number of changes evaluated in parallel.
	Workers int
	// DryRun makes patch actions log instead of patching.
	DryRun bool
	// LeaderElect makes replicas elect one leader through a Lease; only
	// the leader watches and acts.
	LeaderElect bool
	// LeaseNamespace and LeaseName name the Lease.
	LeaseNamespace, LeaseName string
	// Identity names this replica in the Lease (default: host name).
	Identity string
	// Shard and TotalShards split the objects between replicas (0 and 0
	// or 1: no sharding).
	Shard, TotalShards int
	// GracePeriod bounds the drain of queued changes and actions on
	// shutdown.
	GracePeriod time.Duration
	// Logger is the process logger; Stdout the log action's output.
	Logger *slog.Logger
	Stdout io.Writer
	// Ready, if set, is called with the HTTP server's address once it
	// listens (tests use it with HTTPAddr "127.0.0.1:0").
	Ready func(addr string)
	// Pprof serves Go's profiles under /debug/pprof/ on HTTPAddr.
	Pprof bool
	// CRDImpactMaxObjects and CRDImpactTimeout bound the scan of the
	// custom resources a CRD change hits, for rules with crd: {impact:
	// true} (defaults DefaultCRDImpactMaxObjects and
	// DefaultCRDImpactTimeout): a scan that reaches either stops and its
	// payload says so.
	CRDImpactMaxObjects int
	CRDImpactTimeout    time.Duration
}

// App is one running `fieldwatch run`.
type App struct {
	cfg     Config
	log     *slog.Logger
	reg     *prometheus.Registry
	metrics *metrics
	set     atomic.Pointer[rules.Set]
	watcher atomic.Pointer[watcher.Watcher]
	standby atomic.Bool // waiting for leadership
	kube    kubernetes.Interface
	dyn     dynamic.Interface
	disp    atomic.Pointer[action.Dispatcher]
	reload  sync.Mutex
	digest  string // of the loaded rules files' content
}

// Run runs fieldwatch until ctx ends (SIGTERM): it stops watching, lets the
// queued changes and firings drain within the grace period, dead-letters
// what is left, and returns nil. It returns an error when the rules do not
// load or the process cannot start.
func Run(ctx context.Context, cfg Config) error {
	a, err := newApp(cfg)
	if err != nil {
		return err
	}
	return a.run(ctx)
}

func newApp(cfg Config) (*App, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.GracePeriod <= 0 {
		cfg.GracePeriod = 20 * time.Second
	}
	if cfg.CRDImpactMaxObjects <= 0 {
		cfg.CRDImpactMaxObjects = DefaultCRDImpactMaxObjects
	}
	if cfg.CRDImpactTimeout <= 0 {
		cfg.CRDImpactTimeout = DefaultCRDImpactTimeout
	}
	a := &App{cfg: cfg, log: cfg.Logger, reg: prometheus.NewRegistry()}
	a.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a.metrics = newMetrics(a.reg)

	set, digest, err := loadRules(cfg.RulesFiles)
	if err != nil {
		return nil, err
	}
	a.set.Store(set)
	a.digest = digest
	a.metrics.rules.Set(float64(len(set.Rules())))

	if a.kube, err = kubernetes.NewForConfig(cfg.Rest); err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	if a.dyn, err = dynamic.NewForConfig(cfg.Rest); err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	return a, nil
}

func (a *App) run(ctx context.Context) error {
	var bg sync.WaitGroup
	defer bg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	if a.cfg.HTTPAddr != "" {
		srv, ln, err := a.serveHTTP()
		if err != nil {
			return err
		}
		bg.Go(func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				a.log.Error("http server", "err", err)
			}
		})
		defer func() {
			shutdownCtx, done := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer done()
			_ = srv.Shutdown(shutdownCtx)
		}()
	}
	bg.Go(func() { a.watchRules(ctx) })

	if !a.cfg.LeaderElect {
		a.metrics.leader.Set(1)
		return a.serve(ctx)
	}
	return a.elect(ctx, a.serve)
}

// serve watches and acts until ctx ends, then drains: the watcher hands
// over its queued changes, the actions deliver or dead-letter their queued
// firings, and only then is the baseline closed (the actions' completions
// record changes in it).
func (a *App) serve(ctx context.Context) error {
	shard, err := a.shard(ctx)
	if err != nil {
		return err
	}
	store, err := a.openStore()
	if err != nil {
		return err
	}
	if store != nil {
		defer func() {
			if err := store.Close(); err != nil {
				a.log.Error("closing the baseline", "err", err)
			}
		}()
	}
	disp, err := action.New(action.Options{
		Logger:     a.log,
		Registerer: a.reg,
		Stdout:     a.cfg.Stdout,
		StateDir:   a.cfg.StateDir,
		Dynamic:    a.dyn,
		Kube:       a.kube,
		DryRun:     a.cfg.DryRun,
	})
	if err != nil {
		return fmt.Errorf("actions: %w", err)
	}
	a.disp.Store(disp)
	defer func() {
		closeCtx, done := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.GracePeriod/2)
		defer done()
		if err := disp.Close(closeCtx); err != nil {
			a.log.Error("closing actions", "err", err)
		}
	}()
	set := a.set.Load()
	w, err := watcher.New(a.cfg.Rest, watcher.Config{
		Selectors:    set.Selectors(),
		Projection:   set.Projection,
		Namespaces:   set.Namespaces,
		Handler:      &pipeline{app: a, errLog: rate.Sometimes{Interval: time.Second}},
		Workers:      a.cfg.Workers,
		DrainTimeout: a.cfg.GracePeriod / 2,
		Shard:        shard,
		Store:        store,
		Logger:       a.log,
		Registerer:   a.reg,
	})
	if err != nil {
		return fmt.Errorf("watcher: %w", err)
	}
	a.watcher.Store(w)
	a.log.Info("fieldwatch running", "rules", len(set.Rules()), "files", a.cfg.RulesFiles)
	return w.Run(ctx)
}

// openStore opens the restart baseline in the state directory, if any.
func (a *App) openStore() (*watcher.Store, error) {
	if a.cfg.StateDir == "" {
		return nil, nil
	}
	if err := os.MkdirAll(a.cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	return watcher.OpenStore(filepath.Join(a.cfg.StateDir, "baseline.db"), a.log)
}

// serveHTTP listens on HTTPAddr for /metrics, /healthz and /readyz.
func (a *App) serveHTTP() (*http.Server, net.Listener, error) {
	ln, err := net.Listen("tcp", a.cfg.HTTPAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("listen on %s: %w", a.cfg.HTTPAddr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttpHandler(a.reg))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		ready, why := a.ready()
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = io.WriteString(w, why+"\n")
	})
	if a.cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	if a.cfg.Ready != nil {
		a.cfg.Ready(ln.Addr().String())
	}
	return &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, ln, nil
}

// ready says whether the process is ready, and why not.
func (a *App) ready() (bool, string) {
	if a.standby.Load() {
		return true, "standby: another replica leads"
	}
	w := a.watcher.Load()
	if w == nil {
		return false, "starting"
	}
	if !w.Synced() {
		return false, "informers syncing"
	}
	return true, "ok"
}
