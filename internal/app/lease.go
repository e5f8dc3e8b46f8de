package app

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/fieldwatch/fieldwatch/watcher"
)

// watermarksAnnotation is the annotation of the leader election Lease in
// which the leader publishes, at every renewal, its watermarks: a JSON
// object from informer ("resource.version.group", with "/namespace" when
// it watches one namespace) to the resourceVersion up to which every
// change of that informer is handled.
const watermarksAnnotation = "fieldwatch.io/watermarks"

// gapsAnnotation is the annotation in which the leader publishes, with its
// watermarks, its gaps (watcher.Gaps): per informer, the resourceVersions
// {"after": a, "through": b} whose writes it never saw one by one, since
// its watch began after them and no leader before it confirmed them. A
// standby keeps the writes of a gap it saw (the watermarks do not confirm
// them) and asks for the Lease (claimAnnotation).
const gapsAnnotation = "fieldwatch.io/gaps"

// claimAnnotation is the annotation a standby writes on the Lease when it
// holds writes of the leader's gaps: {"by": standby, "against": leader,
// "changes": n}. The leader it names hands the Lease over to it (drains,
// then releases it with handoverAnnotation naming the standby).
const claimAnnotation = "fieldwatch.io/claim"

// claim is the value of claimAnnotation.
type claim struct {
	By      string `json:"by"`
	Against string `json:"against"`
	Changes int    `json:"changes"`
}

// maxWatermarksSize bounds the watermarks and gaps annotations together,
// well under the 256 KiB that all annotations of an object may take.
const maxWatermarksSize = 128 << 10

// watermarkLease is the leader election lock: a coordination.k8s.io Lease
// like client-go's LeaseLock, that also carries the leader's watermarks in
// an annotation, written with every renewal, and hands those it reads to a
// standby. It remembers when its holder last renewed, so that a leader can
// stop acting before its Lease may expire for the others.
type watermarkLease struct {
	// identity is this process's holder identity (holderIdentity),
	// replica the name of the replica it runs as.
	namespace, name, identity, replica string
	// leaseSeconds is the lease duration written on the Lease.
	leaseSeconds int
	client       coordinationv1client.LeasesGetter
	log          *slog.Logger
	// publish returns the watermarks and gaps to write, nil watermarks
	// to keep the Lease's.
	publish func() (watcher.Watermarks, watcher.Gaps)
	// follow receives the watermarks and gaps read from the Lease.
	follow func(watcher.Watermarks, watcher.Gaps)
	// held, when set, returns how many writes of the leader's gaps this
	// standby holds: it claims the Lease when there are some.
	held func() int
	// writes, when set, observes how long each successful write took.
	writes prometheus.Observer

	lease     *coordinationv1.Lease // as last read or written (the election's goroutine only)
	mu        sync.Mutex
	last      watcher.Watermarks // as last read
	lastGaps  watcher.Gaps       // with last
	renewed   atomic.Int64       // unix nanoseconds when the last renewal of ours was sent
	tooLarge  atomic.Bool
	badFormat atomic.Bool
	// claimed is closed when a standby claims the Lease from this
	// replica; claimant is that standby, handTo whom a release hands the
	// Lease to.
	claimed     chan struct{}
	claimOnce   sync.Once
	claimant    atomic.Pointer[string]
	handTo      atomic.Pointer[string]
	claimedFrom string // the holder this standby last claimed against
}

var _ resourcelock.Interface = &watermarkLease{}

// Get implements resourcelock.Interface: it reads the Lease and hands its
// watermarks on.
func (l *watermarkLease) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	ctx, cancel := uncanceled(ctx)
	defer cancel()
	lease, err := l.client.Leases(l.namespace).Get(ctx, l.name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	l.lease = lease
	l.read(lease)
	record := resourcelock.LeaseSpecToLeaderElectionRecord(&lease.Spec)
	raw, err := json.Marshal(*record)
	if err != nil {
		return nil, nil, err
	}
	return record, raw, nil
}

