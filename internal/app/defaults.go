package app

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"time"

	"github.com/fieldwatch/fieldwatch/internal/connlimit"
)

// The defaults of Config, in one place: Run applies them to the fields a
// Config leaves zero, and the flags of `fieldwatch run` show them as
// their defaults, so that a test calling Run behaves as the binary does.
const (
	// DefaultWorkers is Config.Workers' default.
	DefaultWorkers = 4
	// DefaultGracePeriod is Config.GracePeriod's default.
	DefaultGracePeriod = 20 * time.Second
	// DefaultLeaseName is Config.LeaseName's default (with sharding, each
	// shard's Lease is named after it: shardLeaseName).
	DefaultLeaseName = "fieldwatch"
	// DefaultLeaseDuration, DefaultRenewDeadline and DefaultRetryPeriod
	// time the leader election: a standby takes over about
	// DefaultLeaseDuration after the leader last renewed; a leader that
	// could not renew for DefaultRenewDeadline stops delivering, before
	// its Lease can expire for the others.
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
	// DefaultDiscoveryInterval is Config.DiscoveryInterval's default.
	DefaultDiscoveryInterval = 30 * time.Second
	// DefaultCRDImpactMaxObjects and DefaultCRDImpactTimeout bound the
	// impact scan of one CRD change.
	DefaultCRDImpactMaxObjects = 50000
	DefaultCRDImpactTimeout    = 30 * time.Second
)

// auditLogState is the file in Config.StateDir that records how far the
// audit log was read, unless AuditConfig.LogStateFile names another.
const auditLogState = "audit-log.state"

// withDefaults returns cfg with the defaults in the fields it leaves zero,
// and what derives from other fields: each shard's Lease name and the
// audit log's state file in the state directory; Namespaces sorted, each
// once.
func (cfg Config) withDefaults() Config {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	orDefault(&cfg.Workers, DefaultWorkers)
	orDefault(&cfg.GracePeriod, DefaultGracePeriod)
	orDefault(&cfg.CRDImpactMaxObjects, DefaultCRDImpactMaxObjects)
	orDefault(&cfg.CRDImpactTimeout, DefaultCRDImpactTimeout)
	orDefault(&cfg.LeaseDuration, DefaultLeaseDuration)
	orDefault(&cfg.RenewDeadline, DefaultRenewDeadline)
	orDefault(&cfg.RetryPeriod, DefaultRetryPeriod)
	orDefault(&cfg.HTTPIdleTimeout, connlimit.DefaultIdleTimeout)
	orDefault(&cfg.DiscoveryInterval, DefaultDiscoveryInterval)
	if cfg.History.MaxBytes <= 0 {
		cfg.History.MaxBytes = DefaultHistoryMaxBytes
	}
	orDefault(&cfg.History.MaxAge, DefaultHistoryMaxAge)
	if cfg.LeaseName == "" {
		cfg.LeaseName = DefaultLeaseName
	}
	if cfg.LeaderElect && cfg.TotalShards > 1 && cfg.LeaseName == DefaultLeaseName {
		cfg.LeaseName = shardLeaseName(cfg.Shard, cfg.TotalShards)
	}
	if cfg.Namespaces != nil {
		cfg.Namespaces = slices.Compact(slices.Sorted(slices.Values(cfg.Namespaces)))
	}
	if au := &cfg.Audit; au.LogPath != "" && au.LogStateFile == "" && cfg.StateDir != "" {
		au.LogStateFile = filepath.Join(cfg.StateDir, auditLogState)
	}
	return cfg
}

// orDefault sets *v to def unless it is positive.
func orDefault[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// shardLeaseName names the Lease of one shard: each shard elects its own
// leader.
func shardLeaseName(shard, total int) string {
	return fmt.Sprintf("%s-shard-%d-of-%d", DefaultLeaseName, shard, total)
}
