package audit

import (
	"slices"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
)

// The defaults of IndexOptions' admission bounds.
const (
	// DefaultAdmissionTTL is how long after it arrived an admission record
	// may stand for a watched change.
	DefaultAdmissionTTL = 5 * time.Second
	// DefaultAdmissionMaxPending and DefaultAdmissionMaxBytes bound the
	// admission records held.
	DefaultAdmissionMaxPending = 10000
	DefaultAdmissionMaxBytes   = 16 << 20
)

// admissionRecords are the admission records an Index holds: by object
// uid, for matching, and in arrival order, for eviction (by age: the
// Index's MaxAge; by count and bytes: AdmissionMaxPending and
// AdmissionMaxBytes). A matched record leaves both.
type admissionRecords struct {
	byUID map[string][]*entry
	// byReq holds the request uids of the records in fifo, so that a
	// review forwarded twice is held once.
	byReq map[string]*entry
	fifo  []*entry
	head  int
	live  int
	bytes int64
}

// echo is a change admission attributed before the audit stream's event
// of it came (with both sources): that event, when it comes, is the
// same write's, not a candidate for the object's next change.
type echo struct {
	c        Change
	username string
	at       time.Time
}

// maxEchoes bounds the echoes awaited; past it they are forgotten.
const maxEchoes = 10000

// addAdmissionLocked holds recs, admission records of source, and returns
// the objects that got some. The caller holds ix.mu.
func (ix *Index) addAdmissionLocked(source string, recs []Record, now time.Time, keys []objectKey) []objectKey {
	ar := &ix.adm
	am := ix.opts.AdmissionMetrics
	for i := range recs {
		rec := &recs[i]
		if !rec.Admission || rec.ObjectUID == "" {
			continue
		}
		if ar.byReq[rec.RequestUID] != nil {
			am.review(reviewDuplicate)
			continue
		}
		rec.compact(ix)
		e := &entry{rec: *rec, arrived: now, bytes: entryBytes(rec)}
		ar.byUID[rec.ObjectUID] = append(ar.byUID[rec.ObjectUID], e)
		ar.byReq[rec.RequestUID] = e
		ar.fifo = append(ar.fifo, e)
		ar.bytes += e.bytes
		ar.live++
		if source == SourceAdmissionPeer {
			am.review(reviewPeer)
		}
		if key := e.key(); len(keys) == 0 || keys[len(keys)-1] != key {
			keys = append(keys, key)
		}
		for ar.live > ix.opts.AdmissionMaxPending || ar.bytes > ix.opts.AdmissionMaxBytes {
			if !ix.evictAdmissionLocked(ar.live > ix.opts.AdmissionMaxPending) {
				break
			}
		}
	}
	ix.compactAdmissionLocked()
	ix.setAdmissionGaugesLocked()
	return keys
}

// evictAdmissionLocked removes the oldest live record, counted as evicted
// by count or by bytes; false when none is left.
func (ix *Index) evictAdmissionLocked(byCount bool) bool {
	ar := &ix.adm
	for ar.head < len(ar.fifo) {
		e := ix.popAdmissionLocked()
		if e.removed {
			continue
		}
		ix.removeAdmissionLocked(e)
		if byCount {
			ix.opts.AdmissionMetrics.evictedCount.Inc()
		} else {
			ix.opts.AdmissionMetrics.evictedBytes.Inc()
		}
		return true
	}
	return false
}

// popAdmissionLocked takes the oldest record off the fifo.
func (ix *Index) popAdmissionLocked() *entry {
	ar := &ix.adm
	e := ar.fifo[ar.head]
	ar.fifo[ar.head] = nil
	ar.head++
	ar.bytes -= e.bytes
	if ar.byReq[e.rec.RequestUID] == e {
		delete(ar.byReq, e.rec.RequestUID)
	}
	return e
}

// removeAdmissionLocked takes a live record out of byUID: it no longer
// stands for any change. Its bytes stay counted until the fifo pops it.
func (ix *Index) removeAdmissionLocked(e *entry) {
	ar := &ix.adm
	e.removed = true
	ar.live--
	uid := e.rec.ObjectUID
	b := slices.DeleteFunc(ar.byUID[uid], func(o *entry) bool { return o == e })
	if len(b) == 0 {
		delete(ar.byUID, uid)
	} else {
		ar.byUID[uid] = b
	}
}

