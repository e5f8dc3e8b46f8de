package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/audit"
)

// DefaultAdmissionWait is how long a change waits for its admission
// record when admission is the only source: a record comes before its
// change, or a few milliseconds after it from a peer.
const DefaultAdmissionWait = time.Second

// AdmissionConfig turns on attribution from fieldwatch's own validating
// admission webhook (audit.Admission): who made each write, told by the
// apiserver before it is stored, on every cluster that can register a
// webhook. Its zero value turns it off, and then it costs nothing.
type AdmissionConfig struct {
	// Addr is where the admission endpoint listens (":9443"); "" runs
	// none. It needs CertFile and KeyFile; ClientCAFile with ClientNames,
	// or TokenFile, are optional (a managed cluster's apiserver presents
	// no credentials to webhooks).
	Addr              string
	CertFile, KeyFile string
	ClientCAFile      string
	ClientNames       []string
	TokenFile         string
	// Peers are the other replicas' endpoints (host:port, a name resolving
	// to every address such as a headless Service's): each record this
	// replica keeps is forwarded to them (audit.AdmissionOptions.Peers).
	Peers []string
	// MaxBodyBytes bounds a review (audit.AdmissionOptions).
	MaxBodyBytes int64
	// CandidateTTL is how long after it arrived a record may stand for a
	// change (default audit.DefaultAdmissionTTL); MaxPending and
	// MaxPendingBytes bound the records held (audit.IndexOptions).
	CandidateTTL    time.Duration
	MaxPending      int
	MaxPendingBytes int64
	// Wait bounds how long a change waits for its record when no audit
	// source is configured (default DefaultAdmissionWait); with one, the
	// audit source's wait applies.
	Wait time.Duration
	// CertSecret (NAMESPACE/NAME), WebhookConfig and CertDNSNames make
	// fieldwatch keep its serving certificate itself (certRotation): in
	// that Secret, written to CertDir (default a directory of the
	// temporary one) as the CertFile and KeyFile it serves, with the
	// caBundle of the ValidatingWebhookConfiguration WebhookConfig in
	// step. The first DNS name is the Service's, <service>.<namespace>.svc.
	CertSecret, WebhookConfig string
	CertDNSNames              []string
	CertDir                   string
	// Linger keeps the endpoint answering on shutdown until this long
	// after the run's context ended (SIGTERM), overlapping the drain,
	// while the Service stops sending this replica the apiserver's calls:
	// a call to a replica that no longer listens lets its write through
	// unrecorded (failurePolicy Ignore), and a CRD change unchecked. Zero
	// lingers not at all.
	Linger time.Duration
	// Ready, if set, is called with the endpoint's address once it listens
	// (tests use it with Addr "127.0.0.1:0").
	Ready func(addr string)
}

// DefaultAdmissionLinger is `fieldwatch run`'s --admission-linger: a few
// seconds for the endpoints of a terminating pod to leave kube-proxy's
// rules.
const DefaultAdmissionLinger = 5 * time.Second

// enabled reports whether the admission endpoint runs.
func (c *AdmissionConfig) enabled() bool { return c.Addr != "" }

// check rejects configurations that cannot work.
func (c *AdmissionConfig) check(totalShards int) error {
	if c.Addr == "" && (c.CertFile != "" || c.KeyFile != "" || c.ClientCAFile != "" || c.TokenFile != "" || len(c.ClientNames) > 0 || len(c.Peers) > 0) {
		return errors.New("the --admission-* files are given but --admission-addr is not")
	}
	if c.Addr != "" && c.CertSecret == "" && (c.CertFile == "" || c.KeyFile == "") {
		return errors.New("--admission-addr needs --admission-cert-file and --admission-key-file, or --admission-cert-secret: the apiserver calls webhooks over HTTPS only")
	}
	if c.Addr == "" && (c.CertSecret != "" || c.WebhookConfig != "" || len(c.CertDNSNames) > 0) {
		return errors.New("--admission-cert-secret and its flags are given but --admission-addr is not")
	}
	if _, err := c.certRotation(); err != nil {
		return err
	}
	if c.Addr != "" && totalShards > 1 && len(c.Peers) == 0 {
		return errors.New("--admission-addr with --total-shards > 1 needs --admission-peers: the apiserver sends each review to one replica, so the other shards would see none")
	}
	if c.ClientCAFile != "" && len(c.ClientNames) == 0 {
		return errors.New("--admission-client-ca-file needs --admission-client-name: the name of the apiserver's client certificate (its CN, or a DNS or URI SAN); " +
			"without it every client certificate of that CA could post reviews")
	}
	if c.ClientCAFile == "" && len(c.ClientNames) > 0 {
		return errors.New("--admission-client-name without --admission-client-ca-file: the names are those of the client certificates of that CA to accept")
	}
	return nil
}

// attributing reports whether any source of attribution is configured.
func (c *Config) attributing() bool { return c.Audit.enabled() || c.Admission.enabled() }

