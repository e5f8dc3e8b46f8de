package audit

import (
	"slices"
	"strings"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
)

// fit says how well a request fits a change.
type fit uint8

const (
	noFit fit = iota
	// weakFit: a verb that makes such a change only sometimes (a patch that
	// creates by server-side apply, an update that removes the last
	// finalizer, a binding).
	weakFit
	// strongFit: the verb that makes such a change (create for a creation).
	strongFit
)

// match attributes c from the events held now, without waiting: ok is
// false when no event fits yet (the caller may wait for one, see
// Attributor). Strong fits are preferred; when only weak ones fit, the
// change is decided only when final (its wait is over), since the request
// that made it may still be on its way and the weak candidate be the next
// change's. So is a change whose every candidate was already held when it
// was observed: the apiserver sends a request's event after the request,
// so an event that came before the change may be another request's (a
// no-op write, an event posted ahead of the apiserver's), and the
// change's own, still on its way, must make it ambiguous (or exact), not
// lose to it. An exact match decides at once: it names the change's
// version. An exact or window match consumes the event it used, so that
// the next change of the object is matched with the rest.
func (ix *Index) match(c *Change, final bool) (a change.Attribution, ok bool) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.matchLocked(c, final)
}

func (ix *Index) matchLocked(c *Change, final bool) (change.Attribution, bool) {
	ix.expireLocked(ix.opts.Clock.Now())
	adm := ix.admissionFits(c)
	var strong, weak, exact []*entry
	key := c.key()
	for range 2 {
		for _, e := range ix.byKey[key] {
			if ix.exact(e, c) {
				if len(adm) == 0 {
					ix.consumeLocked(e)
					a := attribution(change.MatchExact, e, []*entry{e})
					a.Source = change.SourceAudit
					return a, true
				}
				exact = append(exact, e)
				continue
			}
			switch ix.fits(e, c) {
			case strongFit:
				strong = append(strong, e)
			case weakFit:
				weak = append(weak, e)
			}
		}
		// Then the writes that name no object: creates with generateName,
		// deletecollection.
		if c.Name == "" || c.Type == change.Updated && !c.DeletionStarted {
			break
		}
		key.name = ""
	}
	if len(adm) > 0 {
		// Admission names the change exactly: it decides at once, with the
		// audit events that fit it now (an exact one, else the strong
		// fits).
		audit := exact
		if len(audit) == 0 {
			audit = strong
		}
		return ix.matchAdmissionLocked(c, adm, audit), true
	}
	cands := strong
	if len(cands) == 0 {
		if !final {
			return change.Attribution{}, false
		}
		cands = weak
	}
	switch {
	case len(cands) == 0:
		return change.Attribution{}, false
	case !final && allBefore(cands, c.Time):
		return change.Attribution{}, false
	case len(cands) == 1:
		e := cands[0]
		if !e.multi() {
			ix.consumeLocked(e)
		}
		a := attribution(change.MatchWindow, e, cands)
		a.Source = change.SourceAudit
		return a, true
	}
	id := cands[0].rec.identity()
	for _, e := range cands[1:] {
		if e.rec.identity() != id {
			return ambiguous(cands), true
		}
	}
	// Several requests of one identity: the user is certain. The earliest
	// (in completion order) is taken as this change's; the others are
	// marked, so that none of them later names an auditID either.
	first := -1
	for i, e := range cands {
		if !e.multi() && (first < 0 || e.rec.Completed.Before(cands[first].rec.Completed)) {
			first = i
		}
	}
	a := attribution(change.MatchWindow, cands[max(first, 0)], cands)
	a.Source = change.SourceAudit
	for i, e := range cands {
		if i == first {
			ix.consumeLocked(e)
		} else {
			e.sibling = true
		}
	}
	return a, true
}

// allBefore reports whether every candidate arrived before t.
func allBefore(cands []*entry, t time.Time) bool {
	for _, e := range cands {
		if !e.arrived.Before(t) {
			return false
		}
	}
	return true
}

// exact reports whether e's response names c's object version: its uid
// and resourceVersion, or, for a deletion, the uid in the Status of the
// delete that removed it.
func (ix *Index) exact(e *entry, c *Change) bool {
	r := &e.rec
	if r.ResponseUID == "" || r.ResponseUID != c.UID {
		return false
	}
	if r.ResponseResourceVersion != "" {
		return r.ResponseResourceVersion == c.ResourceVersion
	}
	return c.Type == change.Deleted && r.Verb == "delete"
}

// fits reports whether e may have made c: a verb that fits its kind on the
// right subresource and name, at a time that fits, and no uid or
// resourceVersion that names another object or version.
func (ix *Index) fits(e *entry, c *Change) fit {
	r := &e.rec
	if c.UID != "" {
		if r.ResponseUID != "" && r.ResponseUID != c.UID {
			return noFit // another object of the same name
		}
		if r.ResponseUID != "" && r.ResponseResourceVersion != "" && c.ResourceVersion != "" {
			return noFit // it made another version (or changed nothing): not exact
		}
		if r.ResponseUID != "" && r.ResponseResourceVersion == "" && c.Type != change.Deleted {
			return noFit // the Status of a delete that removed the object
		}
		if c.Type == change.Updated && r.RefUID != "" && r.RefUID != c.UID {
			return noFit
		}
	}
	if c.Type == change.Updated && r.RefResourceVersion != "" && c.OldResourceVersion != "" && r.RefResourceVersion != c.OldResourceVersion {
		return noFit // it updated another version (or nothing: a no-op)
	}
	if r.Received.After(c.Time.Add(ix.opts.ClockSkew)) {
		return noFit // received after the change was seen
	}
	if d := r.Completed.Sub(c.Time); d > ix.opts.Window || d < -ix.opts.Window {
		return noFit
	}
	if !nameFits(r, c) {
		return noFit
	}
	return verbFits(r, c)
}