// expireAdmissionLocked evicts the records that arrived more than MaxAge
// before now: no change watched since can be theirs any more.
func (ix *Index) expireAdmissionLocked(now time.Time) {
	ar := &ix.adm
	cutoff := now.Add(-ix.opts.MaxAge)
	for ar.head < len(ar.fifo) && ar.fifo[ar.head].arrived.Before(cutoff) {
		if e := ix.popAdmissionLocked(); !e.removed {
			ix.removeAdmissionLocked(e)
			ix.opts.AdmissionMetrics.evictedAge.Inc()
		}
	}
}

// compactAdmissionLocked keeps the fifo's memory proportional to what it
// holds (as compactLocked).
func (ix *Index) compactAdmissionLocked() {
	ar := &ix.adm
	if ar.head == 0 || ar.head < len(ar.fifo)-ar.head {
		return
	}
	n := copy(ar.fifo, ar.fifo[ar.head:])
	clear(ar.fifo[n:])
	ar.fifo = ar.fifo[:n]
	ar.head = 0
}

func (ix *Index) setAdmissionGaugesLocked() {
	ix.opts.AdmissionMetrics.pending.Set(float64(ix.adm.live))
	ix.opts.AdmissionMetrics.bytes.Set(float64(ix.adm.bytes))
}

// Pending returns how many admission records the index holds for
// matching, and the bytes they take at most.
func (ix *Index) Pending() (n int, bytes int64) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.expireAdmissionLocked(ix.opts.Clock.Now())
	return ix.adm.live, ix.adm.bytes
}

// admissionFits returns the admission records that may have made c, by
// what the request and the change both name exactly (the generic
// registry runs validating admission once the object is as it will be
// stored, docs/attribution.md):
//
//   - a creation: a create of the object's uid (generated before
//     validating admission; a create that failed later has a uid no
//     object ever gets);
//   - an update: an update or patch of the object's uid whose oldObject
//     has the resourceVersion the change applied to and, when both sides
//     have one, the same content hash (racing writers of one version are
//     told apart by what they store; a request another webhook denied,
//     that lost a race or that changed nothing stores nothing that fits);
//     for an update that set metadata.deletionTimestamp, a delete of that
//     uid and resourceVersion;
//   - a deletion: a delete of the object's uid whose oldObject has the
//     resourceVersion the object had before (when the watch tells it),
//     and for a terminating object the update or patch of that version
//     that removed its last finalizer.
//
// A record stands only for changes watched at most AdmissionTTL after it
// arrived.
func (ix *Index) admissionFits(c *Change) []*entry {
	if c.UID == "" {
		return nil
	}
	var out []*entry
	for _, e := range ix.adm.byUID[c.UID] {
		if c.Time.Sub(e.arrived) > ix.opts.AdmissionTTL || !admissionFit(&e.rec, c) {
			continue
		}
		out = append(out, e)
	}
	return out
}

// admissionFit reports whether the admission record r, of c's object,
// fits c (see admissionFits).
func admissionFit(r *Record, c *Change) bool {
	switch c.Type {
	case change.Created:
		return r.Verb == "create"
	case change.Updated:
		if c.OldResourceVersion == "" || r.OldResourceVersion != c.OldResourceVersion {
			return false
		}
		if c.DeletionStarted {
			return r.Verb == "delete"
		}
		if r.Verb != "update" && r.Verb != "patch" {
			return false
		}
		if c.SubresourceKnown && r.Subresource != c.Subresource {
			return false
		}
		return r.ContentHash == "" || c.ContentHash == "" || r.ContentHash == c.ContentHash
	case change.Deleted:
		prev := c.DeletedResourceVersion
		switch r.Verb {
		case "delete":
			return prev == "" || r.OldResourceVersion == prev
		case "update", "patch":
			return c.WasTerminating && r.Subresource == "" && prev != "" && r.OldResourceVersion == prev
		}
	}
	return false
}

// consumeAdmissionLocked takes out of the index the records a change of
// c's kind ends: those of the version c applied to (whoever's: one write
// from a version succeeds, the others never will), every one of the
// object for a deletion, its creates for a creation.
func (ix *Index) consumeAdmissionLocked(c *Change) {
	if c.UID == "" || c.Listed && c.Type != change.Deleted {
		return
	}
	for _, e := range slices.Clone(ix.adm.byUID[c.UID]) {
		r := &e.rec
		var done bool
		switch c.Type {
		case change.Created:
			done = r.Verb == "create"
		case change.Updated:
			done = c.OldResourceVersion != "" && r.OldResourceVersion == c.OldResourceVersion
		case change.Deleted:
			done = true
		}
		if done {
			ix.removeAdmissionLocked(e)
		}
	}
	ix.setAdmissionGaugesLocked()
}

