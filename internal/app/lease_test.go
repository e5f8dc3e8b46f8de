package app

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
	"github.com/fieldwatch/fieldwatch/watcher"
)

// TestWatermarkLease: the leader's watermarks go on the Lease with every
// write of its record; another replica reads them with the record and
// hands them on; a replica acquiring the Lease keeps the previous leader's
// until it publishes its own; only writes of its own record count as
// renewals.
func TestWatermarkLease(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	kube := env.Clientset(t)
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "lease-lock"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var (
		mu        sync.Mutex
		published = watcher.Watermarks{"configmaps.v1/ns": "5"}
		followed  []watcher.Watermarks
	)
	newLock := func(id string, publish bool) *watermarkLease {
		return &watermarkLease{namespace: "lease-lock", name: "fw", identity: id, client: kube.CoordinationV1(),
			log: slog.New(slog.DiscardHandler),
			publish: func() (watcher.Watermarks, watcher.Gaps) {
				if !publish {
					return nil, nil
				}
				mu.Lock()
				defer mu.Unlock()
				return maps.Clone(published), nil
			},
			follow: func(wm watcher.Watermarks, _ watcher.Gaps) {
				mu.Lock()
				defer mu.Unlock()
				followed = append(followed, wm)
			},
		}
	}
	leader, standby := newLock("a", true), newLock("b", false)
	record := func(holder string) resourcelock.LeaderElectionRecord {
		now := metav1.Now()
		return resourcelock.LeaderElectionRecord{HolderIdentity: holder, LeaseDurationSeconds: 15, AcquireTime: now, RenewTime: now}
	}
	if err := leader.Create(ctx, record("a")); err != nil {
		t.Fatal(err)
	}
	if leader.renewed.Load() == 0 {
		t.Error("creating the Lease as holder is not a renewal")
	}
	got, _, err := standby.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if wm, _ := standby.seen(); got.HolderIdentity != "a" || wm["configmaps.v1/ns"] != "5" {
		t.Fatalf("standby read holder %q, watermarks %v", got.HolderIdentity, wm)
	}

	mu.Lock()
	published["configmaps.v1/ns"] = "7"
	mu.Unlock()
	before := leader.renewed.Load()
	if err := leader.Update(ctx, record("a")); err != nil {
		t.Fatal(err)
	}
	if leader.renewed.Load() <= before {
		t.Error("a renewal was not recorded")
	}
	if _, _, err := standby.Get(ctx); err != nil {
		t.Fatal(err)
	}
	if wm, _ := standby.seen(); wm["configmaps.v1/ns"] != "7" {
		t.Errorf("after the renewal the standby reads %v, want 7", wm)
	}

	// The standby acquires: it keeps the previous leader's watermarks.
	if err := standby.Update(ctx, record("b")); err != nil {
		t.Fatal(err)
	}
	lease, err := kube.CoordinationV1().Leases("lease-lock").Get(ctx, "fw", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := lease.Annotations[watermarksAnnotation]; got != `{"configmaps.v1/ns":"7"}` {
		t.Errorf("after the standby acquired, the annotation is %q", got)
	}
	if *lease.Spec.HolderIdentity != "b" {
		t.Errorf("holder %q", *lease.Spec.HolderIdentity)
	}
	// The old leader's write of someone else's record is no renewal.
	if _, _, err := leader.Get(ctx); err != nil {
		t.Fatal(err)
	}
	before = leader.renewed.Load()
	if err := leader.Update(ctx, record("b")); err != nil {
		t.Fatal(err)
	}
	if leader.renewed.Load() != before {
		t.Error("writing another holder's record counted as a renewal")
	}
	mu.Lock()
	n := len(followed)
	mu.Unlock()
	if n < 3 {
		t.Errorf("follow called %d times, want one per read", n)
	}
}

// TestLeaseGuard: the guard fires once the last renewal is older than the
// renew deadline, or when the leadership context ends, and not before.
// The guard reads the wall clock, so time passes for real here; a check
// fails only on what the guard must not do whatever the machine's load.
func TestLeaseGuard(t *testing.T) {
	const deadline = 300 * time.Millisecond
	l := &watermarkLease{}
	renewed := time.Now()
	l.renewed.Store(renewed.UnixNano())
	lost := l.guard(context.Background(), deadline)
	select {
	case <-lost:
		if age := time.Since(renewed); age < deadline {
			t.Errorf("the guard fired %s after the last renewal, before the renew deadline %s", age, deadline)
		}
	case <-time.After(time.Minute):
		t.Fatal("the guard did not fire a minute after the last renewal")
	}

	// Renewals every 10ms for a second keep it quiet. The guard read one
	// of the last two renewals when it checked: if it fires, the older of
	// them must have been older than the deadline when the test looked
	// (the test stalled), and then the guard was right and starts again.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	renew := func() time.Time {
		now := time.Now()
		l.renewed.Store(now.UnixNano())
		return now
	}
	prev := renew()
	last := prev
	lost = l.guard(ctx, deadline)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	stalls := 0
	for end := time.Now().Add(time.Second); time.Now().Before(end); {
		<-tick.C
		select {
		case <-lost:
			if age := time.Since(prev); age <= deadline {
				t.Fatalf("the guard fired although the renewals it could read were at most %s old, within the renew deadline %s", age, deadline)
			}
			stalls++
			last = renew()
			lost = l.guard(ctx, deadline)
		default:
		}
		prev, last = last, renew()
	}
	if stalls > 0 {
		t.Logf("the test stalled past the renew deadline %d times", stalls)
	}
	cancel()
	select {
	case <-lost:
	case <-time.After(time.Minute):
		t.Fatal("the guard did not fire a minute after leadership ended")
	}
}

