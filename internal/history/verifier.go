package history

import (
	"context"
	"crypto/ed25519"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultVerifyEvery is how often `fieldwatch run` verifies its trail in
// place (--history-verify-interval).
const DefaultVerifyEvery = 15 * time.Minute

// Verification is the outcome of one verification of a store's trail in
// place.
type Verification struct {
	// Started and Finished bound the walk.
	Started, Finished time.Time
	// Covered: every entry this process recorded before it had been
	// written when the walk started, so was in the trail it read (the
	// Recorder's OldestUnwritten, or Started). Another writer's entries
	// are judged by the same time (docs/trail.md).
	Covered time.Time
	// Report is what Verify found; nil when Err is set.
	Report *Report
	// Err says why the trail could not be read.
	Err error

	problemSeqs map[int64]ProblemKind
}

// Problem returns the kind of the first problem the verification found
// with the entry of key seq, and whether there was one.
func (v *Verification) Problem(seq int64) (ProblemKind, bool) {
	k, ok := v.problemSeqs[seq]
	return k, ok
}

// VerifierOptions configure a Verifier.
type VerifierOptions struct {
	// Key, when set, is the public key the checkpoints must be signed
	// with; Interval the checkpoints' (VerifyOptions).
	Key      ed25519.PublicKey
	Interval time.Duration
	// Every is how long after a verification ended the next starts
	// (default DefaultVerifyEvery).
	Every time.Duration
	// Unwritten, when set, returns when the oldest entry not yet written
	// by this process's Recorder was recorded (Recorder.OldestUnwritten).
	Unwritten  func() time.Time
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Verifier verifies a store's trail in place, at once and then every
// VerifierOptions.Every, and keeps the last outcome for the history's
// page and metrics. A walk costs what `fieldwatch history verify` does
// (BenchmarkTrailExportVerify) and holds its memory bounds.
type Verifier struct {
	trail Trail
	opts  VerifierOptions
	last  atomic.Pointer[Verification]

	finished, problems, gaps prometheus.Gauge
	failures                 prometheus.Counter
}

// NewVerifier returns a Verifier of trail; Run starts it.
func NewVerifier(trail Trail, opts VerifierOptions) *Verifier {
	if opts.Every <= 0 {
		opts.Every = DefaultVerifyEvery
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	v := &Verifier{
		trail: trail, opts: opts,
		finished: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "fieldwatch", Subsystem: "history", Name: "trail_verified_timestamp_seconds",
			Help: "When the last verification of the history's trail in place finished (Unix time; 0: none yet).",
		}),
		problems: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "fieldwatch", Subsystem: "history", Name: "trail_problems",
			Help: "What the last verification of the history's trail found wrong: entries altered, deleted or reordered, bad signatures, a cut tail (docs/trail.md). Alert on any.",
		}),
		gaps: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "fieldwatch", Subsystem: "history", Name: "trail_gap_records",
			Help: "The gap records the last verification of the history's trail found: payloads the history says it did not keep.",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "fieldwatch", Subsystem: "history", Name: "trail_verify_failures_total",
			Help: "Verifications of the history's trail that could not read it.",
		}),
	}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(v.finished, v.problems, v.gaps, v.failures)
	}
	return v
}

// Run verifies until ctx ends.
func (v *Verifier) Run(ctx context.Context) {
	for {
		v.VerifyNow(ctx)
		t := time.NewTimer(v.opts.Every)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// VerifyNow verifies the trail once, keeps the outcome and returns it.
func (v *Verifier) VerifyNow(ctx context.Context) *Verification {
	out := &Verification{Started: time.Now()}
	out.Covered = out.Started
	if v.opts.Unwritten != nil {
		if o := v.opts.Unwritten(); !o.IsZero() && o.Before(out.Covered) {
			out.Covered = o
		}
	}
	out.Report, out.Err = Verify(func(each func(l *Link, e *Entry) error) error { return v.trail.Links(ctx, each) },
		VerifyOptions{Key: v.opts.Key, Now: out.Started, Interval: v.opts.Interval})
	out.Finished = time.Now()
	if ctx.Err() != nil {
		return v.Last() // stopped midway: not an outcome
	}
	if out.Err != nil {
		v.failures.Inc()
		v.opts.Logger.Error("history trail: the verification could not read the trail", "error", out.Err)
	} else {
		out.problemSeqs = map[int64]ProblemKind{}
		for _, p := range out.Report.Problems {
			if _, ok := out.problemSeqs[p.Seq]; p.Seq != 0 && !ok {
				out.problemSeqs[p.Seq] = p.Kind
			}
		}
		v.finished.Set(float64(out.Finished.UnixMilli()) / 1000)
		v.problems.Set(float64(len(out.Report.Problems)))
		v.gaps.Set(float64(len(out.Report.Gaps)))
		if n := len(out.Report.Problems); n > 0 {
			v.opts.Logger.Error("history trail: the verification found it altered or incomplete", "problems", n, "first", out.Report.Problems[0].String())
		}
	}
	v.last.Store(out)
	return out
}

// Last returns the last verification's outcome, nil before the first.
func (v *Verifier) Last() *Verification { return v.last.Load() }
