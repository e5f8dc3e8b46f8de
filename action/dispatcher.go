package action

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/fieldwatch/fieldwatch/rules"
)

// Options configure a Dispatcher. Zero values take the defaults below.
type Options struct {
	// Logger receives the dispatcher's logs, with the fixed keys rule,
	// action, gvr, namespace and name. Default slog.Default().
	Logger *slog.Logger
	// Registerer is where the metrics are registered; nil registers none.
	// Each series has the labels rule, action (the action's kind) and index
	// (its position in the rule): fieldwatch_action_fired_total,
	// _delivered_total, _failed_total (failed attempts), _retried_total,
	// _dead_lettered_total, _handed_over_total (left to the next leader by
	// Abort or HandOver), the gauge fieldwatch_action_queue_depth and the
	// histogram fieldwatch_action_delivery_seconds (Deliver to delivered).
	Registerer prometheus.Registerer
	// Stdout is the log action's output when it names no file. Default
	// os.Stdout.
	Stdout io.Writer
	// StateDir holds the dead-letter file, StateDir/dead-letter.jsonl.
	// With "" dead letters are logged at error level, payload included.
	StateDir string
	// Dynamic is the client of the patch action.
	Dynamic dynamic.Interface
	// Kube is the client of the event action (events.k8s.io/v1).
	Kube kubernetes.Interface
	// DryRun makes the patch action log the patch instead of sending it.
	DryRun bool
	// QueueSize bounds each action's queue. Default DefaultQueueSize.
	QueueSize int
	// QueueBytes bounds the payload bytes each action's queue holds: a
	// firing waits for room as it waits for a free slot, except that a
	// firing larger than QueueBytes is taken when the queue holds no
	// bytes. Default DefaultQueueBytes.
	QueueBytes int64
	// ReportingController and ReportingInstance fill the fields of the
	// same names of the event action's Events. Defaults
	// DefaultReportingController and the host name.
	ReportingController string
	ReportingInstance   string

	// WebhookWorkers, ExecWorkers, EventWorkers, PatchWorkers and
	// NATSWorkers are the workers of each action of that kind (a log
	// action has one, so that its lines keep their order; so has a kafka
	// action, whose producer pipelines the records in queue order).
	WebhookWorkers int
	ExecWorkers    int
	EventWorkers   int
	PatchWorkers   int
	NATSWorkers    int
	// MaxProcesses caps the exec action's child processes running at once,
	// all exec actions together. Default DefaultMaxProcesses.
	MaxProcesses int
	// OutputLimit is how many bytes of a child's stdout and of its stderr
	// are kept for the log. Default DefaultOutputLimit.
	OutputLimit int
	// HandOver is for a replica in a leader election: what Close's grace
	// period leaves undelivered, and what Deliver cannot queue, is handed
	// over to the next leader (as by Abort) instead of dead-lettered.
	HandOver bool
	// EventQPS and EventBurst rate-limit the Events of each rule (all its
	// event actions together). A rule over its rate waits, which fills
	// its queue and slows the watcher: Events are not dropped. Defaults
	// DefaultEventQPS and DefaultEventBurst.
	EventQPS   float64
	EventBurst int

	// ExternalURL is where users reach fieldwatch's history page (the
	// --external-url of fieldwatch run, without a trailing slash): the
	// messages of the notification actions link there. "" for no links.
	ExternalURL string
	// ClusterName names the cluster in notifications (the alertmanager
	// action's cluster label, the other messages' text); "" for none.
	ClusterName string
	// AlertmanagerWorkers is the number of workers of each alertmanager
	// action, each posting up to MaxAlertsPerPost alerts at once.
	// Default DefaultAlertmanagerWorkers.
	AlertmanagerWorkers int
	// GroupMaxWaiting and GroupMaxBytes bound the firings, and their
	// payload bytes, waiting in one notification action's groups.
	// Defaults DefaultGroupMaxWaiting and DefaultGroupMaxBytes.
	GroupMaxWaiting int
	GroupMaxBytes   int64
	// Clock is the time of grouping windows and rate limits (tests set a
	// fake one). Default the real clock.
	Clock clock.WithTicker
}

