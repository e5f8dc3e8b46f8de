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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/time/rate"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fieldwatch/fieldwatch/action"
	"github.com/fieldwatch/fieldwatch/fieldmetrics"
	"github.com/fieldwatch/fieldwatch/internal/audit"
	"github.com/fieldwatch/fieldwatch/internal/connlimit"
	"github.com/fieldwatch/fieldwatch/internal/crdguard"
	"github.com/fieldwatch/fieldwatch/rules"
	"github.com/fieldwatch/fieldwatch/watcher"
)

// Config is what `fieldwatch run` is told on its command line.
type Config struct {
	// RulesFiles are the rules files, merged.
	RulesFiles []string
	// Rest is the client configuration (in-cluster or kubeconfig).
	Rest *rest.Config
	// HTTPAddr serves /metrics, /healthz and /readyz, and the history's
	// API and pages unless History.Addr names a listener of their own;
	// "" serves nothing.
	HTTPAddr string
	// HTTPIdleTimeout closes a keep-alive connection of any of the HTTP
	// servers (HTTPAddr, PprofAddr, the audit webhook receiver) after this
	// long without a request (default connlimit.DefaultIdleTimeout).
	HTTPIdleTimeout time.Duration
	// StateDir holds the dead-letter file and the restart baseline.
	StateDir string
	// Workers is the number of changes evaluated in parallel (default
	// DefaultWorkers).
	Workers int
	// DryRun makes patch actions log instead of patching.
	DryRun bool
	// ExternalURL is where users reach this fieldwatch (its history
	// page): the notification actions link to it. "" for no links.
	ExternalURL string
	// ClusterName names the cluster: every payload's cluster, the
	// history's chain and checkpoints, and notifications.
	ClusterName string
	// LeaderElect makes replicas elect one leader through a Lease. Every
	// replica watches; only the leader evaluates and acts. It publishes its
	// watermarks on the Lease with each renewal, and a standby keeps the
	// changes they do not cover yet, to deliver them when it takes over
	// (docs/guarantees.md, High availability).
	LeaderElect bool
	// LeaseNamespace and LeaseName name the Lease (LeaseName default
	// DefaultLeaseName; with TotalShards > 1 that default becomes
	// fieldwatch-shard-N-of-M: each shard elects its own leader).
	LeaseNamespace, LeaseName string
	// Identity names this replica in the Lease (default: host name): a
	// process holds the Lease as Identity_<an ID of the process>, and one
	// that starts again under the same name releases the Lease its
	// previous process held, for the other replicas.
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod time the leader
	// election (defaults DefaultLeaseDuration, DefaultRenewDeadline,
	// DefaultRetryPeriod): a standby takes over LeaseDuration after the
	// leader's last renewal; a leader that could not renew for
	// RenewDeadline stops delivering; renewals (and the watermarks
	// published with them) come every RetryPeriod.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Shard and TotalShards split the objects between replicas (0 and 0
	// or 1: no sharding).
	Shard, TotalShards int
	// GracePeriod bounds the drain of queued changes and actions on
	// shutdown (default DefaultGracePeriod). Then what is left is
	// dead-lettered; a leader (leader election) drains while still
	// holding its Lease and hands what is left over to the next leader
	// instead.
	GracePeriod time.Duration
	// Logger is the process logger; Stdout the log action's output.
	Logger *slog.Logger
	Stdout io.Writer
	// Ready, if set, is called with the HTTP server's address once it
	// listens (tests use it with HTTPAddr "127.0.0.1:0").
	Ready func(addr string)
	// CRDImpactMaxObjects and CRDImpactTimeout bound the scan of the
	// custom resources a CRD change hits, for rules with crd: {impact:
	// true} (defaults DefaultCRDImpactMaxObjects and
	// DefaultCRDImpactTimeout): a scan that reaches either stops and its
	// payload says so.
	CRDImpactMaxObjects int
	CRDImpactTimeout    time.Duration
	// PprofAddr, when set, serves Go's profiles under /debug/pprof/ on a
	// listener of their own at this address, which must be a loopback
	// one (127.0.0.1:6060, localhost:6060, [::1]:6060): profiles show
	// memory contents and cost CPU, and take no authentication, so they
	// are never served on HTTPAddr nor on another interface. Reach them
	// with kubectl port-forward.
	PprofAddr string
	// Queue bounds the changes waiting for a worker, each write its own:
	// per object and in total, in changes and bytes (zero fields take
	// watcher's defaults). At a bound the watcher slows down.
	Queue watcher.QueueLimits
	// Audit turns on attribution from the Kubernetes audit stream; its
	// zero value leaves it off.
	Audit AuditConfig
	// Admission turns on attribution from fieldwatch's own admission
	// webhook; its zero value leaves it off.
	Admission AdmissionConfig
	// History keeps what fired, served on HTTPAddr or History.Addr
	// (/api/v1/history, /history); its zero value keeps it in StateDir.
	History HistoryConfig
	// DiscoveryInterval is how often discovery runs besides when CRDs or
	// APIServices change (default DefaultDiscoveryInterval): without the
	// right to list them (a namespaced install) it is how soon a new
	// CRD's resources are watched.
	DiscoveryInterval time.Duration
	// CRDGuard turns on the CRD guard and its storage-version ledger;
	// its zero value leaves them off.
	CRDGuard CRDGuardConfig
	// Metrics turns on metrics from fields; its zero value serves what
	// the rules files' metrics sections define, if any, on no listener.
	Metrics MetricsConfig
	// MetricsReady, if set, is called with the metrics listener's
	// address once it listens (tests).
	MetricsReady func(addr string)
	// Namespaces, when set, confine fieldwatch to these namespaces (a
	// namespaced install, whose RBAC is Roles in them): it watches
	// namespaced resources in these only, a rule without
	// match.namespaces in all of them, and refuses rules that name
	// another namespace or select cluster-scoped resources
	// (rules.Set.CheckNamespaced).
	Namespaces []string
}

