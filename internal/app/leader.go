package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Lease timing: a new leader takes over about LeaseDuration after the old
// one stopped renewing.
const (
	leaseDuration = 15 * time.Second
	renewDeadline = 10 * time.Second
	retryPeriod   = 2 * time.Second
)

// errLostLeadership ends the process of a replica that stopped leading, so
// that it restarts as a candidate with a clean state.
var errLostLeadership = errors.New("lost leadership")

// elect runs serve while this replica holds the Lease. Two replicas never
// both serve: a leader that cannot renew stops serving before its lease
// can expire.
func (a *App) elect(ctx context.Context, serve func(context.Context) error) error {
	id := a.cfg.Identity
	if id == "" {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("identity for leader election: %w", err)
		}
		id = host
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: a.cfg.LeaseNamespace, Name: a.cfg.LeaseName},
		Client:     a.kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	// OnStartedLeading runs in a goroutine that le.Run does not wait for:
	// served carries serve's result so that elect returns only once the
	// drain is over.
	served := make(chan error, 1)
	var led atomic.Bool
	a.standby.Store(true)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   leaseDuration,
		RenewDeadline:   renewDeadline,
		RetryPeriod:     retryPeriod,
		ReleaseOnCancel: true,
		Name:            a.cfg.LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				led.Store(true)
				a.standby.Store(false)
				a.metrics.leader.Set(1)
				a.log.Info("leading", "lease", a.cfg.LeaseNamespace+"/"+a.cfg.LeaseName, "identity", id)
				served <- serve(ctx)
			},
			OnStoppedLeading: func() {
				a.metrics.leader.Set(0)
			},
			OnNewLeader: func(leader string) {
				if leader != id {
					a.log.Info("another replica leads; standing by", "leader", leader)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	le.Run(ctx)
	if !led.Load() {
		return nil // stopped while standing by
	}
	if err := <-served; err != nil {
		return err
	}
	if ctx.Err() == nil {
		return errLostLeadership
	}
	return nil
}