// Option defaults.
const (
	// DefaultQueueSize bounds each action's queue.
	DefaultQueueSize = 1024
	// DefaultQueueBytes bounds the payload bytes of each action's queue:
	// 1,024 firings that include 1.5 MB objects would otherwise hold 3 GB.
	DefaultQueueBytes = 16 << 20
	// DefaultWebhookWorkers is sized for a local receiver draining a
	// backlog (BenchmarkWebhook). A remote receiver with a high
	// round-trip time needs more.
	DefaultWebhookWorkers = 32
	// DefaultExecWorkers is the number of workers of each exec action.
	DefaultExecWorkers = 4
	// DefaultEventWorkers is the number of workers of each event action.
	DefaultEventWorkers = 2
	// DefaultPatchWorkers is the number of workers of each patch action.
	DefaultPatchWorkers = 4
	// DefaultNATSWorkers is the number of workers of each nats action:
	// each waits for the stream's acknowledgement of its publish.
	DefaultNATSWorkers = 32
	// DefaultAlertmanagerWorkers is the number of workers of each
	// alertmanager action: each posts a batch of alerts to every URL.
	DefaultAlertmanagerWorkers = 4
	// DefaultMaxProcesses caps the exec children running at once.
	DefaultMaxProcesses = 16
	// DefaultOutputLimit is the bytes of a child's stdout (and of its
	// stderr) kept for the log.
	DefaultOutputLimit = 4096
	// DefaultEventQPS is the sustained Event rate of one rule.
	DefaultEventQPS = 10
	// DefaultEventBurst is the Event burst of one rule.
	DefaultEventBurst = 50
	// DefaultReportingController is the Events' reportingController.
	DefaultReportingController = "fieldwatch"
)

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	set := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	set(&o.QueueSize, DefaultQueueSize)
	if o.QueueBytes <= 0 {
		o.QueueBytes = DefaultQueueBytes
	}
	set(&o.WebhookWorkers, DefaultWebhookWorkers)
	set(&o.ExecWorkers, DefaultExecWorkers)
	set(&o.EventWorkers, DefaultEventWorkers)
	set(&o.PatchWorkers, DefaultPatchWorkers)
	set(&o.NATSWorkers, DefaultNATSWorkers)
	set(&o.MaxProcesses, DefaultMaxProcesses)
	set(&o.OutputLimit, DefaultOutputLimit)
	set(&o.EventBurst, DefaultEventBurst)
	set(&o.AlertmanagerWorkers, DefaultAlertmanagerWorkers)
	set(&o.GroupMaxWaiting, DefaultGroupMaxWaiting)
	if o.GroupMaxBytes <= 0 {
		o.GroupMaxBytes = DefaultGroupMaxBytes
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	o.ExternalURL = strings.TrimRight(o.ExternalURL, "/")
	if o.EventQPS <= 0 {
		o.EventQPS = DefaultEventQPS
	}
	if o.ReportingController == "" {
		o.ReportingController = DefaultReportingController
	}
	if o.ReportingInstance == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "fieldwatch"
		}
		o.ReportingInstance = host
	}
	return o
}

// ErrClosed is returned by Deliver once Close has been called.
var ErrClosed = errors.New("action: dispatcher closed")

