package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/audit"
	"github.com/fieldwatch/fieldwatch/watcher"
)

// AuditConfig turns on attribution: who made each change, read from the
// Kubernetes audit stream (an HTTPS webhook receiver for the apiserver's
// webhook backend, a follower of its JSON log file, or both). Its zero
// value turns it off, and then it costs nothing.
type AuditConfig struct {
	// WebhookAddr is where the audit webhook receiver listens (":8443");
	// "" runs none. It needs WebhookCertFile and WebhookKeyFile, and
	// WebhookClientCAFile with WebhookClientNames (the names of the
	// apiserver's client certificate) or WebhookTokenFile (or both).
	WebhookAddr                     string
	WebhookCertFile, WebhookKeyFile string
	WebhookClientCAFile             string
	WebhookClientNames              []string
	WebhookTokenFile                string
	// WebhookPeers are the other replicas' receivers (host:port, a name
	// resolving to every address such as a headless Service's): each
	// event list the apiserver posts to this replica is forwarded to
	// them before it is acknowledged (audit.WebhookOptions.Peers).
	WebhookPeers []string
	// WebhookMaxBodyBytes and WebhookMaxRequests bound a request's body
	// and the requests read at once (audit.WebhookOptions).
	WebhookMaxBodyBytes int64
	WebhookMaxRequests  int
	// WebhookReady, if set, is called with the receiver's address once it
	// listens (tests use it with WebhookAddr "127.0.0.1:0").
	WebhookReady func(addr string)
	// WebhookLinger keeps the receiver taking posts on shutdown until this
	// long after the run's context ended (SIGTERM), overlapping the drain,
	// while the Service stops sending this replica the apiserver's posts:
	// the apiserver drops a post whose connection is refused (its audit
	// webhook retries resets, timeouts, 429 and 5xx only), and the changes
	// of its events go out unattributed. With WebhookPeers the events are relayed to the
	// peers once this replica's index is closed. Zero lingers not at all.
	WebhookLinger time.Duration
	// LogPath is the apiserver's audit log to follow (JSON lines); "" for
	// none. LogStateFile records how far it was read (default
	// audit-log.state in Config.StateDir, if any).
	LogPath, LogStateFile string
	// Wait bounds how long a change waits for its audit event (default
	// 2s); MaxWaiting how many changes may wait at once (default 10000,
	// beyond which the watcher slows down).
	Wait       time.Duration
	MaxWaiting int
	// MatchWindow, ClockSkew, IndexMaxEvents, IndexMaxBytes and
	// IndexMaxAge bound the index of audit events (audit.IndexOptions).
	MatchWindow, ClockSkew time.Duration
	IndexMaxEvents         int
	IndexMaxBytes          int64
	IndexMaxAge            time.Duration
}

// enabled reports whether an audit source is configured.
func (c *AuditConfig) enabled() bool { return c.WebhookAddr != "" || c.LogPath != "" }

// check rejects configurations that cannot work.
func (c *AuditConfig) check(totalShards int) error {
	if c.WebhookAddr != "" && totalShards > 1 {
		return errors.New("--audit-webhook-addr with --total-shards > 1: the apiserver sends each audit event to one receiver, so the other shards would see none; use --audit-log (each replica reads the log) or run one shard")
	}
	if c.WebhookAddr == "" && (c.WebhookCertFile != "" || c.WebhookKeyFile != "" || c.WebhookClientCAFile != "" || c.WebhookTokenFile != "" || len(c.WebhookClientNames) > 0 || len(c.WebhookPeers) > 0) {
		return errors.New("the --audit-webhook-* files are given but --audit-webhook-addr is not")
	}
	if c.WebhookClientCAFile != "" && len(c.WebhookClientNames) == 0 {
		return errors.New("--audit-webhook-client-ca-file needs --audit-webhook-client-name: the name of the apiserver's client certificate (its CN, or a DNS or URI SAN). " +
			"Without it every client certificate of that CA (with a cluster CA: every kubelet's) could post audit events naming anyone as the author of a change")
	}
	if c.WebhookClientCAFile == "" && len(c.WebhookClientNames) > 0 {
		return errors.New("--audit-webhook-client-name without --audit-webhook-client-ca-file: the names are those of the client certificates of that CA to accept")
	}
	if c.LogPath == "" && c.LogStateFile != "" {
		return errors.New("--audit-log-state without --audit-log")
	}
	return nil
}