// verbFits says how well a request of r's verb and subresource fits a
// change of c's kind.
func verbFits(r *Record, c *Change) fit {
	switch c.Type {
	case change.Created:
		if r.Subresource != "" {
			return noFit
		}
		switch r.Verb {
		case "create":
			return strongFit
		case "update", "patch": // create-on-update (PUT), server-side apply
			return weakFit
		}
	case change.Updated:
		if c.DeletionStarted {
			if isDelete(r) || isEviction(r) {
				return strongFit
			}
			return noFit
		}
		if c.SubresourceKnown && r.Subresource != c.Subresource {
			return noFit
		}
		switch r.Verb {
		case "update", "patch":
			return strongFit
		case "create": // the scheduler's pods/binding
			if r.Subresource == "binding" {
				return weakFit
			}
		}
	case change.Deleted:
		if isDelete(r) || isEviction(r) {
			return strongFit
		}
		// the update that removed the last finalizer of a terminating object
		if c.WasTerminating && r.Subresource == "" && (r.Verb == "update" || r.Verb == "patch") {
			return weakFit
		}
	}
	return noFit
}

func isDelete(r *Record) bool {
	return r.Subresource == "" && (r.Verb == "delete" || r.Verb == "deletecollection")
}

func isEviction(r *Record) bool {
	return r.Verb == "create" && r.Subresource == "eviction"
}

// nameFits reports whether r names c's object. A request that names none
// fits when it can have made it: a create with generateName (whose prefix
// c's name has, when the level shows it) or a deletecollection.
func nameFits(r *Record, c *Change) bool {
	if r.Name == c.Name {
		return true
	}
	if r.Name != "" {
		return false
	}
	switch r.Verb {
	case "create":
		return c.Type == change.Created && r.Subresource == "" && strings.HasPrefix(c.Name, r.GenerateName)
	case "deletecollection":
		return c.Type == change.Deleted || c.DeletionStarted
	}
	return false
}

func (ix *Index) consumeLocked(e *entry) {
	if e.multi() || e.removed {
		return
	}
	ix.removeLocked(e)
	ix.setGaugesLocked()
}

// attribution describes e as the match for a change that all of cands fit
// (e among them): fields that differ between the candidates are left out.
func attribution(m change.Match, e *entry, cands []*entry) change.Attribution {
	r := &e.rec
	u := r.User
	a := change.Attribution{Match: m, User: &u, Verb: r.Verb, UserAgent: r.UserAgent, SourceIPs: r.SourceIPs}
	if r.ImpersonatedUser != nil {
		iu := *r.ImpersonatedUser
		a.ImpersonatedUser = &iu
	}
	if len(cands) == 1 && !e.sibling {
		a.AuditID = r.AuditID
	}
	for _, o := range cands {
		if o.rec.Verb != a.Verb {
			a.Verb = ""
		}
		if o.rec.UserAgent != a.UserAgent {
			a.UserAgent = ""
		}
		if !slices.Equal(o.rec.SourceIPs, a.SourceIPs) {
			a.SourceIPs = nil
		}
	}
	return a
}

func ambiguous(cands []*entry) change.Attribution {
	names := make([]string, 0, len(cands))
	for _, e := range cands {
		names = append(names, e.rec.Username())
	}
	slices.Sort(names)
	return change.Attribution{Match: change.MatchAmbiguous, Source: change.SourceAudit, Candidates: slices.Compact(names)}
}

// Consume takes out of the index the audit event that most plausibly made
// c, without attributing c: a standby calls it for each change its leader
// confirmed (delivered), so that, when it takes over, the events of the
// changes the leader matched are no candidates for the next changes of
// their objects, as on the leader. The event is c's exact one (its
// resourceVersion), or else, of the events that fit it strongly, the last
// to complete by the time c was watched (the write that made it
// completes just before the watch sees it), or the first after. A change
// learned from a list consumes nothing: it may stand for several writes.
func (ix *Index) Consume(c *Change) {
	if c.Listed {
		return
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.expireLocked(ix.opts.Clock.Now())
	ix.consumeAdmissionLocked(c)
	var best *entry
	key := c.key()
	for range 2 {
		for _, e := range ix.byKey[key] {
			if ix.exact(e, c) {
				ix.consumeLocked(e)
				return
			}
			if ix.fits(e, c) == strongFit && closer(e, best, c.Time) {
				best = e
			}
		}
		if best != nil || c.Name == "" || c.Type == change.Updated && !c.DeletionStarted {
			break
		}
		key.name = "" // creates with generateName, deletecollection
	}
	if best != nil {
		ix.consumeLocked(best)
	}
}

// closer reports whether e completed more plausibly for a change watched
// at t than best (nil: any e is): by t, and the later the better; after
// t, the sooner the better.
func closer(e, best *entry, t time.Time) bool {
	if best == nil {
		return true
	}
	eBy, bestBy := !e.rec.Completed.After(t), !best.rec.Completed.After(t)
	switch {
	case eBy && bestBy:
		return e.rec.Completed.After(best.rec.Completed)
	case eBy != bestBy:
		return eBy
	}
	return e.rec.Completed.Before(best.rec.Completed)
}
