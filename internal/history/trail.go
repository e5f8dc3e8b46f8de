package history

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// LinkKind says what a link of the trail records.
type LinkKind string

const (
	// LinkStart opens a chain; its body says how many entries the store
	// held then, outside the chain.
	LinkStart LinkKind = "start"
	// LinkEntry records an entry written: its body is the SHA-256 of the
	// entry's canonical encoding (EntryHash).
	LinkEntry LinkKind = "entry"
	// LinkGap records payloads that were not kept (GapBody).
	LinkGap LinkKind = "gap"
	// LinkCheckpoint seals the links before it with a signature
	// (CheckpointBody, SignedMessage).
	LinkCheckpoint LinkKind = "checkpoint"
	// LinkTrim records that the bounds removed entries (TrimBody).
	LinkTrim LinkKind = "trim"
)

// HashSize is the size of a link's and an entry's hash.
const HashSize = sha256.Size

// Link is one record of a chain: the trail of a store is one chain per
// writer (Chain), each a sequence of links numbered from 1 whose Hash
// commits to every field below but Key and Sig, and to the previous
// link's Hash (Prev; zeros for the first). docs/trail.md defines the
// encoding. A store keeps of an entry's link its position, hash, key
// and time: the rest is the entry's row (fromEntry), and Prev the hash
// of the link before.
type Link struct {
	Chain string
	Pos   int64
	Kind  LinkKind
	// Ref is the entry's id (LinkEntry), "" otherwise.
	Ref string
	// Time is the entry's time (LinkEntry), zero otherwise: what the
	// bounds remove entries by.
	Time time.Time
	// At is when the link was written: an entry's Recorded.
	At time.Time
	// Body is the entry's hash (LinkEntry) or a JSON object.
	Body []byte
	Prev []byte
	Hash []byte
	// Sig is a checkpoint's Ed25519 signature of SignedMessage(Hash).
	Sig []byte
	// Key is the store's key (Entry.Seq) of the entry, not hashed: it
	// finds the entry's row.
	Key int64
}

// Record is a link to append that is not an entry's.
type Record struct {
	Kind LinkKind
	Body []byte
	// Sign, when set, signs the link's hash (checkpoints).
	Sign func(hash []byte) []byte
}

// GapBody is the body of a LinkGap: what was not kept.
type GapBody struct {
	// Count is how many payloads were not kept.
	Count int64 `json:"count"`
	// From and To are the range of the payloads' times (when they were
	// recorded, for those never parsed).
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// IDs are the first of their ids (at most MaxGapIDs).
	IDs []string `json:"ids,omitempty"`
	// Reasons count them by why: queueFull, stopped, storeFailed,
	// invalid, behind.
	Reasons map[string]int64 `json:"reasons"`
}

// MaxGapIDs is how many ids a gap record names at most.
const MaxGapIDs = 100

// CheckpointBody is the body of a LinkCheckpoint.
type CheckpointBody struct {
	// Cluster is --cluster-name.
	Cluster string `json:"cluster"`
	// Key is the signing key's public key.
	Key []byte `json:"key"`
}

// TrimBody is the body of a LinkTrim: every entry whose time is at or
// before Horizon (microseconds) may have been removed by the bounds, and
// the chain's links before position LinksFrom (when not zero) were
// removed with them: the link at LinksFrom is kept, its hash the anchor
// of the links after it.
type TrimBody struct {
	Horizon   int64 `json:"horizon"`
	Removed   int64 `json:"removed"`
	LinksFrom int64 `json:"linksFrom,omitempty"`
}

// StartBody is the body of a LinkStart.
type StartBody struct {
	// Before is how many entries the store held when the chain started:
	// they are outside it.
	Before int64 `json:"before"`
}

// trailDomain and checkpointDomain set the trail's hashes and
// signatures apart from any other use of the same bytes.
const (
	entryDomain      = "fieldwatch-trail-v1 entry\n"
	clusterDomain    = "fieldwatch-trail-v1 cluster entry\n"
	linkDomain       = "fieldwatch-trail-v1 link\n"
	checkpointDomain = "fieldwatch-trail-v1 checkpoint\n"
)

// appendField appends b with its length as 4 bytes big-endian.
func appendField(dst []byte, b string) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(b)))
	return append(dst, b...)
}

func appendInt(dst []byte, v int64) []byte { return binary.BigEndian.AppendUint64(dst, uint64(v)) }

// micros is t in microseconds since the epoch, 0 for the zero time.
func micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

// EntryEncoding appends the canonical encoding of e to dst: the columns
// a store keeps, in a fixed order, each string and the payload after its
// length (docs/trail.md).
func EntryEncoding(dst []byte, e *Entry) []byte {
	return append(entryHead(dst, e), e.Payload...)
}

// entryHead is EntryEncoding up to the payload's bytes.
// An entry with a cluster starts with clusterDomain and has the cluster
// after the source; one without is encoded as before clusters were kept,
// so that the entries written then verify as they did.
func entryHead(dst []byte, e *Entry) []byte {
	if e.Cluster == "" {
		dst = append(dst, entryDomain...)
	} else {
		dst = append(dst, clusterDomain...)
	}
	dst = appendField(dst, e.ID)
	dst = appendInt(dst, micros(e.Time))
	dst = appendInt(dst, micros(e.Recorded))
	for _, s := range [...]string{e.Rule, string(e.Type), e.Group, e.Resource, e.Namespace, e.Name, e.UID, e.User, e.Impersonated, string(e.Source)} {
		dst = appendField(dst, s)
	}
	if e.Cluster != "" {
		dst = appendField(dst, e.Cluster)
	}
	return binary.BigEndian.AppendUint32(dst, uint32(len(e.Payload)))
}

