package audit

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fieldwatch/fieldwatch/change"
)

// admRec is the record of an admission review by user of ConfigMap n/cm
// (uid "u1"): verb, the resourceVersion it applied to and the content
// hash of what it stores.
func admRec(user, verb, oldRV, hash string) Record {
	return Record{Admission: true, RequestUID: fmt.Sprintf("%s-%s-%s-%s", user, verb, oldRV, hash), Level: "Admission", Verb: verb, Code: 200,
		Version: "v1", Resource: "configmaps", Namespace: "n", Name: "cm",
		User: change.UserInfo{Username: user, Groups: []string{"system:authenticated"}}, ObjectUID: "u1", OldResourceVersion: oldRV, ContentHash: hash}
}

// admChange is a change of ConfigMap n/cm (uid "u1") watched at t.
func admChange(typ change.Type, oldRV, rv, hash string, t time.Time) Change {
	c := Change{Resource: "configmaps", Namespace: "n", Name: "cm", UID: "u1", ResourceVersion: rv, Type: typ, Time: t}
	switch typ {
	case change.Updated:
		c.OldResourceVersion, c.ContentHash = oldRV, hash
	case change.Created:
		c.ContentHash = hash
	case change.Deleted:
		c.DeletedResourceVersion = oldRV
	}
	return c
}

func newAdmissionIndex(clock *fakeClock) *Index {
	return NewIndex(IndexOptions{Clock: clock, AdmissionTTL: 5 * time.Second})
}