// errNeedsAudit is the error of rules that need attribution without an
// audit source.
func errNeedsAudit(names []string) error {
	return fmt.Errorf("rules %s use match.users, match.excludeUsers or the audit fields of the CEL actor (actor.user, actor.match, ...): "+
		"they need to know who made each change, from the Kubernetes audit stream or fieldwatch's admission webhook; set --audit-webhook-addr or --audit-log, or --admission-addr",
		strings.Join(names, ", "))
}

// auditScope says which resources' audit events the index keeps: those
// the rules select. An audit event names a group and a plural resource,
// not a kind or a version, so a selector by kind alone keeps its whole
// group (more than needed, never less).
type auditScope struct {
	all       bool
	groups    map[string]bool    // every resource of the group
	resources map[string]bool    // this resource in any group
	exact     map[[2]string]bool // group, resource
}

func newAuditScope(sels []change.Selector) *auditScope {
	s := &auditScope{groups: map[string]bool{}, resources: map[string]bool{}, exact: map[[2]string]bool{}}
	for _, sel := range sels {
		anyResource := sel.Resource == "" || sel.Resource == "*"
		switch {
		case sel.Group == "*" && anyResource:
			s.all = true
		case sel.Group == "*":
			s.resources[sel.Resource] = true
		case anyResource:
			s.groups[sel.Group] = true
		default:
			s.exact[[2]string{sel.Group, sel.Resource}] = true
		}
	}
	return s
}

// keeps reports whether events of group/resource are kept.
func (s *auditScope) keeps(group, resource string) bool {
	return s.all || s.groups[group] || s.resources[resource] || s.exact[[2]string{group, resource}]
}

// DefaultAuditWebhookLinger is `fieldwatch run`'s --audit-webhook-linger:
// as DefaultAdmissionLinger, a few seconds for the endpoints of a
// terminating pod to leave kube-proxy's rules.
const DefaultAuditWebhookLinger = DefaultAdmissionLinger

// auditSwitch is the sink of the audit webhook, which runs for the whole
// process: it forwards to the index of the running replica, a standby's
// too, and has none while the replica starts or once it stopped. The
// webhook takes the apiserver's posts while there is an index and the
// replica leads, or, with peers to forward them to, stands by too (else a
// standby turns them away, 503, and the apiserver's retry reaches the
// leader). With peers it also takes them while it lingers after SIGTERM,
// its index closed, only to relay them: the apiserver does not retry a
// post that finds no listener, and the Service may send it here for a
// moment after the pod is deleted.
type auditSwitch struct {
	ix       atomic.Pointer[audit.Index]
	shared   bool         // the receiver forwards to peers
	standby  *atomic.Bool // the app's
	relaying atomic.Bool  // lingering after SIGTERM
}

// Add implements audit.Sink.
func (s *auditSwitch) Add(source string, recs []audit.Record, ignored int) {
	if ix := s.ix.Load(); ix != nil {
		ix.Add(source, recs, ignored)
	}
}

func (s *auditSwitch) accepting() bool {
	if s.shared && s.relaying.Load() {
		return true
	}
	return s.ix.Load() != nil && (s.shared || s.standby == nil || !s.standby.Load())
}

// startAuditWebhook starts the audit webhook receiver, when configured,
// for the life of the process.
func (a *app) startAuditWebhook(ctx context.Context, bg interface{ Go(func()) }) error {
	c := &a.cfg.Audit
	if c.WebhookAddr == "" {
		return nil
	}
	a.auditSink.shared, a.auditSink.standby = len(c.WebhookPeers) > 0, &a.standby
	wh, err := audit.NewWebhook(audit.WebhookOptions{
		CertFile: c.WebhookCertFile, KeyFile: c.WebhookKeyFile,
		ClientCAFile: c.WebhookClientCAFile, ClientNames: c.WebhookClientNames, TokenFile: c.WebhookTokenFile,
		Peers:        c.WebhookPeers,
		MaxBodyBytes: c.WebhookMaxBodyBytes, MaxConcurrentRequests: c.WebhookMaxRequests,
		Logger:    a.log,
		Metrics:   a.auditMetrics,
		Accepting: a.auditSink.accepting,

		MaxConnections: a.connCaps[audit.ServerName],
		IdleTimeout:    a.cfg.HTTPIdleTimeout,
		ConnMetrics:    a.conns,
	}, &a.auditSink)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.WebhookAddr)
	if err != nil {
		return fmt.Errorf("audit webhook: %w", err)
	}
	a.log.Info("audit webhook listening", "addr", ln.Addr().String(), "maxConnections", a.connCaps[audit.ServerName])
	if c.WebhookReady != nil {
		c.WebhookReady(ln.Addr().String())
	}
	bg.Go(func() {
		if err := wh.Serve(ctx, ln); err != nil {
			a.log.Error("audit webhook", "error", err)
		}
	})
	return nil
}

