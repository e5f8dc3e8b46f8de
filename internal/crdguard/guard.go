package crdguard

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/crd/diff"
)

// Mode is what the guard does with a breaking CRD change.
type Mode string

const (
	// Off answers every review allowed, at once.
	Off Mode = "off"
	// Warn allows every change, with a warning per breaking check.
	Warn Mode = "warn"
	// Deny refuses the changes that strand objects (see Guard).
	Deny Mode = "deny"
)

// ParseMode reads a --crd-guard value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Off, Warn, Deny:
		return m, nil
	}
	return "", fmt.Errorf("crd guard mode %q: want off, warn or deny", s)
}

// AllowAnnotation, on a CRD with a reason as its value, lets through in
// deny mode a breaking update of the CRD (on the new CRD) or its deletion
// (on the stored CRD), with a warning that repeats the reason.
const AllowAnnotation = "fieldwatch.io/allow-breaking"

// Defaults of Options.
const (
	// DefaultMaxObjects bounds the objects one review reads, as
	// --crd-impact-max-objects bounds an impact scan.
	DefaultMaxObjects = 50000
	// DefaultTimeout is the time a review takes at most: below the 10 s
	// timeoutSeconds fieldwatch's webhook configuration gives CRDs, with
	// room for the network and the apiserver.
	DefaultTimeout = 8 * time.Second
	// DefaultMaxConcurrent is how many reviews compute at once.
	DefaultMaxConcurrent = 2
)

// Options configure a Guard.
type Options struct {
	// Mode is off, warn (the default) or deny.
	Mode Mode
	// Policy sets the checks' severities (crd-diff's --policy, in
	// fieldwatch's or crdify's format); nil is the default.
	Policy *diff.Policy
	// MaxObjects and Timeout bound one review (defaults
	// DefaultMaxObjects, DefaultTimeout): a review that reaches either
	// answers with what it found, saying how far it got.
	MaxObjects int
	Timeout    time.Duration
	// DenyIncomplete makes deny mode refuse a change whose check could
	// not finish and found nothing to refuse it for; by default it is
	// allowed with a warning that says so.
	DenyIncomplete bool
	// Source gives the objects of a CRD: fieldwatch's cache where it
	// holds them, else paged lists (Chain of CacheSource and
	// ListSource). Required unless Mode is Off.
	Source Source
	// Ledger tells which version objects are stored at; nil answers from
	// the reviewed CRD alone (NewClassifier), which knows less.
	Ledger *Ledger
	// Workers is how many goroutines check one review's objects (default
	// GOMAXPROCS); MaxConcurrent how many reviews compute at once
	// (default DefaultMaxConcurrent): the others wait, within their time.
	Workers       int
	MaxConcurrent int
	// Logger receives the guard's logs (default slog.Default());
	// Registerer its metrics (nil: not registered).
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// Clock is the guard's time (default the real clock).
	Clock clock.PassiveClock
}

// Guard answers admission reviews of CustomResourceDefinitions: for an
// UPDATE, the crd/diff checks of the change (under the Policy) and their
// impact on the live objects (crd/impact, and the storage-version ledger
// for versions leaving spec.versions or status.storedVersions); for a
// DELETE, the objects the deletion takes with it.
//
// Warn allows every change, with one warning per breaking or unknown
// check (field, check, objects stranded, a few of them) or, for a
// deletion, per namespace. Deny refuses, with an Invalid (422) status
// saying the same, an update with an unknown check or a breaking one that
// strands at least one object, and the deletion of a CRD that has
// objects; AllowAnnotation lets such a change through, and Decision's
// Override records it. A change that breaks nothing, and a deletion of a
// CRD without objects, are allowed at once without a warning.
//
// A review answers within Options.Timeout whatever the CRD and the number
// of objects: a review that cannot finish answers with what it found and
// a warning that says how far it got (Options.DenyIncomplete). Guard is
// safe for concurrent use.
type Guard struct {
	mode           Mode
	policy         *diff.Policy
	max            int
	timeout        time.Duration
	denyIncomplete bool
	source         Source
	ledger         *Ledger
	workers        int
	slots          chan struct{}
	log            *slog.Logger
	clock          clock.PassiveClock
	metrics        *guardMetrics
}

