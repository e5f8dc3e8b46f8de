package action

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/rules"
)

// handler is one kind of action: it tries to deliver a firing once.
type handler interface {
	attempt(ctx context.Context, it *item) error
}

// closer is a handler that holds connections: the instance closes it once
// its workers have stopped (after a reload retired it, or on Close).
type closer interface {
	close()
}

// asyncHandler is a handler that takes firings in queue order without
// waiting for each (a producer that batches and keeps order): its
// instance runs one worker that starts every firing, and retries a failed
// one with attempt.
type asyncHandler interface {
	handler
	// start begins delivering it; done is called exactly once with the
	// outcome, possibly on another goroutine, and must not block.
	start(ctx context.Context, it *item, done func(error))
}

// item is one firing queued to one action.
type item struct {
	f      rules.Firing
	tr     *tracker
	queued time.Time
	// weight is what it holds of its queue's byte budget, set by
	// enqueue.
	weight int64
}

// tracker calls a firing's done callback when its last action finishes.
type tracker struct {
	left atomic.Int32
	done func()
}

func (t *tracker) finish() {
	if t.left.Add(-1) == 0 && t.done != nil {
		t.done()
	}
}

// errRetired is returned by enqueue on an instance that Retain retired.
var errRetired = errors.New("action retired")

// instance is one action of one rule: its queue, its workers and its
// handler.
type instance struct {
	d       *Dispatcher
	rule    string
	index   int
	kind    string
	retry   rules.Retry
	workers int
	h       handler
	lw      *logWriter // set for the log action, which batches instead
	grp     *grouping  // set for the direct receivers, which group
	queue   chan *item
	bytes   *semaphore.Weighted // QueueBytes, less the payloads queued
	max     int64               // QueueBytes
	m       series
	log     *slog.Logger

	mu      sync.Mutex
	closed  bool       // no new sends; queue is closed once senders is 0
	senders int        // enqueue calls between their check of closed and their send
	idle    *sync.Cond // signalled when senders drops to 0
	wg      sync.WaitGroup
}

// actionKey identifies an action across rule reloads: the rule's name, the
// action's index and its whole spec (templates included).
func actionKey(rule string, i int, a rules.Action) string {
	spec, err := json.Marshal(a)
	if err != nil {
		// Specs are plain data; this does not happen. Fall back to a key
		// that is unique to this spec value.
		spec = fmt.Appendf(nil, "%#v", a)
	}
	key := rule + "\x00" + strconv.Itoa(i) + "\x00" + string(spec)
	if a.Webhook != nil && a.Webhook.Template != nil {
		key += "\x00" + a.Webhook.Template.Source()
	}
	if a.Event != nil && a.Event.Note != nil {
		key += "\x00" + a.Event.Note.Source()
	}
	if a.NATS != nil && a.NATS.Subject != nil {
		key += "\x00" + a.NATS.Subject.Source()
	}
	if a.Kafka != nil && a.Kafka.Topic != nil {
		key += "\x00" + a.Kafka.Topic.Source()
	}
	if a.PagerDuty != nil && a.PagerDuty.DedupKey != nil {
		key += "\x00" + a.PagerDuty.DedupKey.Source()
	}
	return key
}

