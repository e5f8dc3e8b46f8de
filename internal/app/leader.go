package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/tools/leaderelection"

	"github.com/fieldwatch/fieldwatch/action"
	"github.com/fieldwatch/fieldwatch/watcher"
)

// errLostLeadership ends the process of a replica that stopped leading, so
// that it restarts as a standby with a clean state.
var errLostLeadership = errors.New("lost leadership")

// errHandedOver ends the process of a leader that handed the Lease over to
// a standby holding writes it never saw; it restarts as a standby.
var errHandedOver = errors.New("handed the Lease over to a standby that holds writes this replica never saw")

// elect runs this replica in a leader election. Every replica watches from
// the start: a standby keeps its changes and records in its baseline those
// the leader's watermarks (read from the Lease) confirm. The one that
// acquires the Lease (campaign) takes over and delivers exactly what its
// predecessor had not confirmed. It renews the Lease with its own
// watermarks. It stops delivering at once when it cannot renew within the
// renew deadline, and on SIGTERM drains while still holding the Lease,
// then releases it. Each process holds the Lease under its own identity
// (the replica's name and an ID of the process): one that starts again
// under its replica's name never mistakes its previous process's Lease for
// its own.
func (a *app) elect(ctx context.Context) error {
	replicaName := a.cfg.Identity
	if replicaName == "" {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("identity for leader election: %w", err)
		}
		replicaName = host
	}
	id := holderIdentity(replicaName)
	a.standby.Store(true)
	r, err := a.newReplica(ctx, true)
	if err != nil {
		return err
	}
	defer r.close(a.log, &a.auditSink)
	watchCtx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWatch()
	watched := &result{done: make(chan struct{})}
	go func() {
		watched.err = r.w.Run(watchCtx)
		close(watched.done)
	}()
	go a.recordBaselines(watchCtx, r.w)

	var leading atomic.Bool
	lock := &watermarkLease{
		namespace: a.cfg.LeaseNamespace, name: a.cfg.LeaseName, identity: id, replica: replicaName,
		leaseSeconds: int(a.cfg.LeaseDuration / time.Second),
		client:       a.kube.CoordinationV1(), log: a.log,
		publish: func() (watcher.Watermarks, watcher.Gaps) {
			if !leading.Load() {
				return nil, nil // acquiring: keep the previous leader's
			}
			return r.w.Published()
		},
		follow: func(wm watcher.Watermarks, gaps watcher.Gaps) {
			if !leading.Load() {
				r.w.Confirm(wm, gaps)
			}
		},
		held:    r.w.Held,
		writes:  a.metrics.leaseWrites,
		claimed: make(chan struct{}),
	}
	// The election runs until this replica has handed over (or stops
	// standing by): its context is not the process's.
	leCtx, stopElection := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElection()
	var (
		mu       sync.Mutex
		stopping bool
	)
	served := make(chan error, 1)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   a.cfg.LeaseDuration,
		RenewDeadline:   a.cfg.RenewDeadline,
		RetryPeriod:     a.cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            a.cfg.LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				mu.Lock()
				if stopping {
					mu.Unlock()
					return
				}
				leading.Store(true)
				mu.Unlock()
				served <- a.lead(ctx, lctx, r, lock, watched, stopWatch)
				stopElection() // releases the Lease, with the final watermarks
			},
			OnStoppedLeading: func() {
				a.metrics.leader.Set(0)
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	go func() {
		select {
		case <-ctx.Done():
		case <-leCtx.Done():
			return
		}
		mu.Lock()
		defer mu.Unlock()
		stopping = true
		if !leading.Load() {
			stopElection() // a standby just stops
		}
	}()
	a.log.Info("standing by for the Lease", "lease", a.cfg.LeaseNamespace+"/"+a.cfg.LeaseName, "identity", id)
	if lock.campaign(leCtx, a.cfg.LeaseDuration, a.cfg.RetryPeriod) {
		// The Lease is this process's: the elector renews it (its
		// first attempt, at once, finds it so) and starts leading.
		le.Run(leCtx)
	}

	var result error
	if leading.Load() {
		result = <-served
	}
	r.w.Abandon() // a standby has nothing to hand on
	stopWatch()
	if err := watched.wait(); err != nil && result == nil {
		result = err
	}
	return result
}

// result is the outcome of a goroutine, for several to wait for.
type result struct {
	done chan struct{}
	err  error
}

func (r *result) wait() error {
	<-r.done
	return r.err
}

// lead takes over and acts until the Lease is lost (lctx ends, or a renewal
// is overdue) or the process is told to stop (ctx ends). Losing the Lease
// stops delivery at once: what was not done is left, unrecorded, to the
// next leader. Stopping drains within the grace period while the Lease is
// still held, and hands over what is left.
func (a *app) lead(ctx, lctx context.Context, r *replica, lock *watermarkLease, watched *result, stopWatch context.CancelFunc) error {
	lost := lock.guard(lctx, a.cfg.RenewDeadline)
	disp, err := a.newDispatcher(true)
	if err != nil {
		return err
	}
	a.standby.Store(false)
	a.metrics.leader.Set(1)
	wm, gaps := lock.seen()
	a.log.Info("leading: taking over from the last watermarks of the previous leader",
		"lease", a.cfg.LeaseNamespace+"/"+a.cfg.LeaseName, "identity", lock.identity, "informers", len(wm), "gaps", len(gaps))
	r.w.TakeOver(wm, gaps)

	var handOver bool
	select {
	case <-lost:
		a.abort(r, disp)
		return errLostLeadership
	case <-lock.claims():
		// A standby saw writes this replica never received (its watch
		// began after them): only that standby can deliver them.
		to := lock.claimedBy()
		lock.handTo.Store(&to)
		handOver = true
		a.log.Warn("a standby holds writes this replica never saw: handing the Lease over to it once what is queued is handled", "standby", to)
	case <-ctx.Done():
		a.log.Info("stopping: handling what is queued while holding the Lease, then releasing it", "gracePeriod", a.cfg.GracePeriod)
	}
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		stopWatch() // the watcher drains within half the grace period
		_ = watched.wait()
		if r.att != nil {
			// The last changes get their audit events, then their actions.
			r.att.stop(a.attributionDrain(), &a.auditSink)
		}
		closeCtx, done := context.WithTimeout(context.Background(), a.cfg.GracePeriod/2)
		defer done()
		if err := disp.Close(closeCtx); err != nil {
			a.log.Warn("grace period over: what is not delivered is left to the next leader", "error", err)
		}
	}()
	select {
	case <-drained:
		if handOver {
			return errHandedOver
		}
		return nil
	case <-lost:
		a.abort(r, disp)
		<-drained
		return errLostLeadership
	}
}

// abort stops delivering at once.
func (a *app) abort(r *replica, disp *action.Dispatcher) {
	a.log.Error("lost the Lease (or could not renew it in time): stopping delivery at once; the next leader delivers what was not done")
	if r.att != nil {
		r.att.abort(&a.auditSink) // the changes waiting for their events are left undone
	}
	r.w.Abandon()
	disp.Abort()
}