// New returns a Guard.
func New(opts Options) (*Guard, error) {
	if opts.Mode == "" {
		opts.Mode = Warn
	}
	if _, err := ParseMode(string(opts.Mode)); err != nil {
		return nil, err
	}
	if opts.Source == nil && opts.Mode != Off {
		return nil, fmt.Errorf("crd guard: a Source is required in %s mode", opts.Mode)
	}
	if opts.MaxObjects <= 0 {
		opts.MaxObjects = DefaultMaxObjects
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Workers <= 0 {
		opts.Workers = runtime.GOMAXPROCS(0)
	}
	if opts.MaxConcurrent <= 0 {
		opts.MaxConcurrent = DefaultMaxConcurrent
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Guard{mode: opts.Mode, policy: opts.Policy, max: opts.MaxObjects, timeout: opts.Timeout,
		denyIncomplete: opts.DenyIncomplete, source: opts.Source, ledger: opts.Ledger, workers: opts.Workers,
		slots: make(chan struct{}, opts.MaxConcurrent), log: opts.Logger, clock: opts.Clock,
		metrics: newGuardMetrics(opts.Registerer)}, nil
}

// Mode returns the guard's mode.
func (g *Guard) Mode() Mode { return g.mode }

// Handles reports whether req is for the guard: an UPDATE or DELETE of a
// CustomResourceDefinition or of its status.
func Handles(req *admissionv1.AdmissionRequest) bool {
	return req.Resource.Group == CRDResource.Group && req.Resource.Resource == CRDResource.Resource &&
		(req.SubResource == "" || req.SubResource == "status") &&
		(req.Operation == admissionv1.Update || req.Operation == admissionv1.Delete)
}

// Decision is the guard's answer to one review.
type Decision struct {
	// Response answers the AdmissionReview; its UID is the request's.
	Response *admissionv1.AdmissionResponse
	// Override is set when AllowAnnotation let through what deny mode
	// refuses: what the payload of the CRD change records.
	Override *Override
}

// Override records that the annotation let a change through deny mode:
// change.GuardOverride, which the admission endpoint keeps with its record
// of the request, so that the payload of the CRD change it is matched to
// carries it (as "guard").
type Override = change.GuardOverride

// Review answers one admission request. Requests the guard does not
// handle (Handles), and every request in Off mode, are allowed at once.
// It never fails: what it cannot check it allows, saying so in a warning
// (deny mode: unless Options.DenyIncomplete).
func (g *Guard) Review(ctx context.Context, req *admissionv1.AdmissionRequest) *Decision {
	start := g.clock.Now()
	d := g.review(ctx, req)
	d.Response.UID = req.UID
	g.metrics.observe(req, d, g.clock.Since(start))
	return d
}

func (g *Guard) review(ctx context.Context, req *admissionv1.AdmissionRequest) *Decision {
	if g.mode == Off || !Handles(req) {
		return allow()
	}
	if req.Operation == admissionv1.Delete {
		return g.bounded(ctx, req, g.reviewDelete)
	}
	return g.bounded(ctx, req, g.reviewUpdate)
}

func allow() *Decision {
	return &Decision{Response: &admissionv1.AdmissionResponse{Allowed: true}}
}

// progress is how far a review got, for the answer given when it runs
// out of time.
type progress struct {
	stage atomic.Value // string: what the review is doing
	read  atomic.Int64 // objects read
	total atomic.Int64 // objects the source expects, -1 unknown
}

func (p *progress) at(stage string) { p.stage.Store(stage) }

// reviewFunc reviews one request; it returns early, with what it found,
// when ctx ends.
type reviewFunc func(ctx context.Context, req *admissionv1.AdmissionRequest, p *progress) *Decision

// bounded runs f within the guard's time: f's context ends a little
// before, so that it answers with what it found; if it has not answered
// when the time is up (a stage that cannot stop, such as compiling a huge
// schema's rules), the review answers as incomplete and f finishes in the
// background, holding its slot until then so that such work cannot pile
// up.
func (g *Guard) bounded(ctx context.Context, req *admissionv1.AdmissionRequest, f reviewFunc) *Decision {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	p := &progress{}
	p.at("waiting for other CRD reviews")
	p.total.Store(-1)
	select {
	case g.slots <- struct{}{}:
	case <-ctx.Done():
		return g.unfinished(req, p, "busy")
	}
	margin := min(g.timeout/10, 500*time.Millisecond)
	work, stop := context.WithTimeout(ctx, g.timeout-margin)
	done := make(chan *Decision, 1)
	go func() {
		defer func() { <-g.slots }()
		defer stop()
		defer func() {
			if r := recover(); r != nil {
				g.log.Error("the CRD guard failed on a review; allowed", "name", req.Name, "operation", req.Operation, "panic", r)
				done <- g.conclude(req, nil, verdict{incomplete: fmt.Sprintf("check failed: %v", r)})
			}
		}()
		done <- f(work, req, p)
	}()
	select {
	case d := <-done:
		return d
	case <-ctx.Done():
		return g.unfinished(req, p, "timeout")
	}
}

// unfinished answers a review that got no answer in time.
func (g *Guard) unfinished(req *admissionv1.AdmissionRequest, p *progress, reason string) *Decision {
	stage, _ := p.stage.Load().(string)
	why := fmt.Sprintf("no answer within %s (%s", g.timeout, stage)
	if n := p.read.Load(); n > 0 {
		why += ", " + readOf(int(n), int(p.total.Load()))
	}
	why += ")"
	g.metrics.incomplete.WithLabelValues(reason).Inc()
	g.log.Warn("a CRD review ran out of time", "name", req.Name, "operation", req.Operation, "stage", stage, "read", p.read.Load())
	return g.conclude(req, nil, verdict{incomplete: why})
}

// readOf says how many objects were read, of how many.
func readOf(read, total int) string {
	if total > read {
		return number(read) + " of " + objectsOf(total, "") + " read"
	}
	return objectsOf(read, "") + " read"
}

// verdict is what a review found, before the mode decides.
type verdict struct {
	// lines are the warnings, each at most maxLine characters.
	lines []string
	// refused names what deny mode refuses, causes says it per field.
	refused []string
	causes  []metav1.StatusCause
	// summary opens a refusal's message.
	summary string
	// incomplete says why the check could not finish ("" when it did).
	incomplete string
	// objects is how many objects the change strands.
	objects int
}

// conclude turns a verdict into the mode's answer; annotated is the CRD
// whose AllowAnnotation counts (nil: none).
func (g *Guard) conclude(req *admissionv1.AdmissionRequest, annotated *apiextensionsv1.CustomResourceDefinition, v verdict) *Decision {
	warnings := capLines(v.lines, "breaking checks (fieldwatch crd-diff --cluster lists every one)")
	if v.incomplete != "" {
		head := prefix + "check incomplete: "
		if len(v.lines) > 0 {
			head = prefix + "check incomplete (counts are lower bounds): "
		}
		warnings = append(warnings, fit(head+v.incomplete, maxLine))
	}
	d := allow()
	d.Response.Warnings = warnings
	refuse := len(v.refused) > 0 || (v.incomplete != "" && g.denyIncomplete)
	if g.mode != Deny || !refuse {
		return d
	}
	refused := uniqueChecks(v.refused)
	if len(refused) == 0 {
		refused = []string{"incomplete"}
	}
	if reason := allowReason(annotated); reason != "" {
		d.Response.Warnings = append(d.Response.Warnings, fit(prefix+"allowed by "+AllowAnnotation+": "+reason, maxLine))
		d.Override = &Override{Overridden: true, Reason: reason, User: req.UserInfo.Username, Groups: req.UserInfo.Groups,
			Operation: string(req.Operation), RequestUID: string(req.UID), Checks: refused, Objects: v.objects}
		g.log.Info("a CRD change the guard refuses was let through by its annotation", "name", req.Name, "operation", req.Operation,
			"user", req.UserInfo.Username, "reason", reason, "checks", refused)
		return d
	}
	summary := v.summary
	if summary == "" {
		summary = "fieldwatch's CRD guard could not check this change"
	}
	var b strings.Builder
	b.WriteString(summary + " (set the annotation " + AllowAnnotation + ": \"<reason>\" on the CRD to go ahead anyway):")
	for _, w := range warnings {
		b.WriteString("\n  " + strings.TrimPrefix(w, prefix))
	}
	msg := b.String()
	d.Response.Allowed = false
	d.Response.Warnings = nil
	d.Response.Result = &metav1.Status{
		Status: metav1.StatusFailure, Code: 422, Reason: metav1.StatusReasonInvalid, Message: msg,
		Details: &metav1.StatusDetails{Name: req.Name, Group: CRDResource.Group, Kind: "CustomResourceDefinition", Causes: refusalCauses(v, warnings)},
	}
	return d
}

// refusalCauses are the causes of a refusal: kubectl prints an Invalid
// status by its kind, name and causes only, without its message, so they
// say it all. A check's cause names its field; a refusal without them (a
// deletion, an incomplete check) gets one per warning line, on the CRD's
// name; the last says how to go ahead anyway.
func refusalCauses(v verdict, warnings []string) []metav1.StatusCause {
	causes := slices.Clone(v.causes)
	if len(causes) == 0 {
		for _, w := range warnings {
			causes = append(causes, metav1.StatusCause{Type: metav1.CauseTypeForbidden, Field: "metadata.name", Message: strings.TrimPrefix(w, prefix)})
		}
	}
	return append(causes, metav1.StatusCause{Type: metav1.CauseTypeFieldValueRequired, Field: "metadata.annotations[" + AllowAnnotation + "]",
		Message: `set it to "<reason>" on the CRD to go ahead anyway (fieldwatch's CRD guard)`})
}

// uniqueChecks returns the check names of checks, each once, in the order
// they first appear.
func uniqueChecks(checks []string) []string {
	seen := make(map[string]bool, len(checks))
	out := make([]string, 0, len(checks))
	for _, c := range checks {
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out
}

// allowReason returns the reason AllowAnnotation gives on crd, "" when
// there is none.
func allowReason(crd *apiextensionsv1.CustomResourceDefinition) string {
	if crd == nil {
		return ""
	}
	return strings.TrimSpace(crd.Annotations[AllowAnnotation])
}