// Dispatcher runs the actions of rule firings. Its methods are safe for
// concurrent use.
//
// Every action of every rule, identified by the rule's name, the action's
// index and its spec, has its own bounded queue and its own workers, so
// that one slow receiver slows neither the other actions nor the watcher,
// until its queue is full: then Deliver blocks (backpressure) instead of
// dropping the firing. Failed deliveries are retried with exponential
// backoff and jitter, honouring Retry-After; a firing that fails for good,
// or that is still undelivered when Close's grace period ends, is written
// to the dead-letter file (DeadLetterFile in Options.StateDir). Order is
// kept by the log action (one writer) and the kafka action (one worker
// hands records to the producer in queue order; a record the producer gives
// up on is retried later, out of order); the other actions run several
// workers each.
//
// The nats action publishes to JetStream with the payload's id as the
// Nats-Msg-Id (the stream's duplicate window drops repeats); the kafka
// action produces through an idempotent franz-go producer with acks=all,
// keyed by the object's uid (the id in the KafkaIDHeader header). Each
// holds one connection, opened on first use, reconnecting on its own,
// closed when its workers stop (Retain or Close). The webhook, nats and
// kafka actions can send CloudEvents 1.0, structured or binary
// (cloudevents.go writes the spec out; the tests decode it with the
// CloudEvents SDK).
type Dispatcher struct {
	opts    Options
	log     *slog.Logger
	metrics *metrics
	dead    *deadLetters
	sinks   *sinks
	clients *httpClients
	procs   chan struct{} // one token per running exec child

	stopped  chan struct{} // closed when the grace period of Close ends
	stopOnce sync.Once
	aborted  atomic.Bool    // Abort: undelivered firings are handed over
	workers  sync.WaitGroup // every worker of every instance

	mu       sync.RWMutex
	closed   bool
	byRule   map[*rules.Rule][]*instance // cache of the resolution below
	byKey    map[string]*instance        // current instances by actionKey
	live     map[*instance]struct{}      // instances whose workers run, retired ones included
	limiters map[string]*rate.Limiter    // event rate limit by rule name
}

// New returns a Dispatcher. It registers the metrics on
// opts.Registerer.
func New(opts Options) (*Dispatcher, error) {
	opts = opts.withDefaults()
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	return &Dispatcher{
		opts:     opts,
		log:      opts.Logger,
		metrics:  m,
		dead:     newDeadLetters(opts.StateDir, opts.Logger),
		sinks:    newSinks(opts.Stdout),
		clients:  newHTTPClients(opts.WebhookWorkers),
		procs:    make(chan struct{}, opts.MaxProcesses),
		stopped:  make(chan struct{}),
		byRule:   map[*rules.Rule][]*instance{},
		byKey:    map[string]*instance{},
		live:     map[*instance]struct{}{},
		limiters: map[string]*rate.Limiter{},
	}, nil
}

// Deliver hands f to every action of f.Rule. It blocks while an action's
// queue is full (backpressure) and returns ctx.Err() if ctx ends first, or
// ErrClosed after Close.
//
// The actions listed in f.Skipped (their when is false for f) do not get
// it.
//
// done, which may be nil, is called exactly once, when every action of f
// has finished with it: delivered, or failed for good and dead-lettered.
// When Deliver returns an error, the actions that f could not be queued to
// are dead-lettered at once with that error (ShutdownError after Close), so
// done is still called: nothing is dropped (after Abort they are handed
// over instead, and done is not called). done may run on Deliver's
// goroutine or on a worker's; it must not block for long.
//
// Only a firing without a rule is refused outright (an error, done not
// called).
func (d *Dispatcher) Deliver(ctx context.Context, f rules.Firing, done func()) error {
	if f.Rule == nil {
		return errors.New("deliver: firing without a rule")
	}
	n := len(f.Rule.Actions) - len(f.Skipped) // Skipped: distinct indices, in order
	if n <= 0 {
		if done != nil {
			done()
		}
		return nil
	}
	tr := &tracker{done: done}
	tr.left.Store(int32(n))
	queued := time.Now()
	for i := range f.Rule.Actions {
		if skipped(f, i) {
			continue
		}
		if err := d.enqueue(ctx, &item{f: f, tr: tr, queued: queued}, i); err != nil {
			for j := i; j < len(f.Rule.Actions); j++ {
				if !skipped(f, j) {
					d.notQueued(f, j, err, tr)
				}
			}
			return err
		}
	}
	return nil
}