// TestAdmissionMatching: a change is attributed from the admission
// records that name its object's uid, the version it applied to and the
// content it stored, and ambiguous whenever records by several identities
// fit it: never the earlier or a guessed one.
func TestAdmissionMatching(t *testing.T) {
	type timed struct {
		rec Record
		at  time.Duration // after t0
	}
	at0 := func(rs ...Record) []timed {
		out := make([]timed, len(rs))
		for i, r := range rs {
			out[i] = timed{rec: r}
		}
		return out
	}
	deletionStarted := admChange(change.Updated, "7", "8", "", t0)
	deletionStarted.DeletionStarted = true
	terminatingGone := admChange(change.Deleted, "9", "10", "", t0)
	terminatingGone.WasTerminating = true
	statusWrite := admChange(change.Updated, "5", "6", "H1", t0)
	statusWrite.Subresource, statusWrite.SubresourceKnown = "status", true
	statusRec := admRec("kubelet", "update", "5", "H1")
	statusRec.Subresource = "status"
	tests := []struct {
		name       string
		recs       []timed
		change     Change
		changeAt   time.Duration
		match      change.Match // "" for no match (the change waits)
		user       string
		verb       string
		candidates []string
	}{
		{"create by uid", at0(admRec("alice", "create", "", "H0")), admChange(change.Created, "", "5", "H0", t0), 0, change.MatchExact, "alice", "create", nil},
		{"update by version and content", at0(admRec("alice", "update", "5", "H1")), admChange(change.Updated, "5", "6", "H1", t0), 0, change.MatchExact, "alice", "update", nil},
		{"racing writers told apart by content", at0(admRec("alice", "update", "5", "H1"), admRec("bob", "update", "5", "H2")),
			admChange(change.Updated, "5", "6", "H2", t0), 0, change.MatchExact, "bob", "update", nil},
		{"racing writers of the same content", at0(admRec("alice", "update", "5", "H1"), admRec("bob", "update", "5", "H1")),
			admChange(change.Updated, "5", "6", "H1", t0), 0, change.MatchAmbiguous, "", "", []string{"alice", "bob"}},
		{"one user's retried request", at0(admRec("alice", "update", "5", "H1"), func() Record { r := admRec("alice", "update", "5", "H1"); r.RequestUID += "-again"; return r }()),
			admChange(change.Updated, "5", "6", "H1", t0), 0, change.MatchExact, "alice", "update", nil},
		{"a user's update and delete of one version", at0(admRec("alice", "update", "5", "H1"), admRec("alice", "delete", "5", "")),
			admChange(change.Updated, "5", "6", "H1", t0), 0, change.MatchExact, "alice", "update", nil},
		{"another version", at0(admRec("alice", "update", "4", "H1")), admChange(change.Updated, "5", "6", "H1", t0), 0, "", "", "", nil},
		{"another content (denied, lost a race, no-op)", at0(admRec("alice", "update", "5", "H9")), admChange(change.Updated, "5", "6", "H1", t0), 0, "", "", "", nil},
		{"a denied request, then the same change by another within the TTL",
			[]timed{{admRec("alice", "update", "5", "H1"), 0}, {admRec("bob", "update", "5", "H1"), 3 * time.Second}},
			admChange(change.Updated, "5", "6", "H1", t0), 3 * time.Second, change.MatchAmbiguous, "", "", []string{"alice", "bob"}},
		{"a denied request, then the same change by another past the TTL",
			[]timed{{admRec("alice", "update", "5", "H1"), 0}, {admRec("bob", "update", "5", "H1"), 6 * time.Second}},
			admChange(change.Updated, "5", "6", "H1", t0), 6 * time.Second, change.MatchExact, "bob", "update", nil},
		{"a record past the TTL", at0(admRec("alice", "update", "5", "H1")), admChange(change.Updated, "5", "6", "H1", t0), 6 * time.Second, "", "", "", nil},
		{"a forged review beside the real one", at0(admRec("mallory", "update", "5", "H1"), admRec("alice", "update", "5", "H1")),
			admChange(change.Updated, "5", "6", "H1", t0), 0, change.MatchAmbiguous, "", "", []string{"alice", "mallory"}},
		{"a forged review of other content", at0(admRec("mallory", "update", "5", "H7"), admRec("alice", "update", "5", "H1")),
			admChange(change.Updated, "5", "6", "H1", t0), 0, change.MatchExact, "alice", "update", nil},
		{"a forged review of another uid", at0(func() Record { r := admRec("mallory", "update", "5", "H1"); r.ObjectUID = "u2"; return r }(), admRec("alice", "update", "5", "H1")),
			admChange(change.Updated, "5", "6", "H1", t0), 0, change.MatchExact, "alice", "update", nil},
		{"a scale write (no content) beside a write of that content", at0(admRec("dave", "update", "5", ""), admRec("erin", "update", "5", "H2")),
			admChange(change.Updated, "5", "6", "H2", t0), 0, change.MatchAmbiguous, "", "", []string{"dave", "erin"}},
		{"a scale write alone", at0(admRec("dave", "update", "5", "")), admChange(change.Updated, "5", "6", "H2", t0), 0, change.MatchExact, "dave", "update", nil},
		{"a status write", at0(statusRec, admRec("erin", "update", "5", "H1")), statusWrite, 0, change.MatchExact, "kubelet", "update", nil},
		{"a watch without content hash", at0(admRec("alice", "update", "5", "H1")), admChange(change.Updated, "5", "6", "", t0), 0, change.MatchExact, "alice", "update", nil},
		{"delete by the version deleted", at0(admRec("carol", "delete", "7", "")), admChange(change.Deleted, "7", "8", "", t0), 0, change.MatchExact, "carol", "delete", nil},
		{"delete of another version", at0(admRec("carol", "delete", "6", "")), admChange(change.Deleted, "7", "8", "", t0), 0, "", "", "", nil},
		{"delete seen as a tombstone", at0(admRec("carol", "delete", "6", "")), admChange(change.Deleted, "", "8", "", t0), 0, change.MatchExact, "carol", "delete", nil},
		{"graceful delete", at0(admRec("carol", "delete", "7", "")), deletionStarted, 0, change.MatchExact, "carol", "delete", nil},
		{"an update does not start a deletion", at0(admRec("carol", "update", "7", "H1")), deletionStarted, 0, "", "", "", nil},
		{"the last finalizer removed", at0(admRec("controller", "update", "9", "H3")), terminatingGone, 0, change.MatchExact, "controller", "update", nil},
		{"a delete is no update", at0(admRec("carol", "delete", "5", "")), admChange(change.Updated, "5", "6", "H1", t0), 0, "", "", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			ix := newAdmissionIndex(clock)
			var now time.Duration
			for _, r := range tt.recs {
				clock.Step(r.at - now)
				now = r.at
				ix.Add(SourceAdmission, []Record{r.rec}, 0)
			}
			clock.Step(tt.changeAt - now)
			c := tt.change
			c.Time = t0.Add(tt.changeAt)
			a, ok := ix.match(&c, false)
			if tt.match == "" {
				if ok {
					t.Fatalf("attributed %+v, want no match", a)
				}
				return
			}
			if !ok || a.Match != tt.match || a.Username() != tt.user || a.Verb != tt.verb || !slices.Equal(a.Candidates, tt.candidates) {
				t.Fatalf("attributed %v %+v, want %s by %q verb %q candidates %v", ok, a, tt.match, tt.user, tt.verb, tt.candidates)
			}
			if a.Source != change.SourceAdmission {
				t.Errorf("source %q, want %q", a.Source, change.SourceAdmission)
			}
			if tt.match == change.MatchExact && (a.User.UID != "" || len(a.User.Groups) != 1) {
				t.Errorf("user %+v: want the record's groups", a.User)
			}
			// The records of the version the change applied to are
			// consumed: they stand for no other change.
			if again, ok := ix.match(&c, true); ok {
				t.Errorf("matched again: %+v", again)
			}
		})
	}
}

