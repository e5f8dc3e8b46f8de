package history

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// Recorder defaults.
const (
	// DefaultQueueEntries and DefaultQueueBytes bound the payloads
	// waiting to be written: beyond, payloads are dropped from the
	// history (counted), never from delivery.
	DefaultQueueEntries = 20000
	DefaultQueueBytes   = 32 << 20
	// DefaultFlushInterval is how long a payload waits for others to be
	// written with it in one transaction, at most: a transaction costs
	// more than an entry (its pages of the indexes and the table go to
	// the log, then to the file, once however many entries changed
	// them).
	DefaultFlushInterval = time.Second
	// DefaultCheckpointEvery and DefaultCheckpointInterval are how often
	// a signed checkpoint seals the trail: after so many links, or so
	// long after the first link it does not seal yet.
	DefaultCheckpointEvery    = 1000
	DefaultCheckpointInterval = time.Minute
	// trimInterval is how often the bounds are applied, with writes or
	// without; between, at most trimSlack of the size bound is written
	// (and, written faster, the bound is applied sooner). Applying them
	// when nothing is to be removed costs a few hundred microseconds
	// (BenchmarkTrimIdle): once a second, at a few hundred entries a
	// second, that was about a twentieth of the writer's CPU.
	trimInterval = 10 * time.Second
	// maxAttempts is how often a batch is tried before its entries
	// count as failed.
	maxAttempts = 8
	// gapRetry is how long after a gap record failed the writer tries
	// it again.
	gapRetry = time.Second
	// lastWords bounds what a Recorder stopped past its Close deadline
	// takes to write its gap record and checkpoint.
	lastWords = time.Second
	// trimSlack is the part of the size bound written between two trims
	// at most (counted at twice the payloads' bytes, what an entry takes
	// with its indexes, generously): a trim leaves the store at 90% of
	// the bound, so it holds whatever the rate.
	trimSlack = 32
)

// RecorderOptions configure a Recorder.
type RecorderOptions struct {
	// Store is where entries go. Required.
	Store Store
	// MaxAge and MaxBytes bound the store (zero: no bound).
	MaxAge   time.Duration
	MaxBytes int64
	// QueueEntries and QueueBytes bound the payloads waiting (defaults
	// DefaultQueueEntries and DefaultQueueBytes).
	QueueEntries int
	QueueBytes   int64
	// FlushInterval is how long a payload may wait for a batch (default
	// DefaultFlushInterval).
	FlushInterval time.Duration
	Logger        *slog.Logger
	// Metrics are where it counts (the store's, NewMetrics); nil makes
	// new ones, registered on Registerer.
	Metrics    *Metrics
	Registerer prometheus.Registerer
	// Signer, when set and the store keeps a trail, signs a checkpoint
	// after CheckpointEvery links (default DefaultCheckpointEvery),
	// CheckpointInterval after the first link not yet sealed (default
	// DefaultCheckpointInterval), and when the Recorder is closed.
	Signer             *Signer
	CheckpointEvery    int
	CheckpointInterval time.Duration

	// retryBase is the first wait before a failed write is tried again
	// (default 100 ms); tests shorten it.
	retryBase time.Duration
}

// Recorder writes payloads to a Store off the delivery path: Record
// never blocks; one goroutine writes what is queued in batches, applies
// the bounds, and retries a failing store with backoff. Create it with
// NewRecorder and end it with Close.
type Recorder struct {
	opts  RecorderOptions
	log   *slog.Logger
	m     *Metrics
	batch int // BatchEntries

	trail Trail // the store's, nil when it keeps none

	mu      sync.Mutex
	queue   []queued // in the order of their at
	bytes   int64
	closing bool
	// writing is when the oldest payload of the batch being written was
	// queued (zero: none is).
	writing time.Time
	gap     gap // payloads not kept since the last gap record
	wake    chan struct{}
	done    chan struct{}
	stop    context.CancelFunc

	dropLog, errLog rate.Sometimes

	// The writer's: the links written since the last checkpoint, the
	// first of them at unsealed; when a gap record last failed.
	unsealedLinks int64
	unsealed      time.Time
	gapFailed     time.Time
}