// matchAdmissionLocked attributes c from the admission records that fit
// it, adm (at least one), and the audit events that fit it now (audit,
// exact and strong fits, with an audit source): the identities they name
// are the answer when there is one, and the change is ambiguous between
// them when there are several (a forged review, a denied request with the
// same effect, two sources that disagree): never a guess. The records
// c's kind ends are consumed, and of a single answer the audit event
// that agreed (or, when none is held yet, the event is awaited as an
// echo). A single answer carries the CRD guard's override of a record
// that has one (Record.Guard); an ambiguous one never does.
func (ix *Index) matchAdmissionLocked(c *Change, adm, audit []*entry) change.Attribution {
	names := make([]string, 0, len(adm)+len(audit))
	for _, e := range adm {
		names = append(names, e.rec.Username())
	}
	for _, e := range audit {
		names = append(names, e.rec.Username())
	}
	slices.Sort(names)
	names = slices.Compact(names)
	ix.consumeAdmissionLocked(c)
	am := ix.opts.AdmissionMetrics
	if len(names) > 1 {
		am.matchAmbiguous.Inc()
		source := change.SourceAdmission
		if len(audit) > 0 {
			source = change.SourceBoth
		}
		return change.Attribution{Match: change.MatchAmbiguous, Source: source, Candidates: names}
	}
	am.matchExact.Inc()
	a := attribution(change.MatchExact, adm[0], adm)
	a.Source = change.SourceAdmission
	for _, e := range adm {
		if e.rec.Guard != nil {
			a.Guard = e.rec.Guard // the CRD guard's annotation let this write through
			break
		}
	}
	a.UserAgent, a.SourceIPs = "", nil
	if len(audit) > 0 {
		// The audit stream agrees: its event is this write's.
		best := audit[0]
		for _, e := range audit[1:] {
			if ix.exact(e, c) || closer(e, best, c.Time) && !ix.exact(best, c) {
				best = e
			}
		}
		ix.consumeLocked(best)
		a.AuditID, a.UserAgent, a.SourceIPs = best.rec.AuditID, best.rec.UserAgent, best.rec.SourceIPs
		if len(audit) > 1 || best.sibling {
			a.AuditID = ""
		}
		return a
	}
	if ix.opts.Echoes && !c.Listed {
		ix.awaitEchoLocked(c, names[0])
	}
	return a
}

// awaitEchoLocked remembers that c was attributed to username before the
// audit stream's event of it came.
func (ix *Index) awaitEchoLocked(c *Change, username string) {
	if ix.nechoes >= maxEchoes {
		clear(ix.echoes)
		ix.nechoes = 0
	}
	k := c.key()
	if _, ok := ix.echoes[k]; !ok {
		ix.nechoes++
	}
	ix.echoes[k] = append(ix.echoes[k], echo{c: *c, username: username, at: ix.opts.Clock.Now()})
}

// echoLocked reports whether rec, an audit event about to be held, is the
// echo of a change admission attributed to its identity: then it is
// consumed with the echo and not held. An event that fits such a change
// but names another identity is counted as a conflict and held.
func (ix *Index) echoLocked(rec *Record) bool {
	if len(ix.echoes) == 0 {
		return false
	}
	k := objectKey{group: rec.Group, resource: rec.Resource, namespace: rec.Namespace, name: rec.Name}
	cutoff := ix.opts.Clock.Now().Add(-ix.opts.MaxAge)
	es := slices.DeleteFunc(ix.echoes[k], func(e echo) bool { return e.at.Before(cutoff) })
	if len(es) == 0 {
		if _, ok := ix.echoes[k]; ok {
			delete(ix.echoes, k)
			ix.nechoes--
		}
		return false
	}
	ix.echoes[k] = es
	probe := &entry{rec: *rec}
	conflict := false
	for i := range es {
		c := &es[i].c
		if !ix.exact(probe, c) && ix.fits(probe, c) == noFit {
			continue
		}
		if rec.Username() != es[i].username {
			conflict = true
			continue
		}
		es = slices.Delete(es, i, i+1)
		if len(es) == 0 {
			delete(ix.echoes, k)
			ix.nechoes--
		} else {
			ix.echoes[k] = es
		}
		ix.opts.AdmissionMetrics.echoConfirmed.Inc()
		return true
	}
	if conflict {
		ix.opts.AdmissionMetrics.echoConflict.Inc()
	}
	return false
}