// skipped reports whether action i of f.Rule does not get f (its when is
// false for f).
func skipped(f rules.Firing, i int) bool {
	return len(f.Skipped) > 0 && slices.Contains(f.Skipped, i)
}

func (d *Dispatcher) enqueue(ctx context.Context, it *item, i int) error {
	for {
		in, err := d.instance(it.f.Rule, i)
		if err != nil {
			return err
		}
		err = in.enqueue(ctx, it)
		if !errors.Is(err, errRetired) {
			return err
		}
		// Retain retired the instance between the lookup and the send:
		// resolve the rule again.
		d.forget(it.f.Rule)
	}
}

// notQueued dead-letters action i of f, which Deliver could not queue.
func (d *Dispatcher) notQueued(f rules.Firing, i int, cause error, tr *tracker) {
	a := f.Rule.Actions[i]
	s := d.metrics.series(f.Rule.Name, a.Kind(), i)
	if d.handingOver() {
		s.handedOver.Inc()
		return
	}
	s.fired.Inc()
	s.deadLettered.Inc()
	msg := ShutdownError
	if !errors.Is(cause, ErrClosed) {
		msg = "not queued: " + cause.Error()
	}
	d.dead.write(DeadLetter{
		Time: time.Now().UTC(), Rule: f.Rule.Name, Action: a.Kind(), Index: i,
		Error: msg, ID: f.ID, Payload: f.Payload,
	})
	tr.finish()
}

// instance returns the instance running action i of rule r.
func (d *Dispatcher) instance(r *rules.Rule, i int) (*instance, error) {
	d.mu.RLock()
	closed := d.closed
	ins, ok := d.byRule[r]
	d.mu.RUnlock()
	if closed {
		return nil, ErrClosed
	}
	if ok {
		return ins[i], nil
	}
	ins, err := d.resolve(r)
	if err != nil {
		return nil, err
	}
	return ins[i], nil
}

// resolve finds or starts the instances of r's actions: an action whose
// key is unchanged since an earlier version of the rule keeps its queue.
func (d *Dispatcher) resolve(r *rules.Rule) ([]*instance, error) {
	keys := make([]string, len(r.Actions))
	for i, a := range r.Actions {
		keys[i] = actionKey(r.Name, i, a)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	if ins, ok := d.byRule[r]; ok {
		return ins, nil
	}
	ins := make([]*instance, len(r.Actions))
	for i, a := range r.Actions {
		in, ok := d.byKey[keys[i]]
		if !ok {
			in = d.newInstance(r.Name, i, a)
			d.byKey[keys[i]] = in
			d.start(in)
		}
		ins[i] = in
	}
	d.byRule[r] = ins
	return ins, nil
}

func (d *Dispatcher) forget(r *rules.Rule) {
	d.mu.Lock()
	delete(d.byRule, r)
	d.mu.Unlock()
}

// start runs in's workers. Called with d.mu held and d not closed, so that
// Close, which sets closed under d.mu, waits for them.
func (d *Dispatcher) start(in *instance) {
	d.live[in] = struct{}{}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-d.stopped:
		case <-ctx.Done():
		}
		cancel()
	}()
	in.wg.Add(in.workers)
	d.workers.Add(in.workers)
	for range in.workers {
		go func() {
			defer d.workers.Done()
			defer in.wg.Done()
			in.work(ctx)
		}()
	}
	go func() {
		in.wg.Wait()
		cancel()
		if c, ok := in.h.(closer); ok {
			c.close()
		}
		d.mu.Lock()
		delete(d.live, in)
		d.mu.Unlock()
	}()
}

