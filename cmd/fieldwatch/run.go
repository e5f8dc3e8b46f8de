package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"

	"github.com/fieldwatch/fieldwatch/fieldmetrics"
	"github.com/fieldwatch/fieldwatch/internal/app"
	"github.com/fieldwatch/fieldwatch/internal/audit"
	"github.com/fieldwatch/fieldwatch/internal/connlimit"
	"github.com/fieldwatch/fieldwatch/internal/crdguard"
	"github.com/fieldwatch/fieldwatch/internal/history"
	"github.com/fieldwatch/fieldwatch/internal/history/web"
	"github.com/fieldwatch/fieldwatch/watcher"
)

// files is a repeatable flag.
type files []string

func (f *files) String() string     { return strings.Join(*f, ",") }
func (f *files) Set(v string) error { *f = append(*f, v); return nil }

// nameList is a repeatable flag whose values may also be comma lists.
type nameList []string

func (n *nameList) String() string { return strings.Join(*n, ",") }
func (n *nameList) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			return errors.New("an empty name")
		}
		*n = append(*n, s)
	}
	return nil
}

func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fieldwatch run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		kube      kubeFlags
		ruleFiles files
		cfg       app.Config
		logLevel  string
	)
	kube.register(fs)
	fs.Var(&ruleFiles, "rules", "rules file (repeat for several; they are merged). Required, unless --metrics-config is given")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", ":8080", "address for /metrics, /healthz and /readyz, and the history's API and page unless --history-addr is set (\"\" to disable; port 0 picks a free port, logged as \"http server listening\")")
	fs.DurationVar(&cfg.HTTPIdleTimeout, "http-idle-timeout", connlimit.DefaultIdleTimeout, "close a keep-alive connection of the HTTP servers (--http-addr, --pprof-addr, --audit-webhook-addr, --admission-addr) after this long without a request")
	fs.StringVar(&cfg.StateDir, "state-dir", "", "directory for the restart baseline (baseline.db), the dead-letter file (dead-letter.jsonl) and the history (history.db); on a volume that outlives the pod, nothing is lost across restarts and rollouts")
	fs.IntVar(&cfg.Workers, "workers", app.DefaultWorkers, "changes evaluated in parallel")
	queueBytes, objectBytes := byteSize(watcher.DefaultQueueBytes), byteSize(watcher.DefaultQueueObjectBytes)
	fs.IntVar(&cfg.Queue.Changes, "queue-max-changes", watcher.DefaultQueueChanges, "changes waiting for a worker at most, each write its own; beyond it the watcher slows down")
	fs.Var(&queueBytes, "queue-max-bytes", "bytes the changes waiting for a worker hold at most (a quantity such as 64Mi); beyond it the watcher slows down")
	fs.IntVar(&cfg.Queue.ObjectChanges, "queue-max-object-changes", watcher.DefaultQueueObjectChanges, "changes of one object waiting for a worker at most; beyond it the watcher slows down")
	fs.Var(&objectBytes, "queue-max-object-bytes", "bytes the changes of one object waiting for a worker hold at most (a quantity such as 16Mi); beyond it the watcher slows down")
	fs.BoolVar(&cfg.DryRun, "dry-run", false, "patch actions log the patch instead of sending it")
	fs.StringVar(&cfg.ExternalURL, "external-url", "", "the URL users reach fieldwatch's history page at (https://fieldwatch.example.com): notifications link each object to /history/object there")
	fs.StringVar(&cfg.ClusterName, "cluster-name", "", "the cluster's name: every payload's cluster, the history's chain and checkpoints, and in notifications the alertmanager action's cluster label, PagerDuty's source, the messages' text")
	fs.BoolVar(&cfg.LeaderElect, "leader-elect", false, "elect one active replica through a coordination.k8s.io Lease")
	fs.StringVar(&cfg.LeaseNamespace, "leader-elect-namespace", podNamespace(), "namespace of the leader election Lease")
	fs.StringVar(&cfg.LeaseName, "leader-elect-name", app.DefaultLeaseName, "name of the leader election Lease (with --total-shards > 1, the default is fieldwatch-shard-N-of-M: each shard elects its own leader)")
	fs.StringVar(&cfg.Identity, "leader-elect-identity", "", "this replica's name in the Lease (default: host name, a StatefulSet's pod name); each process holds the Lease as NAME_<process ID>, and one started again under the same name hands its previous process's Lease to the other replicas")
	fs.DurationVar(&cfg.LeaseDuration, "leader-elect-lease-duration", app.DefaultLeaseDuration, "how long after the leader's last renewal a standby takes over (at most a retry period later)")
	fs.DurationVar(&cfg.RenewDeadline, "leader-elect-renew-deadline", app.DefaultRenewDeadline, "how long a leader that cannot renew its Lease keeps acting; it then stops delivering at once (must be less than the lease duration)")
	fs.DurationVar(&cfg.RetryPeriod, "leader-elect-retry-period", app.DefaultRetryPeriod, "how often the leader renews its Lease (with its watermarks); a standby reads it twice as often")
	fs.IntVar(&cfg.Shard, "shard", 0, "this replica's shard, 0 <= shard < total-shards")
	fs.IntVar(&cfg.TotalShards, "total-shards", 1, "number of shards the objects are split into (by the FNV-1a hash of their UID)")
	fs.DurationVar(&cfg.GracePeriod, "grace-period", app.DefaultGracePeriod, "on SIGTERM, how long queued changes and actions may drain; then what is left is dead-lettered (with --leader-elect: left to the next leader)")
	fs.Var((*nameList)(&cfg.Namespaces), "namespaces", "namespaced install: watch only these namespaces (a comma list, or repeat), with the rights of Roles in them (fieldwatch rbac --namespaces prints them); "+
		"cluster-scoped resources are not watched, a rule without match.namespaces watches all of these, and rules that name another namespace or select cluster-scoped resources are refused")
	fs.DurationVar(&cfg.DiscoveryInterval, "discovery-interval", app.DefaultDiscoveryInterval, "how often discovery runs besides when CRDs or APIServices change; without the right to list those (a namespaced install without --read-crds RBAC) it is how soon the resources of a new CRD are watched")
	fs.StringVar(&cfg.Metrics.File, "metrics-config", "", "metrics from fields: a kube-state-metrics CustomResourceStateMetrics file; its series, and those of the rules files' metrics sections, are served on --metrics-addr")
	fs.StringVar(&cfg.Metrics.Addr, "metrics-addr", ":8082", "address serving the metrics from fields at /metrics, when any are configured (\"\" to disable); with --leader-elect only the leader serves them")
	fs.IntVar(&cfg.Metrics.SeriesLimit, "metrics-series-limit", fieldmetrics.DefaultSeriesLimit, "metrics from fields: series one metric family keeps at most; past it series are skipped and counted")
	fs.IntVar(&cfg.Metrics.MaxLabelValueBytes, "metrics-max-label-bytes", fieldmetrics.DefaultMaxLabelValueBytes, "metrics from fields: longest label value (and label name read from an object); a series with a longer one is skipped and counted")
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	pprof := fs.Bool("pprof", false, "serve Go profiles under /debug/pprof/ on --pprof-addr")
	fs.StringVar(&cfg.PprofAddr, "pprof-addr", "127.0.0.1:6060", "loopback address for --pprof (other addresses are refused; use kubectl port-forward)")
	fs.IntVar(&cfg.CRDImpactMaxObjects, "crd-impact-max-objects", app.DefaultCRDImpactMaxObjects,
		"most custom resources one CRD change's impact scan reads (rules with crd: {impact: true}); beyond, the payload says the counts are lower bounds")
	fs.DurationVar(&cfg.CRDImpactTimeout, "crd-impact-timeout", app.DefaultCRDImpactTimeout,
		"longest one CRD change's impact scan runs, list included; beyond, the payload says the counts are lower bounds")
	guardMode := fs.String("crd-guard", "", "CRD guard on the admission endpoint: off, warn (allowed, with a warning per breaking check and the objects it strands) or deny (refused unless the CRD carries fieldwatch.io/allow-breaking); on also runs the storage-version ledger (docs/crd-checks.md). Default warn with --admission-addr (not with --namespaces), else off")
	fs.StringVar(&cfg.CRDGuard.PolicyFile, "crd-guard-policy", "", "the CRD guard's per-check policy (crd-diff --policy's file: fieldwatch's checks: or crdify's configuration)")
	fs.BoolVar(&cfg.CRDGuard.DenyIncomplete, "crd-guard-deny-incomplete", false, "deny mode: refuse a CRD change whose check could not finish (by default it is allowed with a warning)")
	fs.DurationVar(&cfg.CRDGuard.Timeout, "crd-guard-timeout", crdguard.DefaultTimeout, "longest one CRD review runs; keep it below the webhook's timeoutSeconds for CRDs")
	keepHistory := fs.Bool("history", true, "keep the history of what fired (in <state-dir>/history.db, or --history-dsn), served on --http-addr (or --history-addr) at /api/v1/history and /history")
	fs.StringVar(&cfg.History.DSN, "history-dsn", "", "keep the history in this PostgreSQL database (a postgres:// URL or key=value settings; replicas may share it) instead of the state dir; give the password in $PGPASSWORD or a passfile, not here")
	dsnFile := fs.String("history-dsn-file", "", "read --history-dsn from this file (a mounted Secret's key), password included")
	hi := &cfg.History
	fs.StringVar(&hi.Addr, "history-addr", "", "serve the history's API and page on this address of their own instead of --http-addr (port 0 picks a free port, logged as \"history server listening\")")
	fs.BoolVar(&hi.InsecureLoopback, "history-insecure-loopback", false, "serve history requests without a token, from a loopback address to Host localhost, 127.0.0.1 or [::1], as everything: only for an authenticating proxy beside fieldwatch in its pod (docs/history.md)")
	authQPS := fs.Float64("history-auth-qps", web.DefaultReviewQPS, "TokenReviews and SubjectAccessReviews a second for the history's callers, on a client of their own; a request that needs more is refused (429), never queued")
	fs.IntVar(&hi.Auth.Burst, "history-auth-burst", web.DefaultReviewBurst, "burst of --history-auth-qps")
	fs.IntVar(&hi.Auth.MaxInFlight, "history-auth-max-in-flight", web.DefaultReviewsInFlight, "TokenReviews and SubjectAccessReviews under way at once for the history's callers; a request that needs more is refused (429)")
	fs.Float64Var(&hi.Auth.FailuresQPS, "history-auth-failures-qps", web.DefaultFailuresQPS, "history requests a second without valid credentials from one source address (an IPv6 /64); beyond, the source's requests are refused (429) before any review")
	fs.IntVar(&hi.Auth.FailuresBurst, "history-auth-failures-burst", web.DefaultFailuresBurst, "burst of --history-auth-failures-qps")
	fs.DurationVar(&hi.Auth.TokenCacheTTL, "authentication-token-webhook-cache-ttl", web.DefaultCacheTTL, "the history: how long a TokenReview's answer is reused")
	fs.DurationVar(&hi.Auth.AllowCacheTTL, "authorization-webhook-cache-authorized-ttl", web.DefaultCacheTTL, "the history: how long an allowing SubjectAccessReview's answer is reused")
	fs.DurationVar(&hi.Auth.DenyCacheTTL, "authorization-webhook-cache-unauthorized-ttl", web.DefaultCacheTTL, "the history: how long a denying SubjectAccessReview's answer is reused")
	responseBytes, inFlightBytes := byteSize(web.DefaultMaxResponseBytes), byteSize(web.DefaultMaxBytesInFlight)
	fs.Var(&responseBytes, "history-max-response-bytes", "payload bytes one history response holds at most (a quantity such as 8Mi); a page ends before, and a larger entry comes without its payload")
	fs.Var(&inFlightBytes, "history-max-bytes-in-flight", "payload bytes the history's responses being built hold at once (a quantity such as 64Mi); a request beyond is refused (429)")
	historyBytes := byteSize(app.DefaultHistoryMaxBytes)
	fs.Var(&historyBytes, "history-max-bytes", "most bytes the history takes (a quantity such as 512Mi, at least 16Mi); the oldest entries are removed first")
	fs.DurationVar(&cfg.History.MaxAge, "history-max-age", app.DefaultHistoryMaxAge, "how long entries are kept in the history; older ones are removed")
	fs.StringVar(&cfg.History.SigningKeyFile, "history-signing-key-file", "", "sign checkpoints of the history's audit trail with this Ed25519 private key (PEM PKCS #8, as openssl genpkey -algorithm ed25519 writes it; a mounted Secret's key); fieldwatch history pubkey prints its public key (docs/trail.md)")
	fs.IntVar(&cfg.History.CheckpointEvery, "history-checkpoint-every", history.DefaultCheckpointEvery, "with --history-signing-key-file: sign a checkpoint of the trail after this many records")
	fs.DurationVar(&cfg.History.VerifyEvery, "history-verify-interval", history.DefaultVerifyEvery, "verify the history's trail in place at start and this long after each verification (with the signing key's public key when there is one): the page's verified mark and the fieldwatch_history_trail_* metrics; 0 never")
	fs.DurationVar(&cfg.History.CheckpointInterval, "history-checkpoint-interval", history.DefaultCheckpointInterval, "with --history-signing-key-file: sign a checkpoint of the trail this long after the first record not yet sealed, at most")
	au := &cfg.Audit
	maxBody := byteSize(audit.DefaultMaxBodyBytes)
	indexBytes := byteSize(audit.DefaultMaxBytes)
	fs.StringVar(&au.WebhookAddr, "audit-webhook-addr", "", "attribution: address of the HTTPS receiver for the apiserver's audit webhook backend, such as :8443 (empty: none)")
	fs.StringVar(&au.WebhookCertFile, "audit-webhook-cert-file", "", "attribution: the receiver's serving certificate (PEM; reloaded when it changes)")
	fs.StringVar(&au.WebhookKeyFile, "audit-webhook-key-file", "", "attribution: the receiver's serving key (PEM)")
	fs.StringVar(&au.WebhookClientCAFile, "audit-webhook-client-ca-file", "", "attribution: accept posts with a client certificate signed by these CAs that names one of --audit-webhook-client-name (use a CA of its own for the apiserver's certificate, not the cluster CA)")
	fs.Var((*nameList)(&au.WebhookClientNames), "audit-webhook-client-name", "attribution: the apiserver's client certificate: its CN, or a DNS or URI SAN, matched exactly (repeat, or a comma list, for several). Required with --audit-webhook-client-ca-file")
	fs.StringVar(&au.WebhookTokenFile, "audit-webhook-token-file", "", "attribution: accept posts with this bearer token")
	fs.Var((*nameList)(&au.WebhookPeers), "audit-webhook-peers", "attribution, with --leader-elect: the other replicas' receivers, host:port (repeat, or a comma list; a name resolves to every address, such as a headless Service's): each audit event list the apiserver posts to this replica is forwarded to them before it is acknowledged, so that the replica that takes over attributes what it delivers. Replicas prove themselves to each other with the receiver's serving certificate, the same for all")
	fs.Var(&maxBody, "audit-webhook-max-body", "attribution: largest audit event list accepted (bytes, or a quantity such as 32Mi); the events one keeps may take a quarter of it")
	fs.IntVar(&au.WebhookMaxRequests, "audit-webhook-max-requests", audit.DefaultMaxConcurrentRequests, "attribution: audit event lists read at once; more get 429 and the apiserver retries them")
	fs.DurationVar(&au.WebhookLinger, "audit-webhook-linger", app.DefaultAuditWebhookLinger, "attribution: on SIGTERM, how long the audit webhook keeps taking the apiserver's posts (overlapping the drain), relaying them to --audit-webhook-peers once this replica stopped, while the Service stops sending them here: the apiserver drops a post that finds no listener, and its changes would go out unattributed")
	fs.StringVar(&au.LogPath, "audit-log", "", "attribution: the apiserver's JSON audit log to follow (--audit-log-path), across rotation and truncation")
	fs.StringVar(&au.LogStateFile, "audit-log-state", "", "attribution: where to record how far the audit log was read (default <state-dir>/audit-log.state with --state-dir)")
	fs.DurationVar(&au.Wait, "audit-wait", audit.DefaultWait, "attribution: how long a change waits at most for its audit event")
	fs.DurationVar(&au.MatchWindow, "audit-match-window", audit.DefaultWindow, "attribution: how far apart an audit event and a change may be to match without a resourceVersion")
	fs.DurationVar(&au.ClockSkew, "audit-clock-skew", audit.DefaultClockSkew, "attribution: how far the apiserver's clock may run ahead of fieldwatch's")
	fs.IntVar(&au.IndexMaxEvents, "audit-index-max-events", audit.DefaultMaxEvents, "attribution: audit events held for matching at most")
	fs.Var(&indexBytes, "audit-index-max-bytes", "attribution: bytes the audit events held for matching take at most (a quantity such as 64Mi)")
	fs.DurationVar(&au.IndexMaxAge, "audit-index-max-age", audit.DefaultMaxAge, "attribution: how long an audit event is held for matching")
	fs.IntVar(&au.MaxWaiting, "audit-max-waiting", audit.DefaultMaxWaiting, "attribution: changes waiting for their audit event or actions at most; beyond it the watcher slows down")
	ad := &cfg.Admission
	admissionBody, admissionBytes := byteSize(audit.DefaultAdmissionMaxBody), byteSize(audit.DefaultAdmissionMaxBytes)
	fs.StringVar(&ad.Addr, "admission-addr", "", "attribution: address of fieldwatch's validating admission webhook (HTTPS, path /validate), such as :9443 (empty: none); `fieldwatch rbac -o admission-webhook` prints its ValidatingWebhookConfiguration")
	fs.StringVar(&ad.CertFile, "admission-cert-file", "", "attribution: the admission webhook's serving certificate (PEM; reloaded when it changes; its CA is the configuration's caBundle)")
	fs.StringVar(&ad.KeyFile, "admission-key-file", "", "attribution: the admission webhook's serving key (PEM)")
	fs.StringVar(&ad.ClientCAFile, "admission-client-ca-file", "", "attribution: accept reviews only with a client certificate signed by these CAs that names one of --admission-client-name (where the apiserver presents one: --admission-control-config-file)")
	fs.Var((*nameList)(&ad.ClientNames), "admission-client-name", "attribution: the apiserver's client certificate for webhooks: its CN, or a DNS or URI SAN, matched exactly (repeat, or a comma list). Required with --admission-client-ca-file")
	fs.StringVar(&ad.TokenFile, "admission-token-file", "", "attribution: accept reviews only with this bearer token")
	fs.Var((*nameList)(&ad.Peers), "admission-peers", "attribution: the other replicas' admission webhooks, host:port (repeat, or a comma list; a name resolves to every address, such as a headless Service's): each review's record is forwarded to them, so that the leader holds every record whichever replica the apiserver called")
	fs.Var(&admissionBody, "admission-max-body", "attribution: largest AdmissionReview read (a quantity such as 16Mi); a larger one gets 413 and the write goes on unattributed")
	fs.IntVar(&ad.MaxPending, "admission-max-pending", audit.DefaultAdmissionMaxPending, "attribution: admission records held for matching at most; beyond it the oldest are dropped")
	fs.Var(&admissionBytes, "admission-max-pending-bytes", "attribution: bytes the admission records held take at most (a quantity such as 16Mi)")
	fs.DurationVar(&ad.CandidateTTL, "admission-candidate-ttl", audit.DefaultAdmissionTTL, "attribution: how long after it arrived an admission request may stand for a watched change; an older one is no candidate")
	fs.StringVar(&ad.CertSecret, "admission-cert-secret", "", "attribution: keep the admission webhook's serving certificate in this Secret (NAMESPACE/NAME, existing, empty at first) without cert-manager: made, renewed before it expires, written to --admission-cert-dir and served, with the caBundle of --admission-webhook-config kept in step")
	fs.StringVar(&ad.WebhookConfig, "admission-webhook-config", "", "attribution, with --admission-cert-secret: the ValidatingWebhookConfiguration whose caBundle is kept in step")
	fs.Var((*nameList)(&ad.CertDNSNames), "admission-cert-dns-names", "attribution, with --admission-cert-secret: the DNS names of the serving certificate, the Service's first (<service>.<namespace>.svc)")
	fs.StringVar(&ad.CertDir, "admission-cert-dir", "", "attribution, with --admission-cert-secret: where the serving certificate is written (default a directory in $TMPDIR)")
	fs.DurationVar(&ad.Linger, "admission-linger", app.DefaultAdmissionLinger, "attribution: on SIGTERM, how long the admission webhook keeps answering (overlapping the drain) while the Service stops sending this replica the apiserver's calls, which would otherwise let writes through unrecorded and CRD changes unchecked")
	fs.DurationVar(&ad.Wait, "admission-wait", app.DefaultAdmissionWait, "attribution, with admission as the only source: how long a change waits at most for its admission record (one forwarded by a peer)")
	err := fs.Parse(args)
	if err != nil {
		return 2
	}
	if !*pprof {
		cfg.PprofAddr = ""
	}
	if *guardMode == "" {
		// The guard answers on the admission endpoint, on with it, and
		// reviews CRDs, cluster-wide: not in a namespaced install.
		*guardMode = string(crdguard.Off)
		if ad.Addr != "" && len(cfg.Namespaces) == 0 {
			*guardMode = string(crdguard.Warn)
		}
	}
	if cfg.CRDGuard.Mode, err = crdguard.ParseMode(*guardMode); err != nil {
		_, _ = fmt.Fprintf(stderr, "fieldwatch run: --crd-guard: %v\n", err)
		return 2
	}
	if cfg.ExternalURL != "" {
		if u, err := url.Parse(cfg.ExternalURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			_, _ = fmt.Fprintln(stderr, "fieldwatch run: --external-url: want an absolute http or https URL without credentials")
			return 2
		}
	}
	cfg.Queue.Bytes, cfg.Queue.ObjectBytes = int64(queueBytes), int64(objectBytes)
	cfg.History.Disabled = !*keepHistory
	cfg.History.MaxBytes = int64(historyBytes)
	hi.Auth.QPS = float32(*authQPS)
	hi.MaxResponseBytes, hi.MaxBytesInFlight = int64(responseBytes), int64(inFlightBytes)
	au.WebhookMaxBodyBytes = int64(maxBody)
	au.IndexMaxBytes = int64(indexBytes)
	ad.MaxBodyBytes, ad.MaxPendingBytes = int64(admissionBody), int64(admissionBytes)
	if (len(ruleFiles) == 0 && cfg.Metrics.File == "") || fs.NArg() > 0 {
		_, _ = fmt.Fprintln(stderr, "fieldwatch run: --rules FILE is required (or --metrics-config FILE) and no arguments are taken")
		fs.Usage()
		return 2
	}
	logger, err := newLogger(stderr, logLevel)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "fieldwatch run: %v\n", err)
		return 2
	}
	if *dsnFile != "" {
		if cfg.History.DSN != "" {
			_, _ = fmt.Fprintln(stderr, "fieldwatch run: give --history-dsn or --history-dsn-file, not both")
			return 2
		}
		b, err := os.ReadFile(*dsnFile)
		if err != nil {
			_, _ = fmt.Fprintf(stderr, "fieldwatch run: --history-dsn-file: %v\n", err)
			return 2
		}
		if cfg.History.DSN = strings.TrimSpace(string(b)); cfg.History.DSN == "" {
			_, _ = fmt.Fprintf(stderr, "fieldwatch run: --history-dsn-file %s is empty\n", *dsnFile)
			return 2
		}
	}
	rest, err := kube.config()
	if err != nil {
		logger.Error("cannot reach the cluster", "error", err)
		return 1
	}
	cfg.RulesFiles = ruleFiles
	cfg.Rest = rest
	cfg.Logger = logger
	cfg.Stdout = stdout
	if err := app.Run(ctx, cfg); err != nil {
		logger.Error("fieldwatch stopped", "error", err)
		return 1
	}
	return 0
}

// newLogger returns the process logger: JSON lines on stderr. client-go's
// klog output goes through it too.
func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, errors.New("--log-level: want debug, info, warn or error")
	}
	logger := slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
	klog.SetSlogLogger(logger)
	return logger, nil
}

// byteSize is a flag of a size in bytes, written as a number or a
// Kubernetes quantity (32Mi).
type byteSize int64

func (b *byteSize) String() string {
	return resource.NewQuantity(int64(*b), resource.BinarySI).String()
}

func (b *byteSize) Set(v string) error {
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return fmt.Errorf("not a size: %w", err)
	}
	n, ok := q.AsInt64()
	if !ok || n <= 0 {
		return fmt.Errorf("%q is not a positive number of bytes", v)
	}
	*b = byteSize(n)
	return nil
}

// podNamespace is the namespace of the pod's service account, "default"
// outside a cluster.
func podNamespace() string {
	if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns
		}
	}
	return "default"
}
