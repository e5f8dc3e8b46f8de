package app

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/time/rate"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/history"
	"github.com/fieldwatch/fieldwatch/internal/history/web"
	"github.com/fieldwatch/fieldwatch/rules"
	"github.com/fieldwatch/fieldwatch/watcher"
)

// HistoryConfig is where fieldwatch keeps the history of what it fired
// (docs/history.md): by default in the state directory (history.db), in
// PostgreSQL with DSN, and none without either or when Disabled.
type HistoryConfig struct {
	// Disabled keeps no history.
	Disabled bool
	// DSN, when set, keeps the history in this PostgreSQL database,
	// which replicas may share, instead of the state directory.
	DSN string
	// MaxBytes and MaxAge bound it (defaults DefaultHistoryMaxBytes and
	// DefaultHistoryMaxAge): the oldest entries are removed first.
	MaxBytes int64
	MaxAge   time.Duration
	// Addr, when set, serves the history's API and pages on a listener
	// of their own, instead of Config.HTTPAddr: a NetworkPolicy can then
	// open /metrics and the probes to some, and the history to others.
	Addr string
	// InsecureLoopback serves token-less requests from loopback to a
	// loopback Host as everything (web.Options.InsecureLoopback): for
	// an authenticating proxy beside fieldwatch in its pod.
	InsecureLoopback bool
	// Auth bounds the reviews of the API's callers (zero fields take
	// web's defaults).
	Auth web.AuthOptions
	// MaxResponseBytes and MaxBytesInFlight bound the payload bytes of a
	// response and of the responses being built at once (zero: web's
	// defaults).
	MaxResponseBytes, MaxBytesInFlight int64
	// SigningKeyFile, when set, holds the Ed25519 key that signs the
	// trail's checkpoints, every CheckpointEvery records or
	// CheckpointInterval (zero: history's defaults) and at a graceful
	// stop (docs/trail.md).
	SigningKeyFile     string
	CheckpointEvery    int
	CheckpointInterval time.Duration
	// VerifyEvery, when positive, verifies the trail in place at start
	// and then this long after each verification ended, with the signing
	// key's public key when there is one: the page's verified mark and
	// the trail's metrics (history.Verifier). Zero verifies never.
	VerifyEvery time.Duration
}

// History defaults.
const (
	// DefaultHistoryMaxBytes bounds the history: some 700,000 entries of
	// the usual size.
	DefaultHistoryMaxBytes = 512 << 20
	// MinHistoryMaxBytes is the smallest bound taken: the embedded
	// store keeps room for its log and a reserve besides the entries.
	MinHistoryMaxBytes = 16 << 20
	// DefaultHistoryMaxAge bounds the history's age: 90 days.
	DefaultHistoryMaxAge = 90 * 24 * time.Hour
	// historyFile is the embedded history in the state directory.
	historyFile = "history.db"
	// confirmedQueue bounds the changes a standby has yet to evaluate for
	// its history.
	confirmedQueue = 4096
)

// check rejects a bound too small to work with.
func (h *HistoryConfig) check() error {
	if h.MaxBytes > 0 && h.MaxBytes < MinHistoryMaxBytes {
		return fmt.Errorf("--history-max-bytes %d: at least %d (16Mi)", h.MaxBytes, MinHistoryMaxBytes)
	}
	response := h.MaxResponseBytes
	if response <= 0 {
		response = web.DefaultMaxResponseBytes
	}
	if h.MaxBytesInFlight > 0 && h.MaxBytesInFlight < response {
		return fmt.Errorf("--history-max-bytes-in-flight %d: at least --history-max-response-bytes (%d)", h.MaxBytesInFlight, response)
	}
	return nil
}

// historyState is the history of a running fieldwatch.
type historyState struct {
	store     history.Store
	rec       *history.Recorder
	web       *web.Server
	confirmed chan *watcher.Change // a standby's changes confirmed by the leader, to evaluate
	done      chan struct{}        // closed when the evaluator of confirmed stops
	// stateErrLog lets one state that cannot be kept a minute through
	// to the log.
	stateErrLog rate.Sometimes
	// stopVerify stops the trail's verifier, if one runs.
	stopVerify func()
}