// queued is a payload waiting to be written.
type queued struct {
	payload []byte
	source  Source
	at      time.Time
	// entry, when set, is the payload's entry (RecordEntry): it is not
	// parsed.
	entry *Entry
	// state, when set, is a state to keep (RecordState); payload is
	// nil.
	state *State
}

// NewRecorder starts a Recorder.
func NewRecorder(opts RecorderOptions) *Recorder {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.QueueEntries <= 0 {
		opts.QueueEntries = DefaultQueueEntries
	}
	if opts.QueueBytes <= 0 {
		opts.QueueBytes = DefaultQueueBytes
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = DefaultFlushInterval
	}
	if opts.CheckpointEvery <= 0 {
		opts.CheckpointEvery = DefaultCheckpointEvery
	}
	if opts.CheckpointInterval <= 0 {
		opts.CheckpointInterval = DefaultCheckpointInterval
	}
	if opts.retryBase <= 0 {
		opts.retryBase = 100 * time.Millisecond
	}
	trail, _ := opts.Store.(Trail)
	if trail == nil {
		opts.Signer = nil
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(opts.Registerer)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Recorder{
		opts: opts, log: opts.Logger, m: opts.Metrics, batch: BatchEntries(opts.MaxBytes), trail: trail,
		wake: make(chan struct{}, 1), done: make(chan struct{}), stop: cancel,
		dropLog: rate.Sometimes{Interval: 10 * time.Second},
		errLog:  rate.Sometimes{Interval: 10 * time.Second},
	}
	r.refreshStats(ctx)
	go r.run(ctx)
	return r
}

// Record queues a payload for the history and returns at once: when the
// queue is full (the store is slow or failing), the payload is dropped
// from the history and counted. The payload must not change afterwards.
func (r *Recorder) Record(payload []byte, source Source) {
	r.record(queued{payload: payload, source: source})
}

// RecordEntry is Record for a payload whose entry's fields are known (the
// firing's): they must be what ParsePayload(e.Payload, e.Source) returns,
// which the history then need not read back (about a sixth of what an
// entry costs its writer).
func (r *Recorder) RecordEntry(e Entry) {
	r.record(queued{payload: e.Payload, source: e.Source, entry: &e})
}

// RecordState queues a state of an object (history: {states: true}) as
// Record queues a payload, in the same queue: states are written in the
// order they are recorded, which must be each object's order of changes.
// With a store that keeps no states (StateStore), it is left out.
func (r *Recorder) RecordState(s State) {
	if err := checkState(&s); err != nil {
		r.m.invalid.Inc()
		r.errLog.Do(func() { r.log.Error("history: not a state; left out", "error", err) })
		return
	}
	r.record(queued{state: &s, source: s.Source})
}

func (r *Recorder) record(q queued) {
	size := q.size()
	r.mu.Lock()
	q.at = time.Now() // under the lock: the queue is in the order of at
	if r.closing || len(r.queue) >= r.opts.QueueEntries || r.bytes+size > r.opts.QueueBytes {
		reason := gapQueueFull
		if r.closing {
			reason = gapStopped
		}
		r.gap.addQueued(reason, []queued{q})
		r.mu.Unlock()
		select {
		case r.wake <- struct{}{}: // the writer writes the gap record
		default:
		}
		r.m.dropped.Inc()
		r.dropLog.Do(func() {
			r.log.Warn("history: queue full, an entry is dropped from the history (deliveries are not affected); see fieldwatch_history_entries_total{result=\"dropped\"}",
				"queued", r.opts.QueueEntries)
		})
		return
	}
	r.queue = append(r.queue, q)
	r.bytes += size
	n := len(r.queue)
	r.mu.Unlock()
	r.m.queued.Set(float64(n))
	if n == 1 || n%r.batch == 0 {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// size is what q counts for the queue's and a batch's bound.
func (q *queued) size() int64 {
	if q.state != nil {
		return int64(len(q.state.Ops) + len(q.state.Full))
	}
	return int64(len(q.payload))
}

// Drop counts a payload left out of the history by its caller (a
// standby too far behind the leader to evaluate a change), in the
// trail's next gap record too.
func (r *Recorder) Drop() {
	r.m.dropped.Inc()
	r.noteGap(func(g *gap) { g.add(gapBehind, 1, time.Now(), "") })
}

// Close stops taking payloads and writes what is queued, until ctx
// ends; what is left then is dropped and counted.
func (r *Recorder) Close(ctx context.Context) {
	r.mu.Lock()
	r.closing = true
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	stop := context.AfterFunc(ctx, r.stop)
	defer stop()
	<-r.done
}

// take removes up to BatchEntries payloads, and BatchBytes of them,
// from the queue.
func (r *Recorder) take() (batch []queued) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, size, limit, most := 0, int64(0), BatchBytes(r.opts.MaxBytes), BatchEntries(r.opts.MaxBytes)
	for n < len(r.queue) && n < most && (n == 0 || size+r.queue[n].size() <= limit) {
		size += r.queue[n].size()
		n++
	}
	batch = append(batch, r.queue[:n]...)
	if n > 0 {
		r.writing = batch[0].at
	}
	clear(r.queue[:n])
	r.queue = r.queue[n:]
	for i := range batch {
		r.bytes -= batch[i].size()
	}
	if len(r.queue) == 0 {
		r.queue = nil // let the backing array go
	}
	r.m.queued.Set(float64(len(r.queue)))
	return batch
}

// OldestUnwritten returns when the oldest payload or state that is
// queued or being written was recorded (zero: none is): everything
// recorded before it was written to the store (or counted in a gap
// record) by now. The trail's Verifier takes it as the bound of what a
// verification covers.
func (r *Recorder) OldestUnwritten() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	oldest := r.writing
	if len(r.queue) > 0 && (oldest.IsZero() || r.queue[0].at.Before(oldest)) {
		oldest = r.queue[0].at
	}
	return oldest
}

// pending returns how many payloads wait and when the oldest came.
func (r *Recorder) pending() (int, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.queue) == 0 {
		return 0, time.Time{}
	}
	return len(r.queue), r.queue[0].at
}