// TestCampaign: a standby takes a free Lease at once and an abandoned one
// the lease duration after it last saw it change (within a retry period
// more); a process that finds its replica's previous process holding the
// Lease, unrenewed for a retry period, releases it for the other replicas
// and leaves it to them for a lease duration; a Lease handed to a replica
// is that replica's for a lease duration.
func TestCampaign(t *testing.T) {
	const (
		leaseDuration = 2 * time.Second
		retryPeriod   = 200 * time.Millisecond
	)
	env := testenv.Shared(t)
	ctx := context.Background()
	kube := env.Clientset(t)
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "campaign"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	lock := func(name, replica, id string) *watermarkLease {
		return &watermarkLease{namespace: "campaign", name: name, identity: id, replica: replica, leaseSeconds: 2,
			client: kube.CoordinationV1(), log: slog.New(slog.DiscardHandler)}
	}
	holder := func(name string) string {
		t.Helper()
		lease, err := kube.CoordinationV1().Leases("campaign").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if lease.Spec.HolderIdentity == nil {
			return ""
		}
		return *lease.Spec.HolderIdentity
	}
	// campaign runs l's campaign and returns how long it took to hold.
	campaign := func(l *watermarkLease, timeout time.Duration) (time.Duration, bool) {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		start := time.Now()
		ok := l.campaign(cctx, leaseDuration, retryPeriod)
		return time.Since(start), ok
	}

	// No Lease: the first replica creates it.
	a1 := lock("fw", "a", holderIdentity("a"))
	if _, ok := campaign(a1, 5*time.Second); !ok || holder("fw") != a1.identity {
		t.Fatalf("a did not create the Lease: holder %q", holder("fw"))
	}
	if replicaOf(a1.identity) != "a" || a1.identity == holderIdentity("a") {
		t.Errorf("holder identity %q: want a's name and an ID of the process", a1.identity)
	}

	// a1 stops renewing: b takes over after the lease duration.
	b1 := lock("fw", "b", holderIdentity("b"))
	took, ok := campaign(b1, 10*time.Second)
	if !ok || holder("fw") != b1.identity {
		t.Fatalf("b did not take the Lease over: holder %q", holder("fw"))
	}
	if took < leaseDuration || took > leaseDuration+retryPeriod+500*time.Millisecond {
		t.Errorf("b took the Lease over after %s, want the lease duration %s and at most a retry period more", took, leaseDuration)
	}

	// b1 dies and b starts again: b2 releases b1's Lease, a2 takes it
	// at its next read, b2 not for a lease duration.
	b2, a2 := lock("fw", "b", holderIdentity("b")), lock("fw", "a", holderIdentity("a"))
	b2done := make(chan bool, 1)
	go func() {
		_, ok := campaign(b2, leaseDuration)
		b2done <- ok
	}()
	testenv.Eventually(t, 5*time.Second, "b's previous process's Lease to be released", func() bool { return holder("fw") == "" })
	took, ok = campaign(a2, 5*time.Second)
	if !ok || holder("fw") != a2.identity || took > retryPeriod+500*time.Millisecond {
		t.Errorf("a took the released Lease after %s (holder %q), want at its next read", took, holder("fw"))
	}
	if <-b2done {
		t.Error("b, started again, took the Lease it released for the others")
	}

	// A Lease handed over to b2 is b2's; a3 waits a lease duration.
	h, err := json.Marshal(handover{From: a2.identity, To: b2.identity})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := kube.CoordinationV1().Leases("campaign").Get(ctx, "fw", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lease.Spec.HolderIdentity = nil
	lease.Annotations = map[string]string{handoverAnnotation: string(h)}
	if _, err := kube.CoordinationV1().Leases("campaign").Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	a3 := lock("fw", "a", holderIdentity("a"))
	if _, ok := campaign(a3, leaseDuration/2); ok {
		t.Error("a took a Lease handed over to b")
	}
	if took, ok := campaign(b2, 5*time.Second); !ok || took > leaseDuration/2 {
		t.Errorf("b took the Lease handed to it after %s (%v), want at once", took, ok)
	}
	lease, err = kube.CoordinationV1().Leases("campaign").Get(ctx, "fw", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := lease.Annotations[handoverAnnotation]; ok {
		t.Errorf("the handover annotation stays on a held Lease: %v", lease.Annotations)
	}
}

// TestLeaseGapsAndClaim: the leader's gaps go on the Lease with its
// watermarks; a standby reads both, and its claim reaches the leader it
// names; a release after the claim hands the Lease to the claimant, and
// taking it clears the handover.
func TestLeaseGapsAndClaim(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	kube := env.Clientset(t)
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "lease-claim"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const k = "configmaps.v1/ns"
	var followed watcher.Gaps
	leader := &watermarkLease{namespace: "lease-claim", name: "fw", identity: "l_1", replica: "l", leaseSeconds: 15,
		client: kube.CoordinationV1(), log: slog.New(slog.DiscardHandler), claimed: make(chan struct{}),
		publish: func() (watcher.Watermarks, watcher.Gaps) {
			return watcher.Watermarks{k: "9"}, watcher.Gaps{k: {After: "5", Through: "8"}}
		}}
	standby := &watermarkLease{namespace: "lease-claim", name: "fw", identity: "s_1", replica: "s", leaseSeconds: 15,
		client: kube.CoordinationV1(), log: slog.New(slog.DiscardHandler),
		follow: func(_ watcher.Watermarks, g watcher.Gaps) { followed = g }}
	record := func(holder string) resourcelock.LeaderElectionRecord {
		now := metav1.Now()
		return resourcelock.LeaderElectionRecord{HolderIdentity: holder, LeaseDurationSeconds: 15, AcquireTime: now, RenewTime: now}
	}
	annotations := func() map[string]string {
		t.Helper()
		lease, err := kube.CoordinationV1().Leases("lease-claim").Get(ctx, "fw", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return lease.Annotations
	}
	if err := leader.Create(ctx, record("l_1")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := standby.Get(ctx); err != nil {
		t.Fatal(err)
	}
	if _, gaps := standby.seen(); gaps[k] != (watcher.Gap{After: "5", Through: "8"}) || followed[k] != gaps[k] {
		t.Fatalf("the standby read gaps %v, followed %v", gaps, followed)
	}

	standby.claim(ctx, "l_1", 3)
	if _, _, err := leader.Get(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-leader.claims():
	default:
		t.Fatal("the leader did not see the claim")
	}
	if got := leader.claimedBy(); got != "s_1" {
		t.Errorf("claimed by %q", got)
	}
	if err := leader.Update(ctx, record("l_1")); err != nil {
		t.Fatal(err)
	}
	if _, ok := annotations()[claimAnnotation]; !ok {
		t.Error("the leader's renewal dropped the claim against it")
	}

	to := leader.claimedBy()
	leader.handTo.Store(&to)
	if err := leader.Update(ctx, record("")); err != nil {
		t.Fatal(err)
	}
	a := annotations()
	if a[handoverAnnotation] != `{"from":"l_1","to":"s_1"}` || a[claimAnnotation] != "" || a[gapsAnnotation] == "" {
		t.Errorf("after the release: %v", a)
	}
	if _, _, err := standby.Get(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standby.Update(ctx, record("s_1")); err != nil {
		t.Fatal(err)
	}
	if a := annotations(); a[handoverAnnotation] != "" || a[gapsAnnotation] == "" {
		t.Errorf("after the claimant took the Lease: %v (the handover goes; the previous leader's gaps stay until it publishes its own)", a)
	}
}