// openHistory opens the history's store and starts its recorder; nil
// when there is no history.
func (a *app) openHistory(ctx context.Context) (*historyState, error) {
	h := &a.cfg.History
	if h.Disabled || (h.DSN == "" && a.cfg.StateDir == "") {
		a.log.Info("no history of firings: it needs --state-dir or --history-dsn")
		return nil, nil
	}
	var signer *history.Signer
	if h.SigningKeyFile != "" {
		// A key that does not load is an error of the configuration:
		// unlike a store that cannot be opened, it stops the start.
		key, err := history.LoadSigningKey(h.SigningKeyFile)
		if err != nil {
			return nil, fmt.Errorf("--history-signing-key-file: %w", err)
		}
		signer = history.NewSigner(key, a.cfg.ClusterName)
	}
	m := history.NewMetrics(a.reg)
	var (
		store history.Store
		err   error
	)
	if h.DSN != "" {
		store, err = history.OpenPostgres(ctx, h.DSN, history.PostgresOptions{Logger: a.log, Metrics: m, Chain: a.chainName()})
	} else {
		if err = os.MkdirAll(a.cfg.StateDir, 0o700); err != nil {
			return nil, fmt.Errorf("state dir: %w", err)
		}
		store, err = history.OpenSQLite(filepath.Join(a.cfg.StateDir, historyFile), history.SQLiteOptions{
			Logger: a.log, Metrics: m, MaxBytes: h.MaxBytes,
		})
	}
	if err != nil {
		// The history must never stop delivery: run without it, and say so.
		a.log.Error("the history cannot be opened: running without it (deliveries are not affected)", "error", err)
		return nil, nil
	}
	rec := history.NewRecorder(history.RecorderOptions{
		Store: store, MaxAge: h.MaxAge, MaxBytes: h.MaxBytes, Logger: a.log, Metrics: m,
		Signer: signer, CheckpointEvery: h.CheckpointEvery, CheckpointInterval: h.CheckpointInterval,
	})
	var verifier *history.Verifier
	var verification func() *history.Verification
	if trail, ok := store.(history.Trail); ok && h.VerifyEvery > 0 {
		vo := history.VerifierOptions{Interval: h.CheckpointInterval, Every: h.VerifyEvery, Unwritten: rec.OldestUnwritten,
			Logger: a.log, Registerer: a.reg}
		if signer != nil {
			vo.Key = signer.PublicKey()
		}
		verifier = history.NewVerifier(trail, vo)
		verification = verifier.Last
	}
	server, err := web.New(web.Options{
		Store: store, Rest: a.cfg.Rest, Auth: h.Auth, InsecureLoopback: h.InsecureLoopback,
		MaxResponseBytes: h.MaxResponseBytes, MaxBytesInFlight: h.MaxBytesInFlight, Logger: a.log, Registerer: a.reg,
		Verification: verification,
	})
	if err != nil {
		rec.Close(ctx)
		_ = store.Close()
		return nil, err
	}
	hs := &historyState{
		store:       store,
		rec:         rec,
		web:         server,
		confirmed:   make(chan *watcher.Change, confirmedQueue),
		done:        make(chan struct{}),
		stateErrLog: rate.Sometimes{Interval: time.Minute},
	}
	go a.evaluateConfirmed(hs)
	if verifier != nil {
		vctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			verifier.Run(vctx)
		}()
		hs.stopVerify = func() { cancel(); <-stopped }
	}
	a.log.Info("keeping the history of firings", "store", storeName(h, a.cfg.StateDir), "maxBytes", h.MaxBytes, "maxAge", h.MaxAge.String(),
		"insecureLoopback", h.InsecureLoopback)
	return hs, nil
}

// chainName names this replica's chain in a shared store's trail
// (docs/trail.md): the cluster's name and the pod's.
func (a *app) chainName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "fieldwatch"
	}
	if a.cfg.ClusterName != "" {
		return a.cfg.ClusterName + "/" + host
	}
	return host
}

// storeName says where the history is, without the DSN's secrets.
func storeName(h *HistoryConfig, stateDir string) string {
	if h.DSN != "" {
		return "postgresql"
	}
	return filepath.Join(stateDir, historyFile)
}

// close stops the recorder (writing what it holds within 5 s) and the
// store; call it once the actions are done.
func (h *historyState) close(ctx context.Context) error {
	if h.stopVerify != nil {
		h.stopVerify()
	}
	close(h.confirmed)
	<-h.done
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	h.rec.Close(ctx)
	return h.store.Close()
}

// confirm is the standby watcher's Confirmed hook: a change the leader
// handled, to evaluate for this replica's history. It never blocks: when
// the standby is that far behind, the change is left out of its history
// (counted as dropped).
func (a *app) confirm(c *watcher.Change) {
	h := a.history
	select {
	case h.confirmed <- c:
	default:
		h.rec.Drop()
	}
}