func (r *Recorder) run(ctx context.Context) {
	defer close(r.done)
	// The writer keeps an OS thread to itself, so that the thread's CPU
	// time is the history's (fieldwatch_history_cpu_seconds_total): the
	// process's CPU moves too much with everything else to tell.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu, measured := threadCPU()
	account := func() {
		if now, ok := threadCPU(); ok && measured {
			r.m.cpu.Add((now - cpu).Seconds())
			cpu = now
		}
	}
	defer account()
	var lastTrim time.Time
	var sinceTrim int64                  // bytes written since lastTrim
	slack := r.opts.MaxBytes / trimSlack // what sinceTrim may reach before a trim is due
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		account() // what the last round wrote or trimmed
		n, oldest := r.pending()
		// A gap record goes before the entries that come after it: before
		// a batch, and otherwise once gapRetry passed since it failed.
		if r.gapPending() && (n > 0 || time.Since(r.gapFailed) >= gapRetry) {
			r.writeGap(ctx)
		}
		r.mu.Lock()
		closing := r.closing
		r.mu.Unlock()
		switch {
		case n >= r.batch || (n > 0 && (closing || time.Since(oldest) >= r.opts.FlushInterval)):
			batch := r.take()
			ok := r.write(ctx, batch)
			r.mu.Lock()
			r.writing = time.Time{}
			r.mu.Unlock()
			if !ok {
				r.dropRest()
				return
			}
			for i := range batch {
				sinceTrim += 2 * batch[i].size()
			}
			// Once a second, and sooner at a rate that could pass the
			// size bound before then.
			if time.Since(lastTrim) >= trimInterval || (r.opts.MaxBytes > 0 && sinceTrim >= slack) {
				slack = r.trim(ctx)
				lastTrim, sinceTrim = time.Now(), 0
			}
			if r.unsealedLinks >= int64(r.opts.CheckpointEvery) {
				r.checkpoint(ctx)
			}
			continue
		case closing:
			r.trim(ctx)
			r.writeGap(ctx)
			r.checkpoint(ctx) // a graceful stop seals the chain's tail
			return
		}
		wait := time.Hour
		if n > 0 {
			wait = r.opts.FlushInterval - time.Since(oldest)
		}
		if !lastTrim.IsZero() && time.Since(lastTrim) < trimInterval {
			wait = min(wait, trimInterval-time.Since(lastTrim)+time.Millisecond)
		}
		if r.unsealedLinks > 0 && r.opts.Signer != nil {
			wait = min(wait, r.opts.CheckpointInterval-time.Since(r.unsealed))
		}
		if r.trail != nil && r.gapPending() {
			wait = min(wait, gapRetry-time.Since(r.gapFailed))
		}
		timer.Reset(max(wait, time.Millisecond))
		select {
		case <-r.wake:
		case <-timer.C:
			if time.Since(lastTrim) >= trimInterval && (n == 0 || sinceTrim > 0) {
				// The age bound applies without writes too, and what
				// the last batches wrote is trimmed for.
				slack = r.trim(ctx)
				lastTrim, sinceTrim = time.Now(), 0
			}
			if r.unsealedLinks > 0 && time.Since(r.unsealed) >= r.opts.CheckpointInterval {
				r.checkpoint(ctx)
			}
		case <-ctx.Done():
			r.dropRest()
			return
		}
	}
}