// read takes the watermarks and gaps of lease, and notes a claim against
// this replica.
func (l *watermarkLease) read(lease *coordinationv1.Lease) {
	if c, ok := l.claimOf(lease); ok && c.Against == l.identity && c.By != "" {
		l.claimOnce.Do(func() {
			l.claimant.Store(&c.By)
			if l.claimed != nil {
				close(l.claimed)
			}
		})
	}
	raw, ok := lease.Annotations[watermarksAnnotation]
	if !ok {
		return
	}
	var wm watcher.Watermarks
	if err := json.Unmarshal([]byte(raw), &wm); err != nil {
		if !l.badFormat.Swap(true) {
			l.log.Error("the Lease's watermarks do not decode; ignoring them", "annotation", watermarksAnnotation, "error", err)
		}
		return
	}
	var gaps watcher.Gaps
	if raw, ok := lease.Annotations[gapsAnnotation]; ok {
		if err := json.Unmarshal([]byte(raw), &gaps); err != nil {
			// Without its gaps the watermarks could confirm writes
			// the leader never saw: ignore both.
			if !l.badFormat.Swap(true) {
				l.log.Error("the Lease's gaps do not decode; ignoring its watermarks", "annotation", gapsAnnotation, "error", err)
			}
			return
		}
	}
	l.mu.Lock()
	l.last, l.lastGaps = wm, gaps
	l.mu.Unlock()
	if l.follow != nil {
		l.follow(wm, gaps)
	}
}

// claimOf returns the claim annotation of lease, if any.
func (l *watermarkLease) claimOf(lease *coordinationv1.Lease) (claim, bool) {
	var c claim
	raw, ok := lease.Annotations[claimAnnotation]
	if !ok {
		return c, false
	}
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		return c, false
	}
	return c, true
}

// seen returns the watermarks and gaps last read from the Lease.
func (l *watermarkLease) seen() (watcher.Watermarks, watcher.Gaps) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last, l.lastGaps
}

// claims returns a channel closed when a standby claims the Lease from
// this replica (nil without a claimed channel: never).
func (l *watermarkLease) claims() <-chan struct{} { return l.claimed }

// claimedBy returns the standby that claimed the Lease ("" for none).
func (l *watermarkLease) claimedBy() string {
	if p := l.claimant.Load(); p != nil {
		return *p
	}
	return ""
}

// claim writes, on a standby that holds n writes of the gaps of holder
// (the leader), a claim for the Lease, once per leader. A conflicting
// write (a renewal meanwhile) is tried again at the next read.
func (l *watermarkLease) claim(ctx context.Context, holder string, n int) {
	if l.lease == nil || holder == "" || holder == l.identity || l.claimedFrom == holder {
		return
	}
	lease := l.lease.DeepCopy()
	raw, err := json.Marshal(claim{By: l.identity, Against: holder, Changes: n})
	if err != nil {
		return // strings and an int always encode
	}
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	lease.Annotations[claimAnnotation] = string(raw)
	updated, err := l.client.Leases(l.namespace).Update(ctx, lease, metav1.UpdateOptions{})
	if err != nil {
		return
	}
	l.lease = updated
	l.claimedFrom = holder
	l.log.Warn("this standby holds writes the leader never saw (made before its watch began, after what the previous leader confirmed): asking it to hand the Lease over",
		"leader", holder, "changes", n)
}

// leaseRequestTimeout bounds a request on the Lease whose context has no
// deadline.
const leaseRequestTimeout = 10 * time.Second

// uncanceled returns the context of one request on the Lease: it ends at
// ctx's deadline (the elector's renew deadline), or within
// leaseRequestTimeout, but not when ctx is canceled. The elector cancels
// its context when this replica stops leading or standing by, and a
// request cut short then was logged by client-go as an error ("Error
// retrieving lease lock ... context canceled") at every graceful stop;
// the request finishes instead, its outcome unused.
func uncanceled(ctx context.Context) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(leaseRequestTimeout)
	}
	return context.WithDeadline(context.WithoutCancel(ctx), deadline)
}

// Create implements resourcelock.Interface.
func (l *watermarkLease) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: l.name, Namespace: l.namespace},
		Spec:       resourcelock.LeaderElectionRecordToLeaseSpec(&ler),
	}
	l.annotate(lease, ler)
	sent := time.Now()
	ctx, cancel := uncanceled(ctx)
	defer cancel()
	created, err := l.client.Leases(l.namespace).Create(ctx, lease, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	l.lease = created
	l.wrote(ler, sent)
	return nil
}

