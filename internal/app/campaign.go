package app

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// handoverAnnotation is the annotation of a released Lease that says who
// released it and for whom: a JSON object {"from": holder, "to": holder}.
// "to" names the replica the Lease was handed to (a standby that held
// changes its leader never saw); without it, the replica named by "from"
// released the Lease for the others: a process that starts again under
// that name leaves it to them for a lease duration.
const handoverAnnotation = "fieldwatch.io/handover"

// handover is the value of handoverAnnotation.
type handover struct {
	From string `json:"from"`
	To   string `json:"to,omitempty"`
}

// holderIdentity is what a process writes on the Lease as its holder: the
// replica's name (a StatefulSet's pod name, which a restarted pod keeps)
// and an ID of this process, so that a process that starts again never
// takes the Lease of its previous life for its own.
func holderIdentity(replica string) string {
	return replica + "_" + string(uuid.NewUUID())
}

// replicaOf returns the replica name of a holder identity ("" for none).
func replicaOf(holder string) string {
	i := strings.LastIndexByte(holder, '_')
	if i < 0 {
		return holder // an older version's: the name alone
	}
	return holder[:i]
}

// campaign stands by until this replica holds the Lease, reading it every
// half retry period: the standby follows the leader's watermarks with each
// read (Get), and takes the Lease once it is free, or once its record has
// not changed for its lease duration as measured on this replica's clock
// (the leader stopped renewing), so that a takeover comes at most the
// lease duration and a retry period after the leader's last renewal. A
// Lease held by a previous process of this replica (one killed and
// started again under the same name, as a StatefulSet's pod is) is
// released for the other replicas, which take it at their next read; this
// process then leaves a free Lease to them for a lease duration. It
// returns false when ctx ends first.
func (l *watermarkLease) campaign(ctx context.Context, leaseDuration, retryPeriod time.Duration) bool {
	tick := time.NewTicker(retryPeriod / 2)
	defer tick.Stop()
	var (
		raw      []byte
		observed time.Time
		errLog   time.Time
		leader   string
	)
	for {
		now := time.Now()
		rec, r, err := l.Get(ctx)
		switch {
		case apierrors.IsNotFound(err):
			if l.Create(ctx, l.record(0, now)) == nil {
				return true
			}
		case err != nil:
			if ctx.Err() == nil && now.Sub(errLog) > 10*retryPeriod {
				errLog = now
				l.log.Warn("cannot read the leader election Lease; retrying", "lease", l.Describe(), "error", err)
			}
		default:
			if string(r) != string(raw) {
				raw, observed = r, now
			}
			if h := rec.HolderIdentity; h != leader {
				leader = h
				if h != "" && h != l.identity {
					l.log.Info("another replica leads; standing by", "leader", h)
				}
			}
			if l.mayTake(ctx, rec, now.Sub(observed), leaseDuration, retryPeriod) &&
				l.Update(ctx, l.record(rec.LeaderTransitions+1, now)) == nil {
				return true
			}
			if l.held != nil {
				if n := l.held(); n > 0 {
					l.claim(ctx, rec.HolderIdentity, n)
				}
			}
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// mayTake decides, from the Lease's record unchanged for unchanged,
// whether this replica may take it now. A Lease of a previous process of
// this replica that has not been renewed for a retry period is released
// (then it is the others' to take).
func (l *watermarkLease) mayTake(ctx context.Context, rec *resourcelock.LeaderElectionRecord, unchanged, leaseDuration, retryPeriod time.Duration) bool {
	holder := rec.HolderIdentity
	switch {
	case holder == l.identity:
		return true
	case holder != "" && replicaOf(holder) == l.replica:
		// A previous process of this replica held it: it is dead (a
		// replica's name is one process's at a time), but wait until
		// it has missed a renewal, in case it is not.
		if unchanged >= retryPeriod {
			l.releasePrevious(ctx, holder)
		}
		return false
	case holder != "":
		return unchanged >= time.Duration(rec.LeaseDurationSeconds)*time.Second
	}
	h := l.handoverOf()
	switch {
	case h.To == l.identity:
		return true
	case h.To != "", replicaOf(h.From) == l.replica:
		// Handed to another replica, or released by this one's previous
		// process for the others: theirs for a lease duration.
		return unchanged >= leaseDuration
	}
	return true
}

// record is this replica's record as the Lease's holder.
func (l *watermarkLease) record(transitions int, now time.Time) resourcelock.LeaderElectionRecord {
	t := metav1.NewTime(now)
	return resourcelock.LeaderElectionRecord{HolderIdentity: l.identity, LeaseDurationSeconds: l.leaseSeconds,
		AcquireTime: t, RenewTime: t, LeaderTransitions: transitions}
}

// releasePrevious frees the Lease that holder, a previous process of this
// replica, held when it died, keeping its last watermarks for whichever
// replica takes it.
func (l *watermarkLease) releasePrevious(ctx context.Context, holder string) {
	if l.lease == nil {
		return
	}
	lease := l.lease.DeepCopy()
	lease.Spec.HolderIdentity = nil
	one := int32(1)
	lease.Spec.LeaseDurationSeconds = &one
	now := metav1.NewMicroTime(time.Now())
	lease.Spec.RenewTime = &now
	h, err := json.Marshal(handover{From: holder})
	if err != nil {
		return // two strings always encode
	}
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	lease.Annotations[handoverAnnotation] = string(h)
	updated, err := l.client.Leases(l.namespace).Update(ctx, lease, metav1.UpdateOptions{})
	if err != nil {
		l.log.Warn("cannot release the Lease of this replica's previous process; the others take it when it expires", "holder", holder, "error", err)
		return
	}
	l.lease = updated
	l.log.Info("released the Lease this replica's previous process held: another replica takes over, this one stands by", "holder", holder)
}

// handoverOf returns the handover annotation of the Lease last read.
func (l *watermarkLease) handoverOf() handover {
	var h handover
	if l.lease == nil {
		return h
	}
	if raw, ok := l.lease.Annotations[handoverAnnotation]; ok {
		if err := json.Unmarshal([]byte(raw), &h); err != nil {
			l.log.Warn("the Lease's handover annotation does not decode; ignoring it", "annotation", handoverAnnotation, "error", err)
			return handover{}
		}
	}
	return h
}