// write writes a batch, retrying with backoff while the store fails; it
// returns false when ctx ended first.
func (r *Recorder) write(ctx context.Context, batch []queued) bool {
	entries := make([]Entry, 0, len(batch))
	var states []State
	for _, q := range batch {
		var e Entry
		if q.state != nil {
			states = append(states, *q.state)
			continue
		}
		if q.entry != nil {
			e = *q.entry
		} else {
			var err error
			if e, err = ParsePayload(q.payload, q.source); err != nil {
				r.m.invalid.Inc()
				r.noteGap(func(g *gap) { g.add(gapInvalid, 1, q.at, "") })
				r.errLog.Do(func() { r.log.Error("history: not a payload; left out", "error", err) })
				continue
			}
		}
		e.Recorded = q.at.UTC()
		entries = append(entries, e)
	}
	lost := func(reason string) { r.noteGap(func(g *gap) { g.addEntries(reason, entries) }) }
	if len(entries) > 0 && !r.retry(ctx, len(entries), lost, func() error {
		start := time.Now()
		n, err := r.opts.Store.Write(ctx, entries)
		if err == nil {
			r.m.writeTime.Observe(time.Since(start).Seconds())
			r.m.written.Add(float64(n))
			r.m.duplicate.Add(float64(len(entries) - n))
			r.linked(int64(n))
		}
		return err
	}) {
		return false
	}
	ss, ok := r.opts.Store.(StateStore)
	if len(states) == 0 || !ok {
		return true
	}
	// States are no entries of the trail: losing them leaves no gap
	// record.
	return r.retry(ctx, len(states), func(string) {}, func() error {
		_, err := ss.WriteStates(ctx, states)
		return err
	})
}

// retry runs write, of n entries or states, with backoff while the store
// fails; lost notes those that are not kept, with why. It returns false
// when ctx ended first.
func (r *Recorder) retry(ctx context.Context, n int, lost func(reason string), write func() error) bool {
	backoff := r.opts.retryBase
	// attempt counts the tries that reached the store: one that could
	// not reach it (ErrUnavailable) is tried again until it can, or
	// until ctx ends, while the queue's bounds hold what waits.
	for attempt := 1; ; attempt++ {
		err := write()
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			r.m.dropped.Add(float64(n))
			lost(gapStopped)
			return false
		}
		kind := "other"
		switch {
		case errors.Is(err, ErrFull):
			kind = "full" // counted by the store
		case errors.Is(err, ErrReset):
			kind = "corrupt" // counted by the store
		case errors.Is(err, ErrUnavailable):
			kind = "unavailable"
			r.m.errUnavailable.Inc()
			attempt--
		default:
			r.m.errOther.Inc()
		}
		if attempt >= maxAttempts {
			r.m.failed.Add(float64(n))
			lost(gapStoreFailed)
			r.log.Error("history: entries not recorded after retries (deliveries are not affected)", "entries", n, "kind", kind, "error", err)
			return true
		}
		if errors.Is(err, ErrReset) {
			continue // a new file: write there at once
		}
		r.errLog.Do(func() {
			r.log.Error("history: write failed; retrying, payloads queue meanwhile (deliveries are not affected)", "kind", kind, "entries", n, "attempt", attempt, "error", err)
		})
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			r.m.dropped.Add(float64(n))
			lost(gapStopped)
			return false
		}
		backoff = min(backoff*2, 10*time.Second)
		if kind == "full" {
			r.trim(ctx) // the bounds may make room
		}
	}
}

