package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/metadata"

	"github.com/fieldwatch/fieldwatch/crd/diff"
	"github.com/fieldwatch/fieldwatch/internal/audit"
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

// timeout is the longest one review takes.
func (c CRDGuardConfig) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return crdguard.DefaultTimeout
}

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
// endpoint answers the reviews crdguard.Handles takes with its Review
// (guardReviews).
func (a *app) crdGuard() *crdguard.Guard { return a.guard.Load() }

// guardReviews lets the admission endpoint hand the CRD guard the reviews
// it takes (audit.AdmissionGuard): it decodes the whole AdmissionReview,
// which the endpoint itself never does, and encodes the guard's answer.
type guardReviews struct{ g *crdguard.Guard }

var _ audit.AdmissionGuard = guardReviews{}

// Takes reports whether crdguard.Handles takes such a review.
func (r guardReviews) Takes(group, resource, subresource, operation string) bool {
	return crdguard.Handles(&admissionv1.AdmissionRequest{
		Resource: metav1.GroupVersionResource{Group: group, Resource: resource}, SubResource: subresource,
		Operation: admissionv1.Operation(operation),
	})
}

// Review answers body with the guard's Decision.
func (r guardReviews) Review(ctx context.Context, body []byte) (audit.GuardAnswer, error) {
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil {
		return audit.GuardAnswer{}, fmt.Errorf("decode the AdmissionReview: %w", err)
	}
	if review.Request == nil {
		return audit.GuardAnswer{}, errors.New("an AdmissionReview without a request")
	}
	d := r.g.Review(ctx, review.Request)
	out := admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: d.Response}
	b, err := json.Marshal(&out)
	if err != nil {
		return audit.GuardAnswer{}, fmt.Errorf("encode the answer: %w", err)
	}
	return audit.GuardAnswer{Review: b, Allowed: d.Response.Allowed, Override: d.Override}, nil
}