// attribution is the audit side of a replica: the index, the attributor
// and the log follower. The audit webhook (auditSwitch) and the log
// follower feed the index from the replica's start, so that a standby
// that takes over has the recent events; a standby's index loses the
// events of the changes the leader delivered (watcher.Config.Confirmed).
type attribution struct {
	ix       *audit.Index
	at       *audit.Attributor
	stopLog  context.CancelFunc
	logDone  chan struct{}
	inflight chan struct{}
	// deliverCtx is the context of the callbacks' deliveries: it ends
	// when stop gives up on them.
	deliverCtx  context.Context
	stopDeliver context.CancelFunc
	// aborted: the callbacks do nothing (the Lease was lost: what is not
	// done is the next leader's).
	aborted atomic.Bool
	once    sync.Once
}

// startAttribution starts attribution for a replica, or returns nil when no
// source of attribution (an audit source, admission) is configured.
func (a *app) startAttribution(ctx context.Context) (*attribution, error) {
	c, ac := &a.cfg.Audit, &a.cfg.Admission
	if !a.cfg.attributing() {
		return nil, nil
	}
	ix := audit.NewIndex(audit.IndexOptions{
		MaxEvents: c.IndexMaxEvents, MaxBytes: c.IndexMaxBytes, MaxAge: c.IndexMaxAge,
		Window: c.MatchWindow, ClockSkew: c.ClockSkew,
		Keep:    func(group, resource string) bool { return a.auditScope.Load().keeps(group, resource) },
		Metrics: a.auditMetrics,

		AdmissionTTL: ac.CandidateTTL, AdmissionMaxPending: ac.MaxPending, AdmissionMaxBytes: ac.MaxPendingBytes,
		AdmissionMetrics: a.admissionMetrics,
		Echoes:           c.enabled() && ac.enabled(),
	})
	maxWaiting := c.MaxWaiting
	if maxWaiting <= 0 {
		maxWaiting = audit.DefaultMaxWaiting
	}
	at := audit.NewAttributor(ix, audit.AttributorOptions{Wait: a.cfg.attributionWait(), MaxWaiting: maxWaiting, Metrics: a.auditMetrics,
		Sources: a.cfg.attributionSources()})
	att := &attribution{ix: ix, at: at, inflight: make(chan struct{}, maxWaiting)}
	att.deliverCtx, att.stopDeliver = context.WithCancel(context.Background())
	if c.LogPath != "" {
		fl, err := audit.NewFollower(audit.FollowerOptions{Path: c.LogPath, StateFile: c.LogStateFile, Logger: a.log, Metrics: a.auditMetrics}, ix)
		if err != nil {
			at.Close()
			att.stopDeliver()
			return nil, err
		}
		lctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		att.stopLog, att.logDone = stop, make(chan struct{})
		go func() {
			defer close(att.logDone)
			if err := fl.Run(lctx); err != nil {
				a.log.Error("audit log follower stopped; changes are no longer attributed from the log", "error", err)
			}
		}()
	}
	return att, nil
}

// attributionDrain is how long the last changes may wait for their audit
// events and their actions' queues on shutdown: their bound and a second,
// within half the grace period.
func (a *app) attributionDrain() time.Duration {
	return min(a.cfg.attributionWait()+time.Second, a.cfg.GracePeriod/2)
}

// consume takes the audit event of c, a change the leader confirmed, out
// of the index, as the leader's match did (a standby's Confirmed).
func (att *attribution) consume(c *watcher.Change) {
	ac := auditChange(c, rulesChange(c))
	att.ix.Consume(&ac)
}

// stop ends attribution once the watcher has stopped: the changes still
// waiting get their events or their bounds, and their callbacks deliver,
// within timeout; then the sources stop feeding the index.
func (att *attribution) stop(timeout time.Duration, sink *auditSwitch) {
	att.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		giveUp := context.AfterFunc(ctx, att.stopDeliver)
		defer giveUp()
		att.at.Drain(ctx, 10*time.Millisecond)
		att.at.Close()
		att.shutdown(sink)
	})
}

// abort ends attribution at once: waiting changes are left undone.
func (att *attribution) abort(sink *auditSwitch) {
	att.once.Do(func() {
		att.aborted.Store(true)
		att.stopDeliver()
		att.at.Close()
		att.shutdown(sink)
	})
}

func (att *attribution) shutdown(sink *auditSwitch) {
	att.stopDeliver()
	sink.ix.CompareAndSwap(att.ix, nil)
	if att.stopLog != nil {
		att.stopLog()
		<-att.logDone
	}
}