// attributionSources names the configured sources, as an unmatched
// change's attribution says them.
func (c *Config) attributionSources() string {
	switch {
	case c.Audit.enabled() && c.Admission.enabled():
		return change.SourceBoth
	case c.Admission.enabled():
		return change.SourceAdmission
	}
	return change.SourceAudit
}

// attributionWait is how long a change waits for its audit event or
// admission record.
func (c *Config) attributionWait() time.Duration {
	if c.Audit.enabled() {
		if c.Audit.Wait > 0 {
			return c.Audit.Wait
		}
		return audit.DefaultWait
	}
	if c.Admission.Wait > 0 {
		return c.Admission.Wait
	}
	return DefaultAdmissionWait
}

// startAdmission starts the admission endpoint, when configured, for the
// life of the process: it answers every review, and feeds the index of
// the running replica (a standby's too) through the audit switch. With
// certificate rotation it listens once the rotation has written the
// serving certificate.
func (a *app) startAdmission(ctx context.Context, bg interface{ Go(func()) }) error {
	c := &a.cfg.Admission
	if !c.enabled() {
		return nil
	}
	rot, err := c.certRotation()
	if err != nil {
		return err
	}
	certFile, keyFile := c.CertFile, c.KeyFile
	if rot == nil {
		return a.serveAdmission(ctx, bg, certFile, keyFile)
	}
	if certFile == "" {
		certFile, keyFile = rot.files()
	}
	ready, err := rot.start(ctx, a, bg)
	if err != nil {
		return err
	}
	bg.Go(func() {
		select {
		case <-ready:
		case <-ctx.Done():
			return
		}
		if err := a.serveAdmission(ctx, bg, certFile, keyFile); err != nil {
			a.log.Error("admission webhook: cannot serve; writes go on unattributed", "error", err)
		}
	})
	return nil
}

// serveAdmission listens on the endpoint's address and serves it with
// the certificate files given; the CRD guard, when on, answers the
// reviews of CRD updates and deletions there.
func (a *app) serveAdmission(ctx context.Context, bg interface{ Go(func()) }, certFile, keyFile string) error {
	c := &a.cfg.Admission
	var guard audit.AdmissionGuard
	var guardTimeout time.Duration
	if g := a.crdGuard(); g != nil {
		guard, guardTimeout = guardReviews{g}, a.cfg.CRDGuard.timeout()
	}
	adm, err := audit.NewAdmission(audit.AdmissionOptions{
		CertFile: certFile, KeyFile: keyFile,
		ClientCAFile: c.ClientCAFile, ClientNames: c.ClientNames, TokenFile: c.TokenFile,
		MaxBodyBytes: c.MaxBodyBytes,
		Keep:         func(group, resource string) bool { return a.auditScope.Load().keeps(group, resource) },
		Guard:        guard,
		GuardTimeout: guardTimeout,
		Peers:        c.Peers,
		Logger:       a.log,
		Metrics:      a.admissionMetrics,

		MaxConnections: a.connCaps[audit.AdmissionServerName],
		IdleTimeout:    a.cfg.HTTPIdleTimeout,
		ConnMetrics:    a.conns,
	}, &a.auditSink)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return fmt.Errorf("admission webhook: %w", err)
	}
	a.log.Info("admission webhook listening", "addr", ln.Addr().String(), "path", audit.AdmissionPath, "maxConnections", a.connCaps[audit.AdmissionServerName])
	a.admissionListening.Store(true)
	if c.Ready != nil {
		c.Ready(ln.Addr().String())
	}
	bg.Go(func() {
		if err := adm.Serve(ctx, ln); err != nil {
			a.log.Error("admission webhook", "error", err)
		}
	})
	return nil
}

// lingerEndpoints, deferred by run, keeps the admission endpoint and the
// audit webhook up until their Linger has passed since parent ended, when
// it did: they stop after it returns. Meanwhile the audit webhook, with
// peers, relays what the apiserver posts to them once this replica's own
// index is closed.
func (a *app) lingerEndpoints(parent context.Context) func() {
	var linger time.Duration
	var what []string
	if c := &a.cfg.Admission; c.enabled() && c.Linger > 0 {
		linger, what = c.Linger, append(what, "admission webhook")
	}
	if c := &a.cfg.Audit; c.WebhookAddr != "" && c.WebhookLinger > 0 {
		linger, what = max(linger, c.WebhookLinger), append(what, "audit webhook")
	}
	if linger <= 0 {
		return func() {}
	}
	stopped := make(chan time.Time, 1)
	stop := context.AfterFunc(parent, func() {
		a.auditSink.relaying.Store(true)
		stopped <- time.Now()
	})
	return func() {
		if stop() {
			return // run ended for another reason: no one is told to go elsewhere
		}
		at := <-stopped
		wait := time.Until(at.Add(linger))
		if wait <= 0 {
			return
		}
		a.log.Info(strings.Join(what, " and ")+": answering until the Service sends elsewhere", "for", wait.Round(time.Millisecond).String())
		t := time.NewTimer(wait)
		defer t.Stop()
		<-t.C
	}
}
