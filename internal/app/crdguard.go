package app

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/metadata"

	"github.com/fieldwatch/fieldwatch/crd/diff"
	"github.com/fieldwatch/fieldwatch/internal/crdguard"
)

// CRDGuardConfig turns on the CRD guard (docs/crd-checks.md): the
// admission endpoint hands it the reviews of CRD updates and deletions
// (app.crdGuard), and the storage-version ledger it judges them with runs
// on every replica, exporting fieldwatch_crd_stored_objects. Its zero
// value leaves both off.
type CRDGuardConfig struct {
	// Mode is off (""), warn or deny.
	Mode crdguard.Mode
	// PolicyFile is a crd-diff --policy file (fieldwatch's or crdify's
	// format) for the guard's checks; "" is the default policy.
	PolicyFile string
	// DenyIncomplete makes deny mode refuse a change whose check could
	// not finish; by default it is allowed with a warning.
	DenyIncomplete bool
	// Timeout bounds one review (default crdguard.DefaultTimeout): keep
	// it below the webhook configuration's timeoutSeconds. The objects
	// one review reads are bounded by Config.CRDImpactMaxObjects.
	Timeout time.Duration
}

func (c CRDGuardConfig) enabled() bool { return c.Mode != "" && c.Mode != crdguard.Off }

// startCRDGuard builds the guard and starts its ledger, which runs until
// ctx ends; it does nothing when the guard is off.
func (a *app) startCRDGuard(ctx context.Context, bg *sync.WaitGroup) error {
	cfg := a.cfg.CRDGuard
	if !cfg.enabled() {
		return nil
	}
	var policy *diff.Policy
	if cfg.PolicyFile != "" {
		p, err := diff.ReadPolicy(cfg.PolicyFile)
		if err != nil {
			return fmt.Errorf("crd guard policy: %w", err)
		}
		policy = p
	}
	md, err := metadata.NewForConfig(a.cfg.Rest)
	if err != nil {
		return fmt.Errorf("metadata client: %w", err)
	}
	cache := func() crdguard.Cache {
		if w := a.watcher.Load(); w != nil {
			return w
		}
		return nil
	}
	ledger := crdguard.NewLedger(crdguard.LedgerOptions{Dynamic: a.dyn, Logger: a.log})
	a.reg.MustRegister(ledger.Collector(cache))
	g, err := crdguard.New(crdguard.Options{
		Mode: cfg.Mode, Policy: policy, MaxObjects: a.cfg.CRDImpactMaxObjects, Timeout: cfg.Timeout, DenyIncomplete: cfg.DenyIncomplete,
		Source:     crdguard.Chain{crdguard.CacheSource{Cache: cache}, crdguard.ListSource{Dynamic: a.dyn, Metadata: md}},
		Ledger:     ledger,
		Logger:     a.log.With("component", "crd-guard"),
		Registerer: a.reg,
	})
	if err != nil {
		return err
	}
	a.guard.Store(g)
	bg.Go(func() {
		if err := ledger.Run(ctx); err != nil {
			a.log.Error("the storage-version ledger stopped", "error", err)
		}
	})
	a.log.Info("CRD guard on", "mode", cfg.Mode, "policy", cfg.PolicyFile, "maxObjects", a.cfg.CRDImpactMaxObjects)
	return nil
}

// crdGuard returns the CRD guard, nil when it is off: the admission
// endpoint answers the reviews crdguard.Handles takes with its Review.
func (a *app) crdGuard() *crdguard.Guard { return a.guard.Load() }