// TestAdmissionWithAudit: with an audit source too, an audit event of the
// same identity agrees (and lends its auditID and client), one of another
// identity makes the change ambiguous; an audit event of a change
// admission attributed before it came is that change's echo, consumed
// when it comes, and never a candidate for the object's next change.
func TestAdmissionWithAudit(t *testing.T) {
	auditRec := func(user, id string, at time.Time) Record {
		r := rec(id, user, "patch", "cm", at.Sub(t0))
		r.Namespace = "n"
		return r
	}
	t.Run("agree", func(t *testing.T) {
		clock := newFakeClock()
		ix := NewIndex(IndexOptions{Clock: clock, Echoes: true})
		ix.Add(SourceAdmission, []Record{admRec("alice", "update", "5", "H1")}, 0)
		ix.Add(SourceWebhook, []Record{auditRec("alice", "a1", t0)}, 0)
		c := admChange(change.Updated, "5", "6", "H1", t0)
		a, ok := ix.match(&c, false)
		if !ok || a.Match != change.MatchExact || a.Username() != "alice" || a.AuditID != "a1" || a.UserAgent == "" || a.Source != change.SourceAdmission {
			t.Fatalf("attributed %+v", a)
		}
		if ix.Len() != 0 {
			t.Errorf("%d audit events held: the one that agreed was not consumed", ix.Len())
		}
	})
	t.Run("conflict", func(t *testing.T) {
		clock := newFakeClock()
		ix := NewIndex(IndexOptions{Clock: clock, Echoes: true})
		ix.Add(SourceAdmission, []Record{admRec("alice", "update", "5", "H1")}, 0)
		ix.Add(SourceWebhook, []Record{auditRec("bob", "b1", t0)}, 0)
		c := admChange(change.Updated, "5", "6", "H1", t0)
		a, ok := ix.match(&c, false)
		if !ok || a.Match != change.MatchAmbiguous || !slices.Equal(a.Candidates, []string{"alice", "bob"}) || a.Source != change.SourceBoth {
			t.Fatalf("attributed %+v, want ambiguous between alice and bob from both sources", a)
		}
	})
	t.Run("echo", func(t *testing.T) {
		clock := newFakeClock()
		m := NewAdmissionMetrics(nil)
		ix := NewIndex(IndexOptions{Clock: clock, Echoes: true, AdmissionMetrics: m})
		ix.Add(SourceAdmission, []Record{admRec("alice", "update", "5", "H1")}, 0)
		c1 := admChange(change.Updated, "5", "6", "H1", t0)
		if a, ok := ix.match(&c1, false); !ok || a.Username() != "alice" {
			t.Fatalf("first change: %+v", a)
		}
		clock.Step(500 * time.Millisecond)
		// alice's audit event comes after her change was attributed, then
		// bob writes: his change has his record, and alice's event is no
		// candidate for it.
		ix.Add(SourceWebhook, []Record{auditRec("alice", "a1", t0.Add(10*time.Millisecond))}, 0)
		if ix.Len() != 0 || testutil.ToFloat64(m.echoConfirmed) != 1 {
			t.Fatalf("alice's audit event: %d held, %v confirmed; want it taken as her change's", ix.Len(), testutil.ToFloat64(m.echoConfirmed))
		}
		ix.Add(SourceAdmission, []Record{admRec("bob", "update", "6", "H2")}, 0)
		c2 := admChange(change.Updated, "6", "7", "H2", t0.Add(500*time.Millisecond))
		if a, ok := ix.match(&c2, false); !ok || a.Match != change.MatchExact || a.Username() != "bob" {
			t.Fatalf("second change: %+v, want bob's", a)
		}
		// An audit event of another identity that fits bob's change is
		// held, and counted as a conflict.
		ix.Add(SourceWebhook, []Record{auditRec("mallory", "m1", t0.Add(500*time.Millisecond))}, 0)
		if ix.Len() != 1 || testutil.ToFloat64(m.echoConflict) != 1 {
			t.Errorf("mallory's audit event: %d held, %v conflicts; want held and counted", ix.Len(), testutil.ToFloat64(m.echoConflict))
		}
	})
}