// evaluateConfirmed evaluates the rules on the changes the leader
// confirmed and records what fires, as the leader did, in this
// standby's history: what it needs for its history to hold, after a
// takeover, the firings of the previous leader as well as its own. The
// payloads are this replica's: a standby attributes nothing (it may hold
// the audit events, for when it takes over), so actor names the field
// manager only; a CRD change's impact is scanned as the leader scans it.
func (a *app) evaluateConfirmed(h *historyState) {
	defer close(h.done)
	for c := range h.confirmed {
		set := a.set.Load()
		if len(set.RulesFor(c.Resource)) == 0 {
			continue
		}
		rc := rulesChange(c)
		rc.Cluster = a.cfg.ClusterName
		if set.WantsCRDImpact(rc) {
			a.crdImpact(context.Background(), c, rc)
		}
		a.recordState(set, rc, history.Confirmed)
		firings, _ := set.Eval(rc) // evaluation errors are the leader's to count
		for _, f := range firings {
			h.rec.RecordEntry(entryOf(&f, history.Confirmed))
		}
	}
}

// recordState records in the history the state rc leaves its object in,
// when a rule with history: {states: true} selects the object (rules
// Set.State). It never blocks; an object that cannot be encoded is left
// out with a log line.
func (a *app) recordState(set *rules.Set, rc *rules.Change, source history.Source) {
	h := a.history
	if h == nil || !set.KeepsStates(rc.Resource) {
		return
	}
	st, ok, err := set.State(rc)
	if err != nil {
		h.stateErrLog.Do(func() {
			a.log.Warn("history: the object's state cannot be kept", "gvr", rc.Resource.String(), "error", err)
		})
		return
	}
	if ok {
		h.rec.RecordState(stateOf(&st, source))
	}
}

// baselineEvery is how often recordBaselines looks for resources with
// states whose informers synced since it last looked.
const baselineEvery = 2 * time.Second

// recordBaselines records, once per resource a rule with states selects
// and as soon as its informers have synced, the state of every object of
// it as the list found it (rules Set.Baseline, at the list's time): the
// first state of an object that no change has brought to the history
// yet (the store keeps a baseline only of an object it has no state of).
// It returns when ctx ends.
func (a *app) recordBaselines(ctx context.Context, w *watcher.Watcher) {
	if a.history == nil {
		return
	}
	done := map[change.Resource]bool{}
	tick := time.NewTicker(baselineEvery)
	defer tick.Stop()
	for {
		set := a.set.Load()
		snaps := w.Snapshots(func(res change.Resource) bool { return !done[res] && set.KeepsStates(res) })
		for _, snap := range snaps {
			done[snap.Resource] = true
			for _, o := range snap.Objects {
				st, ok, err := set.Baseline(snap.Resource, o.Map(), snap.Listed)
				if err != nil || !ok {
					continue // an object no rule with states selects, or one State reports
				}
				a.history.rec.RecordState(stateOf(&st, history.Delivered))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// stateOf is st as the history keeps it.
func stateOf(st *rules.State, source history.Source) history.State {
	o := &st.Object
	return history.State{
		Time: st.Time, Type: st.Type, Baseline: st.Baseline,
		Group: o.Group, Version: o.Version, Resource: o.Resource, Kind: o.Kind,
		Namespace: o.Namespace, Name: o.Name, UID: o.UID, ResourceVersion: o.ResourceVersion, Base: st.Base,
		User: st.User, Impersonated: st.Impersonated, Manager: st.Manager, Source: source,
		Ops: st.Ops, Full: st.Full,
	}
}

// entryOf is f's history entry, its fields the firing's (which are
// its payload's: the history need not read them back).
func entryOf(f *rules.Firing, source history.Source) history.Entry {
	o := &f.Object
	return history.Entry{
		ID: f.ID, Time: f.Time, Rule: f.Rule.Name, Type: f.Type,
		Group: o.Group, Version: o.Version, Resource: o.Resource, Kind: o.Kind,
		Namespace: o.Namespace, Name: o.Name, UID: o.UID, ResourceVersion: o.ResourceVersion,
		User: f.User, Impersonated: f.Impersonated, Manager: f.Manager, Cluster: f.Cluster,
		Source: source, Payload: f.Payload,
	}
}

// serveHistory adds the history's API and pages to mux, or, without a
// history, answers there why there is none.
func (a *app) serveHistory(mux *http.ServeMux) {
	if a.history != nil {
		a.history.web.Register(mux)
		return
	}
	none := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"error":"this fieldwatch keeps no history: run it with --state-dir or --history-dsn (and without --history=false)"}`+"\n")
	}
	mux.HandleFunc("/api/v1/history", none)
	mux.HandleFunc("/history", none)
}

// serveHistoryHTTP listens on History.Addr for the history's API and
// pages alone.
func (a *app) serveHistoryHTTP() (*http.Server, net.Listener, error) {
	ln, err := a.listen(serverHistory, a.cfg.History.Addr)
	if err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	a.serveHistory(mux)
	a.log.Info("history server listening", "addr", ln.Addr().String(), "maxConnections", ln.Max())
	return a.httpServer(ln, mux, 30*time.Second), ln, nil
}
