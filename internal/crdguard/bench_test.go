package crdguard

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/fieldwatch/fieldwatch/crd/diff"
	"github.com/fieldwatch/fieldwatch/crd/impact"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// cpuTime is the CPU time this process has used, user and system.
func cpuTime(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// perObject reports the time and this process's CPU per object checked.
func perObject(b *testing.B, n int, cpuStart time.Duration) {
	checked := float64(b.N) * float64(n)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/checked, "ns/object")
	b.ReportMetric(float64((cpuTime(b)-cpuStart).Nanoseconds())/checked, "cpu-ns/object")
}

// BenchmarkGuardReview measures the guard's answer to a breaking update
// of a CRD (spec.color's enum narrowed: one object in twenty rejected)
// against the number of its objects, side by side in one run with
// crd-diff --cluster's path over the same objects: the guard reads them
// from fieldwatch's cache and checks them on one impact.Scanner per core;
// crd-diff --cluster lists them in pages of 500 through the dynamic
// client and checks them on one Scanner (the apiserver's CPU serving the
// lists is not counted). cpu-ns/object is this process's CPU, user and
// system.
func BenchmarkGuardReview(b *testing.B) {
	env := testenv.Shared(b)
	ctx := context.Background()
	for _, n := range []int{1000, 10000, 50000} {
		m := many(b, n)
		req := m.narrowReview(b)
		want := fmt.Sprintf("fieldwatch: enum-values-removed spec.color (v1): %s objects rejected", number(n/20))
		b.Run(fmt.Sprintf("objects=%d/guard-cache", n), func(b *testing.B) {
			g := newGuard(b, Options{Mode: Warn, Source: CacheSource{Cache: func() Cache { return m.w }}, Timeout: 10 * time.Minute, MaxObjects: 2 * n})
			cpu := cpuTime(b)
			for b.Loop() {
				if d := g.Review(ctx, req); !hasLine(d.Response.Warnings, want) || len(d.Response.Warnings) != 1 {
					b.Fatalf("warnings %q", d.Response.Warnings)
				}
			}
			perObject(b, n, cpu)
		})
		b.Run(fmt.Sprintf("objects=%d/crd-diff-cluster", n), func(b *testing.B) {
			old, new := crdsOf(b, req)
			res := ListSource{Dynamic: env.Dynamic(b)}
			gvr := listResource(old, new)
			cpu := cpuTime(b)
			for b.Loop() {
				r := diff.Compare(old, new)
				s, err := impact.New(new, r)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := res.Objects(ctx, gvr, Whole, func(it Item, _ int) error { return s.Add(ctx, it.Content.Map()) }); err != nil {
					b.Fatal(err)
				}
				s.Finish()
				if len(r.Impact) != 1 || r.Impact[0].Count != n/20 || r.Scanned != n {
					b.Fatalf("impact %+v of %d", r.Impact, r.Scanned)
				}
			}
			perObject(b, n, cpu)
		})
	}
}

// crdsOf decodes the old and new CRD of a review.
func crdsOf(tb testing.TB, req *admissionv1.AdmissionRequest) (old, new *apiextensionsv1.CustomResourceDefinition) {
	tb.Helper()
	old, err := decodeCRD(req.OldObject.Raw)
	if err != nil {
		tb.Fatal(err)
	}
	new, err = decodeCRD(req.Object.Raw)
	if err != nil {
		tb.Fatal(err)
	}
	return old, new
}