// checkLoopback returns an error unless addr (host:port) names a
// loopback host.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("pprof address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("pprof address %q is not a loopback address (127.0.0.1, ::1 or localhost): profiles are served on this host only", addr)
	}
	return nil
}

// checkRules rejects a rule set that this process cannot run: rules that
// need attribution without an audit source, and in a namespaced install
// rules that reach outside it.
func (a *app) checkRules(ctx context.Context, set *rules.Set) error {
	if !a.cfg.attributing() {
		if names := set.UsesAttribution(); len(names) > 0 {
			return errNeedsAudit(names)
		}
	}
	return a.checkNamespaced(ctx, set)
}

// app is one running `fieldwatch run`.
type app struct {
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

	// auditMetrics, admissionMetrics, auditSink and auditScope serve
	// attribution (Config.Audit, Config.Admission).
	auditMetrics     *audit.Metrics
	admissionMetrics *audit.AdmissionMetrics
	auditSink        auditSwitch
	auditScope       atomic.Pointer[auditScope]

	// conns count the HTTP servers' connections; connCaps are the caps of
	// their listeners, by server name (connectionCaps).
	conns    *connlimit.Metrics
	connCaps map[string]int

	// history is nil without one (Config.History).
	history *historyState

	// guard is the CRD guard, nil when it is off (Config.CRDGuard).
	guard atomic.Pointer[crdguard.Guard]

	// metricSet is the metrics configuration (nil: none); fields serves
	// it (nil without one).
	metricSet atomic.Pointer[fieldmetrics.Set]
	fields    *fieldMetrics

	// admissionListening is set once the admission endpoint listens: a
	// replica is not ready before (the Service would send it the
	// apiserver's calls).
	admissionListening atomic.Bool
}

// Run runs fieldwatch until ctx ends (SIGTERM): it stops watching, lets the
// queued changes and firings drain within the grace period, dead-letters
// what is left, and returns nil. It returns an error when the rules do not
// load or the process cannot start.
func Run(ctx context.Context, cfg Config) error {
	a, err := newApp(ctx, cfg)
	if err != nil {
		return err
	}
	return a.run(ctx)
}

