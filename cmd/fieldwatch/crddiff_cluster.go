package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fieldwatch/fieldwatch/crd/diff"
	"github.com/fieldwatch/fieldwatch/crd/impact"
	"github.com/fieldwatch/fieldwatch/crd/validate"
	"github.com/fieldwatch/fieldwatch/internal/crdguard"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kubeversion "k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/dynamic"
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// clusterPageSize is the page size of crd-diff --cluster's lists, the
// running fieldwatch's.
const clusterPageSize = 500

// progressEvery is how often a long scan reports on stderr.
const progressEvery = 2 * time.Second

// errObjectLimit stops a scan at --crd-impact-max-objects.
var errObjectLimit = errors.New("object limit")

// crdDiffCluster compares each CRD of newPath with the one the cluster
// serves and scans the live objects of those with breaking checks.
func crdDiffCluster(ctx context.Context, newPath string, opts crdDiffOptions) ([]*diff.Result, error) {
	docs, err := readCRDs(newPath)
	if err != nil {
		return nil, err
	}
	if err := validate.Documents(ctx, docs); err != nil {
		return nil, err
	}
	cfg, err := opts.kube.config()
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	var results []*diff.Result
	for _, d := range docs {
		u, err := dyn.Resource(crdResource).Get(ctx, d.CRD.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			res := diff.Added(d.CRD)
			if opts.policy != nil {
				res = opts.policy.Apply(res)
			}
			results = append(results, res)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("get CustomResourceDefinition %s: %w", d.CRD.Name, err)
		}
		live, err := diff.FromMap(u.Object)
		if err != nil {
			return nil, fmt.Errorf("CustomResourceDefinition %s from the cluster: %w", d.CRD.Name, err)
		}
		res := diff.CompareWith(live, d.CRD, opts.policy)
		results = append(results, res)
		if res.Breaking == 0 {
			continue
		}
		if err := scanLive(ctx, dyn, live, d, res, opts); err != nil {
			return nil, err
		}
	}
	return results, nil
}

// scanLive lists the live objects of a CRD at the version its clients
// prefer and runs them through the impact scan of res, within the bounds
// of opts; a scan that stops early records why in res.ImpactError.
func scanLive(ctx context.Context, dyn dynamic.Interface, live *apiextensionsv1.CustomResourceDefinition, d diff.Document, res *diff.Result, opts crdDiffOptions) error {
	s, err := impact.New(d.CRD, res)
	if err != nil {
		return fmt.Errorf("%s:%d: %s: %w", d.File, d.Line, res.CRD, err)
	}
	// The objects still stored at a version NEW removes, as a ledger that
	// has just seen the live CRD places them.
	stored := crdguard.NewUnmigrated(live, d.CRD, crdguard.NewClassifier(live, time.Now(), crdguard.DefaultSettle))
	defer func() {
		s.Finish()
		stored.Record(res, opts.policy)
	}()
	v := preferredVersion(live)
	if v == "" {
		res.ImpactError = "the cluster's CRD serves no version to list its objects at"
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, opts.timeout)
	defer cancel()
	start, reported := time.Now(), time.Now()
	client := dyn.Resource(schema.GroupVersionResource{Group: live.Spec.Group, Version: v, Resource: live.Spec.Names.Plural})
	list := metav1.ListOptions{Limit: clusterPageSize}
	err = func() error {
		for {
			page, err := client.List(ctx, list)
			if err != nil {
				return fmt.Errorf("list %s.%s.%s: %w", live.Spec.Names.Plural, v, live.Spec.Group, err)
			}
			for i := range page.Items {
				if s.Scanned() >= opts.maxObjects {
					return errObjectLimit
				}
				o := &page.Items[i]
				if err := s.Add(ctx, o.Object); err != nil {
					return err
				}
				stored.Add(o.GetNamespace(), o.GetName(), o.GetResourceVersion())
			}
			if time.Since(reported) >= progressEvery {
				reported = time.Now()
				_, _ = fmt.Fprintf(opts.progress, "crd-diff: %s: %d objects scanned in %s\n", res.CRD, s.Scanned(), time.Since(start).Round(time.Second))
			}
			if list.Continue = page.GetContinue(); list.Continue == "" {
				return nil
			}
		}
	}()
	switch {
	case err == nil:
	case errors.Is(err, errObjectLimit):
		res.ImpactError = fmt.Sprintf("stopped after %d objects (--crd-impact-max-objects): the counts are lower bounds", s.Scanned())
	case ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded):
		res.ImpactError = fmt.Sprintf("stopped after %s (--crd-impact-timeout), %d objects read: the counts are lower bounds", opts.timeout, s.Scanned())
	case ctx.Err() != nil:
		return err
	default:
		res.ImpactError = fmt.Sprintf("%v; %d objects read: the counts are lower bounds", err, s.Scanned())
	}
	return nil
}

// preferredVersion is the served version of highest priority, as
// discovery orders them ("" when none is served).
func preferredVersion(crd *apiextensionsv1.CustomResourceDefinition) string {
	best := ""
	for _, v := range crd.Spec.Versions {
		if v.Served && (best == "" || kubeversion.CompareKubeAwareVersionStrings(v.Name, best) > 0) {
			best = v.Name
		}
	}
	return best
}