// dropRest counts what is still queued as dropped (Close's deadline),
// and tries for a moment more to leave the trail a gap record saying so
// and a checkpoint.
func (r *Recorder) dropRest() {
	r.mu.Lock()
	n := len(r.queue)
	r.gap.addQueued(gapStopped, r.queue)
	r.queue, r.bytes = nil, 0
	r.mu.Unlock()
	if n > 0 {
		r.m.dropped.Add(float64(n))
		r.log.Warn("history: stopped before writing every entry; the rest are dropped", "entries", n)
	}
	r.m.queued.Set(0)
	ctx, cancel := context.WithTimeout(context.Background(), lastWords)
	defer cancel()
	r.writeGap(ctx)
	r.checkpoint(ctx)
	if r.gapPending() {
		r.log.Error("history trail: stopped with payloads not kept and no gap record saying so: the trail does not show them")
	}
}

// trim applies the bounds. It returns how many bytes (counted as
// sinceTrim counts them) may be written before the size bound calls for
// the next trim: a 32nd of the bound, less when the store has less room
// under it (the disk, not the bound, limits the size).
func (r *Recorder) trim(ctx context.Context) int64 {
	var before time.Time
	if r.opts.MaxAge > 0 {
		before = time.Now().Add(-r.opts.MaxAge)
	}
	slack := r.opts.MaxBytes / trimSlack
	if !before.IsZero() || r.opts.MaxBytes > 0 {
		t, err := r.opts.Store.Trim(ctx, before, r.opts.MaxBytes)
		r.m.removedAge.Add(float64(t.Age))
		r.m.removedSize.Add(float64(t.Size))
		if t.Age+t.Size > 0 {
			r.linked(1) // the trim's record
		}
		if err != nil && ctx.Err() == nil {
			r.errLog.Do(func() { r.log.Error("history: removing old entries failed", "error", err) })
		}
		slack = min(slack, t.Room)
	}
	r.refreshStats(ctx)
	return slack
}

func (r *Recorder) refreshStats(ctx context.Context) {
	if st, err := r.opts.Store.Stats(ctx); err == nil {
		r.m.stored.Set(float64(st.Entries))
		r.m.bytes.Set(float64(st.Bytes))
	}
}

// linked counts n links appended to the trail since the last
// checkpoint.
func (r *Recorder) linked(n int64) {
	if n <= 0 {
		return
	}
	if r.unsealedLinks == 0 {
		r.unsealed = time.Now()
	}
	r.unsealedLinks += n
}

// checkpoint appends a signed checkpoint when links were appended since
// the last one; when it fails, the next write or tick tries again.
func (r *Recorder) checkpoint(ctx context.Context) {
	if r.opts.Signer == nil || r.unsealedLinks == 0 {
		return
	}
	if err := r.opts.Store.(Trail).Append(ctx, []Record{r.opts.Signer.record()}); err != nil {
		r.m.trail.WithLabelValues(string(LinkCheckpoint), "failed").Inc()
		if ctx.Err() == nil {
			r.errLog.Do(func() { r.log.Error("history trail: checkpoint not written; tried again later", "error", err) })
		}
		r.unsealed = time.Now() // not again at once
		return
	}
	r.m.trail.WithLabelValues(string(LinkCheckpoint), "written").Inc()
	r.unsealedLinks = 0
}