func newApp(ctx context.Context, cfg Config) (*app, error) {
	cfg = cfg.withDefaults()
	if cfg.PprofAddr != "" {
		if err := checkLoopback(cfg.PprofAddr); err != nil {
			return nil, err
		}
	}
	a := &app{cfg: cfg, log: cfg.Logger, reg: prometheus.NewRegistry()}
	a.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a.metrics = newMetrics(a.reg)
	a.conns = connlimit.NewMetrics(a.reg)

	if err := cfg.Audit.check(cfg.TotalShards); err != nil {
		return nil, err
	}
	if err := cfg.Admission.check(cfg.TotalShards); err != nil {
		return nil, err
	}
	if err := cfg.History.check(); err != nil {
		return nil, err
	}
	set, digest, err := loadRules(cfg.RulesFiles, cfg.Metrics.File)
	if err != nil {
		return nil, err
	}
	if err := a.checkRules(ctx, set); err != nil {
		return nil, err
	}
	if cfg.attributing() {
		a.auditMetrics = audit.NewMetrics(a.reg)
	}
	if cfg.Admission.enabled() {
		a.admissionMetrics = audit.NewAdmissionMetrics(a.reg)
	}
	ms, err := a.loadMetrics()
	if err != nil {
		return nil, err
	}
	a.startMetrics(ms)
	a.connCaps = a.connectionCaps()
	a.auditScope.Store(newAuditScope(set.Selectors()))
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

func (a *app) run(ctx context.Context) error {
	var bg sync.WaitGroup
	defer bg.Wait()
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	serve := func(srv *http.Server, ln net.Listener) {
		bg.Go(func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				a.log.Error("http server", "addr", ln.Addr().String(), "error", err)
			}
		})
	}
	shutdown := func(srv *http.Server) {
		shutdownCtx, done := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer done()
		_ = srv.Shutdown(shutdownCtx)
	}
	// The history closes last: the actions' completions record in it
	// until they are done.
	h, err := a.openHistory(ctx)
	if err != nil {
		return err
	}
	if h != nil {
		a.history = h
		defer func() {
			if err := h.close(ctx); err != nil {
				a.log.Error("closing the history", "error", err)
			}
		}()
	}
	if a.cfg.HTTPAddr != "" {
		srv, ln, err := a.serveHTTP()
		if err != nil {
			return err
		}
		serve(srv, ln)
		defer shutdown(srv)
	}
	if a.cfg.History.Addr != "" {
		srv, ln, err := a.serveHistoryHTTP()
		if err != nil {
			return err
		}
		serve(srv, ln)
		defer shutdown(srv)
	}
	if a.fields != nil && a.cfg.Metrics.Addr != "" {
		srv, ln, err := a.serveMetrics()
		if err != nil {
			return err
		}
		serve(srv, ln)
		defer shutdown(srv)
	}
	if a.cfg.PprofAddr != "" {
		srv, ln, err := a.servePprof()
		if err != nil {
			return err
		}
		serve(srv, ln)
		defer shutdown(srv)
	}
	bg.Go(func() { a.watchRules(ctx) })
	// The audit webhook outlives serve's drain: the last changes' events
	// still come in while it waits for them.
	auditCtx, stopAudit := context.WithCancel(context.WithoutCancel(ctx))
	defer stopAudit()
	if err := a.startAuditWebhook(auditCtx, &bg); err != nil {
		return err
	}
	if err := a.startCRDGuard(ctx, &bg); err != nil {
		return err
	}
	if err := a.startAdmission(auditCtx, &bg); err != nil {
		return err
	}
	defer a.lingerEndpoints(parent)() // before stopAudit

	if !a.cfg.LeaderElect {
		a.metrics.leader.Set(1)
		return a.serve(ctx)
	}
	return a.elect(ctx)
}

// replica is what a running fieldwatch holds: its watcher and baseline,
// and its attribution (nil without an audit source).
type replica struct {
	w     *watcher.Watcher
	store *watcher.Store // nil without --state-dir
	att   *attribution
}

// close stops attribution (if not stopped yet) and closes the baseline;
// call it once the watcher and the actions are done (the actions'
// completions record changes in it).
func (r *replica) close(log *slog.Logger, sink *auditSwitch) {
	if r.att != nil {
		r.att.abort(sink)
	}
	if r.store == nil {
		return
	}
	if err := r.store.Close(); err != nil {
		log.Error("closing the baseline", "error", err)
	}
}