// EntryHash is the SHA-256 of e's canonical encoding.
func EntryHash(e *Entry) []byte {
	var buf [512]byte
	h := sha256.New()
	h.Write(entryHead(buf[:0], e))
	h.Write(e.Payload)
	return h.Sum(nil)
}

// LinkHash is the hash of l: SHA-256 of the previous hash and l's
// fields but Key and Sig (docs/trail.md).
func LinkHash(l *Link) []byte {
	b := make([]byte, 0, 128+len(l.Chain)+len(l.Ref)+len(l.Body))
	b = append(b, linkDomain...)
	b = append(b, l.Prev...)
	b = appendField(b, l.Chain)
	b = appendInt(b, l.Pos)
	b = appendField(b, string(l.Kind))
	b = appendField(b, l.Ref)
	b = appendInt(b, micros(l.Time))
	b = appendInt(b, micros(l.At))
	b = appendField(b, string(l.Body))
	sum := sha256.Sum256(b)
	return sum[:]
}

// SignedMessage is what a checkpoint's signature signs: its link's hash,
// which commits to its position, the hash of the link before, its time
// and its body (the cluster's name, the key).
func SignedMessage(hash []byte) []byte {
	return append([]byte(checkpointDomain), hash...)
}

// Trail is what a store that keeps the trail does besides Store.
type Trail interface {
	// Append appends records to the writer's chain, in one transaction.
	Append(ctx context.Context, recs []Record) error
	// Links walks the store's links, chain by chain in position order,
	// each entry's link with the entry's row as stored (nil when there
	// is none), until each returns an error.
	Links(ctx context.Context, each func(l *Link, e *Entry) error) error
}

// GapLister is a Trail that finds its gap records by when they were
// written, for the timeline: an index keeps it from reading the trail.
type GapLister interface {
	// GapsBetween returns the gap records written (Link.At) from from to
	// until, both included, newest first, at most limit.
	GapsBetween(ctx context.Context, from, until time.Time, limit int) ([]Gap, error)
}

// gapsBetween is GapsBetween on db, whose query selects chain, pos, at
// and body.
func gapsBetween(ctx context.Context, db querier, q string, from, until time.Time, limit int) ([]Gap, error) {
	var out []Gap
	err := db.query(ctx, q, []any{micros(clampTime(from)), micros(clampTime(until)), limit}, func(scan func(dest ...any) error) error {
		var g Gap
		var at int64
		var body []byte
		if err := scan(&g.Chain, &g.Pos, &at, &body); err != nil {
			return err
		}
		if err := json.Unmarshal(body, &g.Gap); err != nil {
			return fmt.Errorf("gap record %s/%d: %w", g.Chain, g.Pos, err)
		}
		g.At = time.UnixMicro(at).UTC()
		out = append(out, g)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("history trail: %w", err)
	}
	return out, nil
}

// chain is a writer's position in its chain: the last link's position
// and hash. The store that holds it advances it only once the links are
// committed.
type chain struct {
	id   string
	pos  int64
	hash []byte
}

// next returns the link after c's head, and moves c's copy to it: the
// caller keeps the original until its transaction commits.
func (c *chain) next(kind LinkKind, ref string, entryTime, at time.Time, body []byte) Link {
	l := Link{Chain: c.id, Pos: c.pos + 1, Kind: kind, Ref: ref, Time: entryTime.UTC(), At: at.UTC(), Body: body, Prev: c.hash}
	if entryTime.IsZero() {
		l.Time = time.Time{}
	}
	l.Time, l.At = truncMicro(l.Time), truncMicro(l.At)
	l.Hash = LinkHash(&l)
	c.pos, c.hash = l.Pos, l.Hash
	return l
}

// truncMicro drops t's nanoseconds below the microsecond, what the
// stores keep.
func truncMicro(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return time.UnixMicro(t.UnixMicro()).UTC()
}

// zeroHash is the Prev of a chain's first link.
var zeroHash = make([]byte, HashSize)

// entryLinks returns the links of entries written, after c (advanced).
func (c *chain) entryLinks(entries []*Entry, keys []int64) []Link {
	links := make([]Link, len(entries))
	for i, e := range entries {
		links[i] = c.next(LinkEntry, e.ID, e.Time, e.Recorded, EntryHash(e))
		links[i].Key = keys[i]
	}
	return links
}

// fromEntry sets the fields of an entry's link that a store keeps in
// the entry's row, not in the link's: its id, times and hash.
func (l *Link) fromEntry(e *Entry) {
	l.Ref, l.Time, l.At, l.Body = e.ID, truncMicro(e.Time), truncMicro(e.Recorded), EntryHash(e)
}

// records returns the links of recs after c (advanced), signed where
// they ask to be.
func (c *chain) records(recs []Record, at time.Time) []Link {
	links := make([]Link, len(recs))
	for i, r := range recs {
		links[i] = c.next(r.Kind, "", time.Time{}, at, r.Body)
		if r.Sign != nil {
			links[i].Sig = r.Sign(links[i].Hash)
		}
	}
	return links
}

// errChainTaken says another writer appended to the chain.
var errChainTaken = errors.New("another writer appends to this chain: give each replica a chain of its own")

// startBody is the body of a chain's first link.
func startBody(before int64) []byte {
	b, _ := json.Marshal(StartBody{Before: before})
	return b
}

// trimBody is the body of a trim's link.
func trimBody(horizon, removed, linksFrom int64) []byte {
	b, _ := json.Marshal(TrimBody{Horizon: horizon, Removed: removed, LinksFrom: linksFrom})
	return b
}

// pruneChunk is how many links one statement removes at most.
const pruneChunk = 4096