// Update implements resourcelock.Interface: the record, and the
// watermarks when this replica leads.
func (l *watermarkLease) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if l.lease == nil {
		return errors.New("lease not initialized, call get or create first")
	}
	lease := l.lease.DeepCopy()
	lease.Spec = resourcelock.LeaderElectionRecordToLeaseSpec(&ler)
	l.annotate(lease, ler)
	sent := time.Now()
	ctx, cancel := uncanceled(ctx)
	defer cancel()
	updated, err := l.client.Leases(l.namespace).Update(ctx, lease, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	l.lease = updated
	l.wrote(ler, sent)
	return nil
}

// annotate writes on lease, about to carry the record ler, the
// watermarks and gaps to publish, if any. A Lease that someone holds has
// no handover annotation (it was for the last release), nor a claim
// against someone else; a released one has no claim, and hands over to
// the claimant if this replica yields to one.
func (l *watermarkLease) annotate(lease *coordinationv1.Lease, ler resourcelock.LeaderElectionRecord) {
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	if ler.HolderIdentity != "" {
		delete(lease.Annotations, handoverAnnotation)
		if c, ok := l.claimOf(lease); !ok || c.Against != ler.HolderIdentity {
			delete(lease.Annotations, claimAnnotation)
		}
	} else {
		delete(lease.Annotations, claimAnnotation)
		if to := l.handTo.Load(); to != nil {
			if h, err := json.Marshal(handover{From: l.identity, To: *to}); err == nil {
				lease.Annotations[handoverAnnotation] = string(h)
			}
		}
	}
	if l.publish == nil {
		return
	}
	wm, gaps := l.publish()
	if wm == nil {
		return
	}
	raw, err := json.Marshal(wm)
	if err != nil {
		return // a map of strings always encodes
	}
	var rawGaps []byte
	if len(gaps) > 0 {
		if rawGaps, err = json.Marshal(gaps); err != nil {
			return // maps of strings always encode
		}
	}
	if len(raw)+len(rawGaps) > maxWatermarksSize {
		// Standbys fire everything they hold at a takeover rather than
		// trust an old value.
		delete(lease.Annotations, watermarksAnnotation)
		delete(lease.Annotations, gapsAnnotation)
		if !l.tooLarge.Swap(true) {
			l.log.Error("too many informers to publish their watermarks on the Lease: a standby that takes over fires every change it holds",
				"informers", len(wm), "bytes", len(raw), "max", maxWatermarksSize)
		}
		return
	}
	lease.Annotations[watermarksAnnotation] = string(raw)
	if rawGaps != nil {
		lease.Annotations[gapsAnnotation] = string(rawGaps)
	} else {
		delete(lease.Annotations, gapsAnnotation)
	}
}

// wrote notes a successful write of ler, sent at sent.
func (l *watermarkLease) wrote(ler resourcelock.LeaderElectionRecord, sent time.Time) {
	if l.writes != nil {
		l.writes.Observe(time.Since(sent).Seconds())
	}
	if ler.HolderIdentity == l.identity {
		l.renewed.Store(sent.UnixNano())
	}
}

// guard returns a channel closed when lctx ends or when the last renewal
// is more than renewDeadline old: from then on another replica may take
// over soon (it waits the lease duration from when it saw that renewal,
// which is after it was sent), so the leader must stop.
func (l *watermarkLease) guard(lctx context.Context, renewDeadline time.Duration) <-chan struct{} {
	lost := make(chan struct{})
	go func() {
		defer close(lost)
		tick := time.NewTicker(renewDeadline / 20)
		defer tick.Stop()
		for {
			select {
			case <-lctx.Done():
				return
			case <-tick.C:
				if time.Since(time.Unix(0, l.renewed.Load())) > renewDeadline {
					return
				}
			}
		}
	}()
	return lost
}

// RecordEvent implements resourcelock.Interface; no Events are recorded.
func (l *watermarkLease) RecordEvent(string) {}

// Identity implements resourcelock.Interface.
func (l *watermarkLease) Identity() string { return l.identity }

// Describe implements resourcelock.Interface.
func (l *watermarkLease) Describe() string { return l.namespace + "/" + l.name }