// TestAdmissionBounds: the records held are bounded in count and bytes
// and expire, whatever comes: a flood of requests that never become
// changes (dry runs are not even kept) keeps the index flat; a record
// forwarded twice is held once.
func TestAdmissionBounds(t *testing.T) {
	clock := newFakeClock()
	m := NewAdmissionMetrics(nil)
	ix := NewIndex(IndexOptions{Clock: clock, AdmissionMaxPending: 100, AdmissionMetrics: m, MaxAge: 30 * time.Second})
	for i := range 1000 {
		r := admRec(fmt.Sprintf("u%d", i%7), "patch", fmt.Sprint(i), "H")
		r.ObjectUID = fmt.Sprintf("obj-%d", i)
		ix.Add(SourceAdmission, []Record{r}, 0)
	}
	if n, _ := ix.Pending(); n != 100 || testutil.ToFloat64(m.evictedCount) != 900 {
		t.Errorf("%d pending, %v evicted by count; want 100, 900", n, testutil.ToFloat64(m.evictedCount))
	}
	r := admRec("alice", "update", "5", "H")
	ix.Add(SourceAdmissionPeer, []Record{r, r}, 0)
	if testutil.ToFloat64(m.reviewBy[reviewDuplicate]) != 1 {
		t.Errorf("a record forwarded twice: %v duplicates, want 1", testutil.ToFloat64(m.reviewBy[reviewDuplicate]))
	}
	clock.Step(31 * time.Second)
	if n, b := ix.Pending(); n != 0 || b != 0 {
		t.Errorf("after MaxAge: %d pending, %d bytes; want none", n, b)
	}
	ix = NewIndex(IndexOptions{Clock: clock, AdmissionMaxBytes: 64 << 10, AdmissionMetrics: m})
	for i := range 1000 {
		r := admRec("u", "update", fmt.Sprint(i), "H")
		r.ObjectUID = fmt.Sprintf("obj-%d", i)
		ix.Add(SourceAdmission, []Record{r}, 0)
	}
	if _, b := ix.Pending(); b > 64<<10 || testutil.ToFloat64(m.evictedBytes) == 0 {
		t.Errorf("%d bytes held, %v evicted by bytes; want at most 64 KiB", b, testutil.ToFloat64(m.evictedBytes))
	}
}

// TestAdmissionClockSkew: a record forwarded by a peer whose clock is an
// hour off still stands for its change: the candidate TTL runs from when
// the record reached this replica, by this replica's clock, never from
// the times the record carries.
func TestAdmissionClockSkew(t *testing.T) {
	for _, skew := range []time.Duration{time.Hour, -time.Hour} {
		clock := newFakeClock()
		ix := newAdmissionIndex(clock)
		r := admRec("alice", "update", "5", "H1")
		r.Received, r.Completed = t0.Add(skew), t0.Add(skew)
		ix.Add(SourceAdmissionPeer, []Record{r}, 0)
		c := admChange(change.Updated, "5", "6", "H1", t0)
		if a, ok := ix.match(&c, false); !ok || a.Match != change.MatchExact || a.Username() != "alice" {
			t.Errorf("a peer's clock %v off: attributed %v %+v, want alice's", skew, ok, a)
		}
	}
}
