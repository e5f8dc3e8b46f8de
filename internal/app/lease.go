package app

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

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

// maxWatermarksSize bounds the annotation, well under the 256 KiB that all
// annotations of an object may take.
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
	// publish returns the watermarks to write, nil to keep the Lease's.
	publish func() watcher.Watermarks
	// follow receives the watermarks read from the Lease.
	follow func(watcher.Watermarks)

	lease     *coordinationv1.Lease // as last read or written (the election's goroutine only)
	mu        sync.Mutex
	last      watcher.Watermarks // as last read
	renewed   atomic.Int64       // unix nanoseconds when the last renewal of ours was sent
	tooLarge  atomic.Bool
	badFormat atomic.Bool
}

var _ resourcelock.Interface = &watermarkLease{}

// Get implements resourcelock.Interface: it reads the Lease and hands its
// watermarks on.
func (l *watermarkLease) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
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

// read takes the watermarks of lease.
func (l *watermarkLease) read(lease *coordinationv1.Lease) {
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
	l.mu.Lock()
	l.last = wm
	l.mu.Unlock()
	if l.follow != nil {
		l.follow(wm)
	}
}

// seen returns the watermarks last read from the Lease.
func (l *watermarkLease) seen() watcher.Watermarks {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

// Create implements resourcelock.Interface.
func (l *watermarkLease) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: l.name, Namespace: l.namespace},
		Spec:       resourcelock.LeaderElectionRecordToLeaseSpec(&ler),
	}
	l.annotate(lease, ler)
	sent := time.Now()
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
	updated, err := l.client.Leases(l.namespace).Update(ctx, lease, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	l.lease = updated
	l.wrote(ler, sent)
	return nil
}

// annotate writes on lease, about to carry the record ler, the
// watermarks to publish, if any. A Lease that someone holds has no
// handover annotation (it was for the last release).
func (l *watermarkLease) annotate(lease *coordinationv1.Lease, ler resourcelock.LeaderElectionRecord) {
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	if ler.HolderIdentity != "" {
		delete(lease.Annotations, handoverAnnotation)
	}
	if l.publish == nil {
		return
	}
	wm := l.publish()
	if wm == nil {
		return
	}
	raw, err := json.Marshal(wm)
	if err != nil {
		return // a map of strings always encodes
	}
	if len(raw) > maxWatermarksSize {
		// Standbys fire everything they hold at a takeover rather than
		// trust an old value.
		delete(lease.Annotations, watermarksAnnotation)
		if !l.tooLarge.Swap(true) {
			l.log.Error("too many informers to publish their watermarks on the Lease: a standby that takes over fires every change it holds",
				"informers", len(wm), "bytes", len(raw), "max", maxWatermarksSize)
		}
		return
	}
	lease.Annotations[watermarksAnnotation] = string(raw)
}

// wrote notes a successful write of ler, sent at sent.
func (l *watermarkLease) wrote(ler resourcelock.LeaderElectionRecord, sent time.Time) {
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