// newInstance builds the instance of action i of rule; d.mu is held.
func (d *Dispatcher) newInstance(rule string, i int, a rules.Action) *instance {
	kind := a.Kind()
	in := &instance{
		d:     d,
		rule:  rule,
		index: i,
		kind:  kind,
		queue: make(chan *item, d.opts.QueueSize),
		bytes: semaphore.NewWeighted(d.opts.QueueBytes),
		max:   d.opts.QueueBytes,
		m:     d.metrics.series(rule, kind, i),
		log:   d.log.With("rule", rule, "action", kind, "index", i),
	}
	in.idle = sync.NewCond(&in.mu)
	switch {
	case a.Log != nil:
		in.retry = rules.Retry{}.WithDefaults()
		in.workers = 1
		in.lw = &logWriter{sink: d.sinks.get(a.Log.File)}
	case a.Webhook != nil:
		in.retry = a.Webhook.Retry.WithDefaults()
		in.workers = d.opts.WebhookWorkers
		in.h = newWebhook(a.Webhook, d.clients)
	case a.Exec != nil:
		in.retry = a.Exec.Retry.WithDefaults()
		in.workers = d.opts.ExecWorkers
		in.h = newExec(a.Exec, d.procs, d.opts.OutputLimit, in.log)
	case a.Event != nil:
		in.retry = a.Event.Retry.WithDefaults()
		in.workers = d.opts.EventWorkers
		in.h = newEvent(rule, i, a.Event, d.opts, d.limiter(rule))
	case a.Patch != nil:
		in.retry = a.Patch.Retry.WithDefaults()
		in.workers = d.opts.PatchWorkers
		in.h = newPatch(a.Patch, d.opts.Dynamic, d.opts.DryRun, in.log)
	case a.NATS != nil:
		in.retry = a.NATS.Retry.WithDefaults()
		in.workers = d.opts.NATSWorkers
		in.h = newNATS(a.NATS, in.log)
	case a.Kafka != nil:
		in.retry = a.Kafka.Retry.WithDefaults()
		in.workers = 1 // it starts records in queue order; the producer pipelines them
		in.h = newKafka(a.Kafka, d.opts.QueueSize, d.opts.QueueBytes, in.log)
	case a.Alertmanager != nil:
		in.retry = a.Alertmanager.Retry.WithDefaults()
		in.workers = d.opts.AlertmanagerWorkers
		in.h = newAlertmanager(a.Alertmanager, d.clients, d.opts)
	case a.Slack != nil:
		in.grouped(&a.Slack.Notify, newSlack(a.Slack, d.clients), rules.DefaultGroupWindow, time.Second)
	case a.Teams != nil:
		in.grouped(&a.Teams.Notify, newTeams(a.Teams, d.clients), rules.DefaultGroupWindow, time.Second)
	case a.PagerDuty != nil:
		in.grouped(&a.PagerDuty.Notify, newPagerDuty(a.PagerDuty, d.clients, d.opts.ClusterName), 0, 500*time.Millisecond)
	case a.Email != nil:
		in.grouped(&a.Email.Notify, newEmail(a.Email), rules.DefaultGroupWindow, 10*time.Second)
	default:
		in.retry = rules.Retry{Attempts: 1}.WithDefaults()
		in.workers = 1
		in.h = handlerFunc(func(context.Context, *item) error {
			return permanent(errors.New("empty action"))
		})
	}
	return in
}

// grouped makes in a direct receiver: one worker that groups firings into
// messages sent by nt (group.go), with the kind's default window and rate.
func (in *instance) grouped(n *rules.Notify, nt notifier, window, every time.Duration) {
	in.retry = n.Retry.WithDefaults()
	in.workers = 1
	in.grp = newGrouping(nt, n, window, every, in.d.opts)
}

// handlerFunc adapts a function to handler.
type handlerFunc func(ctx context.Context, it *item) error

func (f handlerFunc) attempt(ctx context.Context, it *item) error { return f(ctx, it) }

// enqueue queues it, blocking while the queue is full (in firings or in
// payload bytes) until ctx ends. it must be this action's own item: its
// weight is set here.
func (in *instance) enqueue(ctx context.Context, it *item) error {
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return errRetired
	}
	in.senders++
	in.mu.Unlock()
	defer func() {
		in.mu.Lock()
		if in.senders--; in.senders == 0 {
			in.idle.Broadcast()
		}
		in.mu.Unlock()
	}()
	// A firing larger than the whole budget takes all of it: it waits
	// for an empty queue, then holds the rest back until it is taken.
	it.weight = min(int64(len(it.f.Payload)), in.max)
	if !in.bytes.TryAcquire(it.weight) {
		if err := in.bytes.Acquire(ctx, it.weight); err != nil {
			return err
		}
	}
	// depth goes up before the send so that a worker never takes it
	// below zero.
	in.m.depth.Inc()
	select {
	case in.queue <- it:
		in.m.fired.Inc()
		return nil
	default:
	}
	select {
	case in.queue <- it:
		in.m.fired.Inc()
		return nil
	case <-ctx.Done():
		in.m.depth.Dec()
		in.bytes.Release(it.weight)
		return ctx.Err()
	}
}

// took accounts for it leaving the queue: a worker has taken it.
func (in *instance) took(it *item) {
	in.m.depth.Dec()
	in.bytes.Release(it.weight)
}

// closeInput refuses new firings at once, waits for the Delivers already
// sending (blocked on a full queue until the workers make room or their
// context ends), and closes the queue; the workers drain it and stop.
func (in *instance) closeInput() {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return // another caller is closing it
	}
	in.closed = true
	for in.senders > 0 {
		in.idle.Wait()
	}
	close(in.queue)
}