// newReplica opens the baseline and builds the watcher, a standby one for
// leader election.
func (a *app) newReplica(ctx context.Context, standby bool) (*replica, error) {
	shard, err := a.shard(ctx)
	if err != nil {
		return nil, err
	}
	store, err := a.openStore()
	if err != nil {
		return nil, err
	}
	r := &replica{store: store}
	if r.att, err = a.startAttribution(ctx); err != nil {
		r.close(a.log, &a.auditSink)
		return nil, fmt.Errorf("audit: %w", err)
	}
	set := a.set.Load()
	var confirmed func(*watcher.Change)
	switch {
	case standby && a.history != nil && r.att != nil:
		confirmed = func(c *watcher.Change) {
			r.att.consume(c)
			a.confirm(c)
		}
	case standby && a.history != nil:
		confirmed = a.confirm
	case standby && r.att != nil:
		confirmed = r.att.consume
	}
	ms := a.metricSet.Load()
	r.w, err = watcher.New(a.cfg.Rest, watcher.Config{
		Selectors:           set.Selectors(),
		Cache:               cacheSelectors(ms),
		Projection:          a.projection(set, ms),
		Namespaces:          a.namespaces(set, ms),
		Confine:             a.cfg.Namespaces,
		RediscoveryInterval: a.cfg.DiscoveryInterval,
		Handler:             &pipeline{app: a, errLog: rate.Sometimes{Interval: time.Second}, att: r.att},
		Workers:             a.cfg.Workers,
		Queue:               a.cfg.Queue,
		DrainTimeout:        a.cfg.GracePeriod / 2,
		Shard:               shard,
		Store:               store,
		Standby:             standby,
		Confirmed:           confirmed,
		ContentHash:         a.cfg.Admission.enabled(),
		Logger:              a.log,
		Registerer:          a.reg,
	})
	if err != nil {
		r.close(a.log, &a.auditSink)
		return nil, fmt.Errorf("watcher: %w", err)
	}
	if r.att != nil {
		// The audit webhook feeds this replica's index from now on, a
		// standby's too: the one that takes over holds the events of
		// what it delivers.
		a.auditSink.ix.Store(r.att.ix)
	}
	a.watcher.Store(r.w)
	a.log.Info("fieldwatch running", "rules", len(set.Rules()), "files", a.cfg.RulesFiles, "standby", standby, "attribution", r.att != nil)
	return r, nil
}

// newDispatcher starts the actions; a leader's hand over what they cannot
// deliver on shutdown.
func (a *app) newDispatcher(handOver bool) (*action.Dispatcher, error) {
	disp, err := action.New(action.Options{
		HandOver:   handOver,
		Logger:     a.log,
		Registerer: a.reg,
		Stdout:     a.cfg.Stdout,
		StateDir:   a.cfg.StateDir,
		Dynamic:    a.dyn,
		Kube:       a.kube,
		DryRun:     a.cfg.DryRun,

		ExternalURL: a.cfg.ExternalURL,
		ClusterName: a.cfg.ClusterName,
	})
	if err != nil {
		return nil, fmt.Errorf("actions: %w", err)
	}
	a.disp.Store(disp)
	return disp, nil
}

// serve watches and acts until ctx ends (no leader election), then
// drains: the watcher hands over its queued changes, the actions deliver
// or dead-letter their queued firings, and only then is the baseline
// closed.
func (a *app) serve(ctx context.Context) error {
	r, err := a.newReplica(ctx, false)
	if err != nil {
		return err
	}
	defer r.close(a.log, &a.auditSink)
	disp, err := a.newDispatcher(false)
	if err != nil {
		return err
	}
	defer func() {
		closeCtx, done := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.GracePeriod/2)
		defer done()
		if err := disp.Close(closeCtx); err != nil {
			a.log.Error("closing actions", "error", err)
		}
	}()
	if r.att != nil {
		// Once the watcher has handed over its last changes, they get
		// their audit events, then their actions, before the actions
		// close.
		defer r.att.stop(a.attributionDrain(), &a.auditSink)
	}
	go a.recordBaselines(ctx, r.w)
	return r.w.Run(ctx)
}