// limiter returns the event rate limiter of rule; d.mu must be held.
func (d *Dispatcher) limiter(rule string) *rate.Limiter {
	l, ok := d.limiters[rule]
	if !ok {
		l = rate.NewLimiter(rate.Limit(d.opts.EventQPS), d.opts.EventBurst)
		d.limiters[rule] = l
	}
	return l
}

// Retain keeps the actions of rs and retires every other one: a retired
// action takes no new firings, delivers those it holds (retrying within
// its budget) and then stops. Call it after a rules reload with the new
// rules; an action whose rule name, index and spec are unchanged keeps its
// queue and workers. Retain does not wait for retired actions to drain;
// Close does.
func (d *Dispatcher) Retain(rs []*rules.Rule) {
	keep := map[string]bool{}
	ptrs := map[*rules.Rule]bool{}
	names := map[string]bool{}
	for _, r := range rs {
		ptrs[r] = true
		names[r.Name] = true
		for i, a := range r.Actions {
			keep[actionKey(r.Name, i, a)] = true
		}
	}
	var retired []*instance
	d.mu.Lock()
	for r := range d.byRule {
		if !ptrs[r] {
			delete(d.byRule, r)
		}
	}
	for k, in := range d.byKey {
		if !keep[k] {
			delete(d.byKey, k)
			retired = append(retired, in)
		}
	}
	for name := range d.limiters {
		if !names[name] {
			delete(d.limiters, name)
		}
	}
	d.mu.Unlock()
	for _, in := range retired {
		// closeInput waits for Delivers blocked on a full queue.
		go in.closeInput()
	}
}

// Close stops taking firings (Deliver returns ErrClosed), lets every
// action drain its queue until ctx ends, then dead-letters what is still
// undelivered with the error ShutdownError (hands it over with
// Options.HandOver), cancelling attempts in flight.
// It returns when every worker has stopped, with an error when ctx ended
// before the queues were drained. Nothing is silently dropped. A second
// Close returns ErrClosed at once.
func (d *Dispatcher) Close(ctx context.Context) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return ErrClosed
	}
	d.closed = true
	live := slices.Collect(maps.Keys(d.live))
	clear(d.byRule)
	clear(d.byKey)
	d.mu.Unlock()

	stopAfter := context.AfterFunc(ctx, d.stop)
	for _, in := range live {
		in.closeInput()
	}
	d.workers.Wait()
	drained := stopAfter()
	d.stop()

	var errs []error
	switch {
	case drained:
	case d.handingOver():
		errs = append(errs, fmt.Errorf("close: undelivered firings handed over: %w", ctx.Err()))
	default:
		errs = append(errs, fmt.Errorf("close: undelivered firings dead-lettered: %w", ctx.Err()))
	}
	errs = append(errs, d.sinks.close(), d.dead.close())
	d.clients.closeIdle()
	return errors.Join(errs...)
}

// Abort stops at once, for a replica that stopped leading: Deliver returns
// ErrClosed, attempts in flight are cancelled, and every firing not
// delivered yet is handed over: neither dead-lettered nor reported done
// (its done callback is never called), so that the change behind it stays
// unhandled for the next leader. It returns when every worker has
// stopped. Abort may follow or interrupt Close.
func (d *Dispatcher) Abort() {
	d.aborted.Store(true)
	d.stop()
	if err := d.Close(context.Background()); errors.Is(err, ErrClosed) {
		d.workers.Wait() // Close was called before: wait for its workers
	}
}

// handingOver reports whether undelivered firings are handed over rather
// than dead-lettered.
func (d *Dispatcher) handingOver() bool { return d.opts.HandOver || d.aborted.Load() }

func (d *Dispatcher) stop() {
	d.stopOnce.Do(func() { close(d.stopped) })
}

// Reopen closes and reopens the log actions' files, so that a rotated log
// is written anew (call it on SIGHUP).
func (d *Dispatcher) Reopen() error {
	return d.sinks.reopen()
}
