package audit

import (
	"maps"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/fieldwatch/fieldwatch/change"
)

// The defaults of IndexOptions.
const (
	DefaultMaxEvents = 100000
	DefaultMaxBytes  = 64 << 20
	DefaultMaxAge    = 30 * time.Second
	DefaultWindow    = 2 * time.Second
	DefaultClockSkew = time.Second
)

// IndexOptions bound the Index and set how loosely it matches.
type IndexOptions struct {
	// MaxEvents is how many audit events it holds at most (default
	// 100000); past it the oldest are evicted.
	MaxEvents int
	// MaxBytes bounds the bytes its events take (default 64 MiB), counted
	// as entryBytes each whether held or matched (a matched one stays, to
	// recognise a redelivery, until it is the oldest); past it the oldest
	// are evicted.
	MaxBytes int64
	// MaxAge is how long it holds an event after it arrived (default 30s).
	MaxAge time.Duration
	// Window bounds window matching: an event fits a change when it
	// completed at most Window before or after the change was observed
	// (default 2s).
	Window time.Duration
	// ClockSkew is how far the apiserver's clock may run ahead of this
	// process's: an event whose request was received more than ClockSkew
	// after the change was observed cannot have made it (default 1s; a
	// negative value allows none).
	ClockSkew time.Duration
	// Keep, when set, says which resources to hold events of (those that
	// rules watch); others are counted as filtered and dropped.
	Keep func(group, resource string) bool
	// Clock is the time source (default the real clock).
	Clock Clock
	// Metrics receive the index's metrics (default unregistered ones).
	Metrics *Metrics

	// AdmissionTTL is how long after it arrived an admission record may
	// stand for a watched change (by the change's Time; default
	// DefaultAdmissionTTL). Records are held MaxAge, so that a change
	// the watcher queued for a while still finds its own.
	AdmissionTTL time.Duration
	// AdmissionMaxPending and AdmissionMaxBytes bound the admission
	// records held (defaults DefaultAdmissionMaxPending and
	// DefaultAdmissionMaxBytes, counted as entryBytes); past either the
	// oldest are evicted.
	AdmissionMaxPending int
	AdmissionMaxBytes   int64
	// AdmissionMetrics receive the admission records' metrics (default
	// unregistered ones).
	AdmissionMetrics *AdmissionMetrics
	// Echoes, with both an audit source and admission, makes the audit
	// event of a change that admission attributed before it came count as
	// that change's when it comes, instead of a candidate for the
	// object's next change.
	Echoes bool
}