// work is one worker: it delivers queued firings until the queue is closed
// and drained. Once ctx ends (Close's grace period is over) every firing
// left is dead-lettered without an attempt.
func (in *instance) work(ctx context.Context) {
	if in.lw != nil {
		in.logLoop(ctx)
		return
	}
	if in.grp != nil {
		in.groupLoop(ctx)
		return
	}
	if bh, ok := in.h.(batchHandler); ok {
		in.batchLoop(ctx, bh)
		return
	}
	if ah, ok := in.h.(asyncHandler); ok {
		in.asyncLoop(ctx, ah)
		return
	}
	for it := range in.queue {
		in.took(it)
		in.process(ctx, it)
	}
}

// process delivers it, retrying within the action's budget, and
// dead-letters it when that fails.
func (in *instance) process(ctx context.Context, it *item) {
	in.deliverBatch(ctx, []*item{it}, func(ctx context.Context) error {
		return in.h.attempt(ctx, it)
	})
}

// deliverBatch delivers batch with try, which delivers all its items or
// none, retrying within the action's budget; when that fails every item
// is dead-lettered.
func (in *instance) deliverBatch(ctx context.Context, batch []*item, try func(context.Context) error) {
	in.retryBatch(ctx, batch, try, 0, nil)
}

// retryBatch goes on delivering batch after attempts tries, the last of
// which failed with err (none: attempts is 0), as deliverBatch does.
func (in *instance) retryBatch(ctx context.Context, batch []*item, try func(context.Context) error, attempts int, err error) {
	for {
		if attempts > 0 {
			in.m.failed.Inc()
			if ctx.Err() != nil || isPermanent(err) || attempts >= in.retry.Attempts {
				break
			}
			wait := backoff(in.retry, attempts, err)
			in.m.retried.Inc()
			if in.log.Enabled(ctx, slog.LevelDebug) {
				in.firingLog(batch[0]).Debug("delivery failed, retrying", "attempt", attempts, "wait", wait, "error", err, "firings", len(batch))
			}
			if !sleep(ctx, wait) {
				break
			}
		}
		if ctx.Err() != nil || attempts >= in.retry.Attempts {
			break
		}
		attempts++
		err = try(ctx)
		if err == nil {
			for _, it := range batch {
				in.delivered(it)
			}
			return
		}
	}
	for _, it := range batch {
		if ctx.Err() != nil {
			in.shutdown(it, attempts, err)
		} else {
			in.giveUp(it, attempts, err)
		}
	}
}

func (in *instance) delivered(it *item) {
	in.m.delivered.Inc()
	in.m.latency.Observe(time.Since(it.queued).Seconds())
	it.tr.finish()
}

// giveUp dead-letters it after its last attempt failed with err.
func (in *instance) giveUp(it *item, attempts int, err error) {
	in.firingLog(it).Error("delivery failed for good, dead-lettered", "attempts", attempts, "error", err)
	in.deadLetter(it, attempts, err.Error(), "")
}

// shutdown dead-letters it because Close's grace period ended; last is the
// error of its last attempt, if any. After Abort, or with
// Options.HandOver, it is handed over instead.
func (in *instance) shutdown(it *item, attempts int, last error) {
	if in.d.handingOver() {
		in.m.handedOver.Inc()
		return
	}
	lastMsg := ""
	if last != nil {
		lastMsg = last.Error()
	}
	in.deadLetter(it, attempts, ShutdownError, lastMsg)
}

func (in *instance) deadLetter(it *item, attempts int, msg, last string) {
	in.m.deadLettered.Inc()
	in.d.dead.write(DeadLetter{
		Time: time.Now().UTC(), Rule: in.rule, Action: in.kind, Index: in.index,
		Attempts: attempts, Error: msg, LastError: last, ID: it.f.ID, Payload: it.f.Payload,
	})
	it.tr.finish()
}

// firingLog returns in's logger with the firing's object.
func (in *instance) firingLog(it *item) *slog.Logger {
	return withFiring(in.log, it)
}

// withFiring adds the firing's object and id to log.
func withFiring(log *slog.Logger, it *item) *slog.Logger {
	o := it.f.Object
	return log.With("gvr", gvrString(o), "namespace", o.Namespace, "name", o.Name, "id", it.f.ID)
}

// gvrString formats the object's resource as kubectl does:
// resource.version.group.
func gvrString(o rules.ObjectRef) string {
	return change.Resource{Group: o.Group, Version: o.Version, Resource: o.Resource}.String()
}