// openStore opens the restart baseline in the state directory, if any.
func (a *app) openStore() (*watcher.Store, error) {
	if a.cfg.StateDir == "" {
		return nil, nil
	}
	if err := os.MkdirAll(a.cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	return watcher.OpenStore(filepath.Join(a.cfg.StateDir, "baseline.db"), a.log)
}

// The HTTP servers' names, in metrics and logs.
const (
	serverHTTP    = "http"
	serverHistory = "history"
	serverPprof   = "pprof"
)

// pprofMaxConns caps the pprof listener: a person with kubectl
// port-forward is its only client.
const pprofMaxConns = 32

// connectionCaps derives the connection cap of each HTTP listener this
// process runs from the descriptor limit, which it raises to the hard
// limit first (connlimit.FileLimit, connlimit.Caps): half of it is shared
// by the listeners, the other half kept for the watcher, the state files
// and the actions.
func (a *app) connectionCaps() map[string]int {
	var wants []connlimit.Want
	if a.cfg.HTTPAddr != "" {
		wants = append(wants, connlimit.Want{Name: serverHTTP})
	}
	if a.cfg.History.Addr != "" {
		wants = append(wants, connlimit.Want{Name: serverHistory})
	}
	if a.cfg.PprofAddr != "" {
		wants = append(wants, connlimit.Want{Name: serverPprof, Max: pprofMaxConns})
	}
	if a.fields != nil && a.cfg.Metrics.Addr != "" {
		wants = append(wants, connlimit.Want{Name: serverMetrics})
	}
	if a.cfg.Audit.WebhookAddr != "" {
		wants = append(wants, connlimit.Want{Name: audit.ServerName})
	}
	if a.cfg.Admission.Addr != "" {
		wants = append(wants, connlimit.Want{Name: audit.AdmissionServerName})
	}
	limit, err := connlimit.FileLimit()
	if err != nil {
		a.log.Warn("file descriptor limit", "error", err)
	}
	caps := map[string]int{}
	for i, c := range connlimit.Caps(limit, wants...) {
		caps[wants[i].Name] = c
	}
	if len(wants) > 0 {
		a.log.Info("file descriptor limit", "limit", limit, "listeners", len(wants))
	}
	return caps
}

// listen listens on addr for the server name, with its connection cap.
func (a *app) listen(name, addr string) (*connlimit.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return connlimit.NewListener(ln, connlimit.Options{Name: name, Max: a.connCaps[name], Metrics: a.conns, Logger: a.log}), nil
}

// httpServer returns the server of handler on ln: every phase of a
// connection has a deadline (a request's header and body, its response,
// the wait for the next request), and ln knows which connections are
// serving a request.
func (a *app) httpServer(ln *connlimit.Listener, handler http.Handler, write time.Duration) *http.Server {
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      write,
		IdleTimeout:       a.cfg.HTTPIdleTimeout,
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
	}
	ln.Hook(srv)
	return srv
}

// serveHTTP listens on HTTPAddr for /metrics, /healthz and /readyz, and
// the history unless it has a listener of its own.
func (a *app) serveHTTP() (*http.Server, net.Listener, error) {
	ln, err := a.listen(serverHTTP, a.cfg.HTTPAddr)
	if err != nil {
		return nil, nil, err
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
	if a.cfg.History.Addr == "" {
		a.serveHistory(mux)
	}
	// The bound address: with port 0 the log is where to learn it.
	a.log.Info("http server listening", "addr", ln.Addr().String(), "maxConnections", ln.Max())
	if a.cfg.Ready != nil {
		a.cfg.Ready(ln.Addr().String())
	}
	return a.httpServer(ln, mux, 30*time.Second), ln, nil
}

// servePprof listens on PprofAddr, a loopback address, for /debug/pprof/.
func (a *app) servePprof() (*http.Server, net.Listener, error) {
	ln, err := a.listen(serverPprof, a.cfg.PprofAddr)
	if err != nil {
		return nil, nil, err
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); !ok || !tcp.IP.IsLoopback() {
		_ = ln.Close()
		return nil, nil, fmt.Errorf("pprof address %q resolved to %s, not a loopback address", a.cfg.PprofAddr, ln.Addr())
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	a.log.Info("serving Go profiles on a loopback address", "addr", ln.Addr().String(), "maxConnections", ln.Max())
	// A CPU profile or a trace takes as long as it is asked to
	// (?seconds=): up to a little less than the write timeout.
	return a.httpServer(ln, mux, pprofWriteTimeout), ln, nil
}

// pprofWriteTimeout bounds a profile's response, and so how many seconds
// a CPU profile or a trace may run (pprof refuses longer ones).
const pprofWriteTimeout = 2 * time.Minute

// ready says whether the process is ready, and why not. A standby is
// ready once its informers have synced: it can take over then. Readiness
// is the start's: resources found later (a CRD installed) sync on their
// own, while the replica stays ready, and the reason names them. A
// provider installing hundreds of CRDs at once does not take every
// replica out of its Service, its disruption budget or a rollout.
func (a *app) ready() (bool, string) {
	w := a.watcher.Load()
	standby := a.standby.Load()
	switch {
	case w == nil:
		return false, "starting"
	case !w.Started() && standby:
		return false, "standby: informers syncing"
	case !w.Started():
		return false, "informers syncing"
	case a.cfg.Admission.enabled() && !a.admissionListening.Load():
		return false, "the admission webhook does not listen yet"
	}
	why := "ok"
	if standby {
		why = "standby: another replica leads"
	}
	if late := w.Unsynced(); len(late) > 0 {
		const named = 10
		why += fmt.Sprintf("; %d resources found since the start are syncing: %s", len(late), strings.Join(late[:min(len(late), named)], ", "))
		if len(late) > named {
			why += fmt.Sprintf(" and %d more", len(late)-named)
		}
	}
	return true, why
}