func (o *IndexOptions) defaults() {
	if o.MaxEvents <= 0 {
		o.MaxEvents = DefaultMaxEvents
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxAge <= 0 {
		o.MaxAge = DefaultMaxAge
	}
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.ClockSkew < 0 {
		o.ClockSkew = 0
	} else if o.ClockSkew == 0 {
		o.ClockSkew = DefaultClockSkew
	}
	if o.Clock == nil {
		o.Clock = RealClock{}
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	if o.AdmissionTTL <= 0 {
		o.AdmissionTTL = DefaultAdmissionTTL
	}
	if o.AdmissionMaxPending <= 0 {
		o.AdmissionMaxPending = DefaultAdmissionMaxPending
	}
	if o.AdmissionMaxBytes <= 0 {
		o.AdmissionMaxBytes = DefaultAdmissionMaxBytes
	}
	if o.AdmissionMetrics == nil {
		o.AdmissionMetrics = NewAdmissionMetrics(nil)
	}
}

// Sink receives the audit events a source decoded. Index implements it.
type Sink interface {
	// Add takes the records (events DecodeEvent keeps) that source
	// (SourceWebhook or SourceLog) decoded, and ignored more that it
	// decoded and dropped, for the metrics.
	Add(source string, recs []Record, ignored int)
}

var _ Sink = &Index{}

// objectKey names an object; name is empty for the writes that do not name
// one (a create with generateName, deletecollection).
type objectKey struct {
	group, resource, namespace, name string
}

// entry is one held event.
type entry struct {
	rec     Record
	arrived time.Time
	// bytes is what it is counted for in Index.bytes.
	bytes int64
	// removed: consumed by a match or evicted; no longer a candidate.
	removed bool
	// sibling: another request of the same identity fitted the same change
	// when it was attributed; a later match on this one names no auditID.
	sibling bool
}

// entryOverhead is what an entry takes besides its record's strings and
// lists: itself, its slots in fifo and in its byKey bucket, its byID map
// entry, a byKey map entry of its own (an object written once) and the
// interning of its name, with the maps' own overhead (measured by
// BenchmarkIndexMemory and BenchmarkWebhookMemory: what is counted is
// more than what is taken).
const entryOverhead = int(unsafe.Sizeof(entry{})) + 256

// entryBytes is what holding rec costs at most.
func entryBytes(rec *Record) int64 { return int64(entryOverhead + rec.keptBytes()) }

func (e *entry) key() objectKey {
	return objectKey{group: e.rec.Group, resource: e.rec.Resource, namespace: e.rec.Namespace, name: e.rec.Name}
}

// multi is true for an event that can stand for several watched changes
// (a deletecollection): it is never consumed.
func (e *entry) multi() bool { return e.rec.Verb == "deletecollection" }

// Index holds recent successful writes of the audit stream, keyed by
// object, bounded by count, bytes and age, for matching watched changes.
// It is safe for concurrent use.
type Index struct {
	opts IndexOptions
	m    *Metrics

	mu    sync.Mutex
	byKey map[objectKey][]*entry
	// byID holds every event still in fifo (consumed ones too, so that a
	// redelivered event is not held again).
	byID map[string]*entry
	// fifo is the arrival order, for eviction by age and count; removed
	// entries stay until they reach its head.
	fifo []*entry
	head int
	live int
	// bytes is what fifo's entries take (entryBytes each).
	bytes int64

	// notify is told the keys that got new events (the Attributor).
	notify func(keys []objectKey)
	// strs, lists and users share equal strings, string lists (groups,
	// source IPs) and impersonated users between held events.
	strs  map[string]string
	lists map[string][]string
	users map[string]*change.UserInfo
	key   []byte // scratch for the lookups in lists and users
	// interned is the bytes strs, lists and users hold (of strings that
	// held events may no longer share).
	interned int

	// adm holds the admission records; echoes the changes admission
	// attributed whose audit event has not come (IndexOptions.Echoes).
	adm     admissionRecords
	echoes  map[objectKey][]echo
	nechoes int
}

var _ interner = &Index{}

// maxInterned bounds each of Index.strs, Index.lists and Index.users, and
// maxInternedBytes what they hold together; past either, they start over
// (sharing is lost for a while, nothing else).
const (
	maxInterned      = 16384
	maxInternedBytes = 4 << 20
)

// intern counts n more bytes held by the maps, and starts them over past
// maxInternedBytes.
func (ix *Index) intern(n int) {
	ix.interned += n
	if ix.interned > maxInternedBytes {
		clear(ix.strs)
		clear(ix.lists)
		clear(ix.users)
		ix.interned = 0
	}
}

// str returns a string equal to s that other held events may share. The
// caller holds ix.mu.
func (ix *Index) str(s string) string {
	if s == "" {
		return ""
	}
	if v, ok := ix.strs[s]; ok {
		return v
	}
	if len(ix.strs) >= maxInterned {
		clear(ix.strs)
	}
	ix.strs[s] = s
	ix.intern(stringBytes + len(s))
	return s
}

// list returns a list equal to ss that other held events may share. The
// caller holds ix.mu.
func (ix *Index) list(ss []string) []string {
	if len(ss) == 0 {
		return nil
	}
	ix.key = appendJoined(ix.key[:0], ss...)
	if v, ok := ix.lists[string(ix.key)]; ok {
		return v
	}
	if len(ix.lists) >= maxInterned {
		clear(ix.lists)
	}
	v := make([]string, len(ss))
	for i, s := range ss {
		v[i] = ix.str(s)
	}
	ix.lists[string(ix.key)] = v
	ix.intern(len(ix.key) + stringBytes*len(v))
	return v
}

// user returns a user equal to u that other held events may share. The
// caller holds ix.mu.
func (ix *Index) user(u *change.UserInfo) *change.UserInfo {
	ix.key = appendJoined(appendJoined(ix.key[:0], u.Username, u.UID), u.Groups...)
	if len(u.Extra) > 0 {
		keys := slices.Sorted(maps.Keys(u.Extra))
		for _, k := range keys {
			ix.key = append(appendJoined(append(appendJoined(ix.key, k), 1), u.Extra[k]...), 1)
		}
	}
	if v, ok := ix.users[string(ix.key)]; ok {
		return v
	}
	if len(ix.users) >= maxInterned {
		clear(ix.users)
	}
	k := string(ix.key)
	v := &change.UserInfo{Username: ix.str(u.Username), UID: ix.str(u.UID), Groups: ix.list(u.Groups)}
	if len(u.Extra) > 0 {
		v.Extra = make(map[string][]string, len(u.Extra))
		for ek, vs := range u.Extra {
			v.Extra[ix.str(ek)] = ix.list(vs)
		}
	}
	ix.users[k] = v
	ix.intern(len(k) + userBytes)
	return v
}

// appendJoined appends ss to b, each followed by a NUL byte.
func appendJoined(b []byte, ss ...string) []byte {
	for _, s := range ss {
		b = append(b, s...)
		b = append(b, 0)
	}
	return b
}

// NewIndex returns an empty index.
func NewIndex(opts IndexOptions) *Index {
	opts.defaults()
	return &Index{
		opts:   opts,
		m:      opts.Metrics,
		byKey:  map[objectKey][]*entry{},
		byID:   map[string]*entry{},
		strs:   map[string]string{},
		lists:  map[string][]string{},
		users:  map[string]*change.UserInfo{},
		adm:    admissionRecords{byUID: map[string][]*entry{}, byReq: map[string]*entry{}},
		echoes: map[objectKey][]echo{},
	}
}

// Len returns how many events the index holds for matching.
func (ix *Index) Len() int {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.live
}

// Add holds the successful writes of recs; failures, resources Keep
// rejects, auditIDs already held and records that keep more than
// MaxEventBytes are counted and dropped. ignored is the number of events
// the source decoded and dropped itself.
func (ix *Index) Add(source string, recs []Record, ignored int) {
	if ignored > 0 {
		ix.m.ignoredBy[source].Add(float64(ignored))
	}
	if len(recs) == 0 {
		return
	}
	if source == SourceAdmission || source == SourceAdmissionPeer {
		ix.addAdmission(source, recs)
		return
	}
	var keys []objectKey
	ix.mu.Lock()
	now := ix.opts.Clock.Now()
	ix.expireLocked(now)
	var indexed, failed, filtered, dup, tooLarge int
	for i := range recs {
		rec := &recs[i]
		switch {
		case !rec.Succeeded():
			failed++
			continue
		case rec.keptBytes() > MaxEventBytes:
			tooLarge++
			continue
		case ix.opts.Keep != nil && !ix.opts.Keep(rec.Group, rec.Resource):
			filtered++
			continue
		case rec.AuditID != "" && ix.byID[rec.AuditID] != nil:
			dup++
			continue
		case rec.Admission:
			failed++ // an admission record never comes from an audit source
			continue
		case ix.echoLocked(rec):
			indexed++ // the audit event of a change admission attributed
			continue
		}
		rec.compact(ix)
		e := &entry{rec: *rec, arrived: now, bytes: entryBytes(rec)}
		key := e.key()
		ix.byKey[key] = append(ix.byKey[key], e)
		ix.fifo = append(ix.fifo, e)
		ix.bytes += e.bytes
		if rec.AuditID != "" {
			ix.byID[rec.AuditID] = e
		}
		ix.live++
		indexed++
		if len(keys) == 0 || keys[len(keys)-1] != key {
			keys = append(keys, key)
		}
		for ix.live > ix.opts.MaxEvents {
			ix.evictOldestLocked()
		}
		for ix.bytes > ix.opts.MaxBytes && ix.head < len(ix.fifo) {
			if e := ix.popLocked(); !e.removed {
				ix.removeLocked(e)
				ix.m.evictedBytes.Inc()
			}
		}
	}
	ix.compactLocked()
	ix.setGaugesLocked()
	notify := ix.notify
	ix.mu.Unlock()

	ix.m.indexedBy[source].Add(float64(indexed))
	if failed > 0 {
		ix.m.failedBy[source].Add(float64(failed))
	}
	if filtered > 0 {
		ix.m.filteredBy[source].Add(float64(filtered))
	}
	if dup > 0 {
		ix.m.duplicateBy[source].Add(float64(dup))
	}
	if tooLarge > 0 {
		ix.m.tooLargeBy[source].Add(float64(tooLarge))
	}
	if notify != nil && len(keys) > 0 {
		notify(keys)
	}
}

// addAdmission holds recs, admission records of source, and tells the
// Attributor which objects got some.
func (ix *Index) addAdmission(source string, recs []Record) {
	ix.mu.Lock()
	now := ix.opts.Clock.Now()
	ix.expireLocked(now)
	keys := ix.addAdmissionLocked(source, recs, now, nil)
	notify := ix.notify
	ix.mu.Unlock()
	if notify != nil && len(keys) > 0 {
		notify(keys)
	}
}

// expire evicts the events older than MaxAge now (Add and every match do
// it too).
func (ix *Index) expire() {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.expireLocked(ix.opts.Clock.Now())
	ix.compactLocked()
	ix.setGaugesLocked()
}

// Bytes returns what the index's events take (see IndexOptions.MaxBytes).
func (ix *Index) Bytes() int64 {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.bytes
}

func (ix *Index) setGaugesLocked() {
	ix.m.held.Set(float64(ix.live))
	ix.m.heldBytes.Set(float64(ix.bytes))
}

func (ix *Index) expireLocked(now time.Time) {
	ix.expireAdmissionLocked(now)
	cutoff := now.Add(-ix.opts.MaxAge)
	for ix.head < len(ix.fifo) && ix.fifo[ix.head].arrived.Before(cutoff) {
		e := ix.popLocked()
		if !e.removed {
			ix.removeLocked(e)
			ix.m.evictedAge.Inc()
		}
	}
}

func (ix *Index) evictOldestLocked() {
	for ix.head < len(ix.fifo) {
		e := ix.popLocked()
		if !e.removed {
			ix.removeLocked(e)
			ix.m.evictedCount.Inc()
			return
		}
	}
}

// popLocked takes the oldest entry off fifo and forgets its auditID.
func (ix *Index) popLocked() *entry {
	e := ix.fifo[ix.head]
	ix.fifo[ix.head] = nil
	ix.head++
	ix.bytes -= e.bytes
	if e.rec.AuditID != "" && ix.byID[e.rec.AuditID] == e {
		delete(ix.byID, e.rec.AuditID)
	}
	return e
}

// compactLocked moves fifo's live part to the front once its dead head is
// as long as the rest, so that fifo's memory stays proportional to what it
// holds (amortised linear).
func (ix *Index) compactLocked() {
	if ix.head == 0 || ix.head < len(ix.fifo)-ix.head {
		return
	}
	n := copy(ix.fifo, ix.fifo[ix.head:])
	clear(ix.fifo[n:])
	ix.fifo = ix.fifo[:n]
	ix.head = 0
}

// removeLocked takes a live entry out of its bucket: it is no longer a
// candidate.
func (ix *Index) removeLocked(e *entry) {
	e.removed = true
	ix.live--
	key := e.key()
	b := ix.byKey[key]
	if i := slices.Index(b, e); i >= 0 {
		b = slices.Delete(b, i, i+1)
	}
	if len(b) == 0 {
		delete(ix.byKey, key)
	} else {
		ix.byKey[key] = b
	}
}
