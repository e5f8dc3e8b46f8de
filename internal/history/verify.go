package history

import (
	"bytes"
	"cmp"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// VerifyOptions configure Verify.
type VerifyOptions struct {
	// Key is the public key checkpoints must be signed with; nil checks
	// the chains but no signature, and cannot tell a cut tail.
	Key ed25519.PublicKey
	// Now is when the trail was read (an export's time); with Interval
	// it tells a cut tail: links after a chain's last checkpoint older
	// than twice Interval (default DefaultCheckpointInterval).
	Now      time.Time
	Interval time.Duration
}

// ProblemKind says what verification found wrong.
type ProblemKind string

const (
	// Altered: a link or an entry is not what its chain committed to.
	Altered ProblemKind = "altered"
	// Deleted: links, or an entry a link names, are missing.
	Deleted ProblemKind = "deleted"
	// Reordered: a link comes out of its position.
	Reordered ProblemKind = "reordered"
	// BadSignature: a checkpoint's signature does not verify, or is by
	// another key.
	BadSignature ProblemKind = "signature"
	// CutTail: links after a chain's last checkpoint are older than a
	// checkpoint should have come: those after them were removed, or
	// fieldwatch stopped without its last checkpoint.
	CutTail ProblemKind = "cutTail"
)

// Problem is one thing verification found wrong, at a chain's position.
type Problem struct {
	Kind  ProblemKind `json:"kind"`
	Chain string      `json:"chain"`
	Pos   int64       `json:"pos"`
	// Seq is the entry's key in its store, when an entry is concerned.
	Seq    int64  `json:"seq,omitempty"`
	Ref    string `json:"ref,omitempty"`
	Detail string `json:"detail"`
}

func (p Problem) String() string {
	s := fmt.Sprintf("%s: chain %q position %d", p.Kind, p.Chain, p.Pos)
	if p.Ref != "" {
		s += fmt.Sprintf(" entry %s", p.Ref)
	}
	if p.Seq != 0 {
		s += fmt.Sprintf(" (seq %d)", p.Seq)
	}
	return s + ": " + p.Detail
}

// Gap is a gap record found in a chain.
type Gap struct {
	Chain string `json:"chain"`
	Pos   int64  `json:"pos"`
	// At is when the gap record was written.
	At  time.Time `json:"at"`
	Gap GapBody   `json:"gap"`
}

// ChainReport sums up one chain.
type ChainReport struct {
	Chain       string `json:"chain"`
	Links       int64  `json:"links"`
	Entries     int64  `json:"entries"`
	Checkpoints int64  `json:"checkpoints"`
	// Sealed is the position of the last checkpoint whose signature
	// verified (0: none).
	Sealed int64 `json:"sealed"`
	// Outside counts the entries the store held before the chain
	// started.
	Outside int64 `json:"outside"`
	// Pruned counts the links the bounds removed from the chain's start
	// (a trim record's LinksFrom).
	Pruned int64 `json:"pruned"`
}

// Report is what Verify found.
type Report struct {
	Chains   []ChainReport `json:"chains"`
	Problems []Problem     `json:"problems"`
	Gaps     []Gap         `json:"gaps"`
	// Trimmed counts the entries whose links remain and rows were
	// removed by the bounds (at or before a trim's horizon).
	Trimmed int64 `json:"trimmed"`
	// Superseded counts entries replaced by another writer's entry of
	// the same id (a standby's copy replaced by what the leader
	// delivered).
	Superseded int64 `json:"superseded"`
	// Signed says whether signatures were checked.
	Signed bool `json:"signed"`
	// Clusters are the clusters the checkpoints name (--cluster-name),
	// each once, in the order met.
	Clusters []string `json:"clusters,omitempty"`
	// ForeignKey, when set, is the first checkpoint of a trail none of
	// whose checkpoints names the key given: every one was made with
	// another key. Not tampering but the wrong pair: an export of
	// another cluster, or another cluster's key.
	ForeignKey *CheckpointRef `json:"foreignKey,omitempty"`
}

// CheckpointRef names a checkpoint and what its body says.
type CheckpointRef struct {
	Chain   string `json:"chain"`
	Pos     int64  `json:"pos"`
	Cluster string `json:"cluster"`
	Key     []byte `json:"key"`
}

// Intact reports whether nothing was found wrong and nothing is missing.
func (r *Report) Intact() bool { return len(r.Problems) == 0 && len(r.Gaps) == 0 }

// maxProblems bounds the problems a Report lists: past it, verification
// stops listing (the first ones name where tampering starts).
const maxProblems = 1000

// Walk calls each for every link of a trail, in chain and position
// order, with the entry's row (nil when missing). Verify calls it twice
// at most.
type Walk func(each func(l *Link, e *Entry) error) error

// Verify walks a trail and reports what is wrong with it. Its error is
// about the input (a walk that failed), not about what it holds. It
// keeps in memory a few values per chain and the entries it could not
// judge in its first walk (rows that differ from their link, missing
// rows), which a second walk judges.
func Verify(walk Walk, opts VerifyOptions) (*Report, error) {
	if opts.Interval <= 0 {
		opts.Interval = DefaultCheckpointInterval
	}
	v := &verifier{opts: opts, chains: map[string]*chainCheck{}, report: &Report{Signed: opts.Key != nil}}
	if err := walk(v.add); err != nil {
		return nil, err
	}
	if len(v.differs) > 0 || v.missing > 0 {
		if err := walk(v.judge); err != nil {
			return nil, err
		}
		for _, d := range v.differs {
			v.problem(Problem{Kind: Altered, Chain: d.chain, Pos: d.pos, Seq: d.seq, Ref: d.ref,
				Detail: "the entry's row is not what the chain committed to"})
		}
	}
	v.finish()
	return v.report, nil
}

// chainCheck is the state of one chain's walk.
type chainCheck struct {
	rep  ChainReport
	pos  int64
	hash []byte
	// pending counts the links after the last verified checkpoint, the
	// oldest written at oldest.
	pending int64
	oldest  time.Time
	// first is the first position seen, linksFrom the highest a trim
	// record says the links start at.
	first, linksFrom int64
}

// differ is an entry whose row does not match its link.
type differ struct {
	chain    string
	pos, seq int64
	ref      string
}

type verifier struct {
	opts    VerifyOptions
	chains  map[string]*chainCheck
	order   []string
	report  *Report
	horizon int64
	// differs are keyed by the row's key: another chain's link of the
	// same id may match it (Superseded).
	differs map[int64]*differ
	missing int64
	// keyed counts the checkpoints that name the key given; foreign is
	// the first that names another.
	keyed   int64
	foreign *CheckpointRef
}

func (v *verifier) problem(p Problem) {
	if len(v.report.Problems) < maxProblems {
		v.report.Problems = append(v.report.Problems, p)
	}
}

// add is the first walk.
func (v *verifier) add(l *Link, e *Entry) error {
	c := v.chains[l.Chain]
	if c == nil {
		c = &chainCheck{rep: ChainReport{Chain: l.Chain}, hash: zeroHash}
		v.chains[l.Chain] = c
		v.order = append(v.order, l.Chain)
	}
	c.rep.Links++
	if c.first == 0 {
		c.first = l.Pos
	}
	switch {
	case c.pos == 0 && l.Pos > 1:
		// The chain's start was removed: by the bounds when a trim
		// record says so (finish).
	case l.Pos > c.pos+1:
		v.problem(Problem{Kind: Deleted, Chain: l.Chain, Pos: c.pos + 1,
			Detail: fmt.Sprintf("links %d to %d are missing", c.pos+1, l.Pos-1)})
	case l.Pos <= c.pos:
		v.problem(Problem{Kind: Reordered, Chain: l.Chain, Pos: l.Pos, Detail: fmt.Sprintf("comes after position %d", c.pos)})
	case !bytes.Equal(l.Prev, c.hash):
		v.problem(Problem{Kind: Altered, Chain: l.Chain, Pos: l.Pos - 1,
			Detail: fmt.Sprintf("link %d does not commit to this link's hash: this link was altered, or links were inserted or removed after it", l.Pos)})
	}
	// After missing links the hash of the link before is gone with them:
	// this link cannot be checked (a checkpoint's signature then vouches
	// for its stated hash); the next ones can, as they commit to it.
	prevGone := l.Pos > c.pos+1
	hash := l.Hash
	if !prevGone {
		hash = LinkHash(l)
	}
	switch {
	case l.Kind == LinkEntry && e == nil:
		v.missing++ // judged in the second walk
	case prevGone || bytes.Equal(hash, l.Hash):
	case l.Kind == LinkEntry:
		// The entry's row, or the link's hash, is not what was written;
		// unless another chain's link commits to the row (judge).
		if v.differs == nil {
			v.differs = map[int64]*differ{}
		}
		v.differs[e.Seq] = &differ{chain: l.Chain, pos: l.Pos, seq: e.Seq, ref: l.Ref}
	default:
		v.problem(Problem{Kind: Altered, Chain: l.Chain, Pos: l.Pos, Detail: "the link's fields do not hash to its hash"})
	}
	c.pos, c.hash = max(c.pos, l.Pos), l.Hash
	if l.Kind != LinkCheckpoint {
		if c.pending == 0 {
			c.oldest = l.At
		}
		c.pending++
	}
	switch l.Kind {
	case LinkEntry:
		c.rep.Entries++
	case LinkStart:
		var b StartBody
		if err := json.Unmarshal(l.Body, &b); err != nil {
			v.problem(Problem{Kind: Altered, Chain: l.Chain, Pos: l.Pos, Detail: "start record: " + err.Error()})
		}
		c.rep.Outside += b.Before
	case LinkGap:
		var b GapBody
		if err := json.Unmarshal(l.Body, &b); err != nil {
			v.problem(Problem{Kind: Altered, Chain: l.Chain, Pos: l.Pos, Detail: "gap record: " + err.Error()})
		}
		v.report.Gaps = append(v.report.Gaps, Gap{Chain: l.Chain, Pos: l.Pos, At: l.At, Gap: b})
	case LinkTrim:
		var b TrimBody
		if err := json.Unmarshal(l.Body, &b); err != nil {
			v.problem(Problem{Kind: Altered, Chain: l.Chain, Pos: l.Pos, Detail: "trim record: " + err.Error()})
		}
		v.horizon = max(v.horizon, b.Horizon)
		c.linksFrom = max(c.linksFrom, b.LinksFrom)
	case LinkCheckpoint:
		c.rep.Checkpoints++
		v.checkpoint(c, l, hash)
	default:
		v.problem(Problem{Kind: Altered, Chain: l.Chain, Pos: l.Pos, Detail: fmt.Sprintf("unknown kind %q", l.Kind)})
	}
	return nil
}

func (v *verifier) checkpoint(c *chainCheck, l *Link, hash []byte) {
	var b CheckpointBody
	if err := json.Unmarshal(l.Body, &b); err != nil {
		v.problem(Problem{Kind: Altered, Chain: l.Chain, Pos: l.Pos, Detail: "checkpoint: " + err.Error()})
		return
	}
	if !slices.Contains(v.report.Clusters, b.Cluster) {
		v.report.Clusters = append(v.report.Clusters, b.Cluster)
	}
	if v.opts.Key == nil {
		return
	}
	if !bytes.Equal(b.Key, v.opts.Key) {
		if v.foreign == nil {
			v.foreign = &CheckpointRef{Chain: l.Chain, Pos: l.Pos, Cluster: b.Cluster, Key: b.Key}
		}
		v.problem(Problem{Kind: BadSignature, Chain: l.Chain, Pos: l.Pos, Detail: "the checkpoint names another key than the one given"})
		return
	}
	v.keyed++
	if !ed25519.Verify(v.opts.Key, SignedMessage(hash), l.Sig) {
		v.problem(Problem{Kind: BadSignature, Chain: l.Chain, Pos: l.Pos, Detail: "the checkpoint's signature does not verify"})
		return
	}
	c.rep.Sealed, c.pending, c.oldest = l.Pos, 0, time.Time{}
}

// judge is the second walk: an entry whose row differs from its link is
// superseded when another chain's link commits to the row (as what the
// leader delivered replaces a standby's copy); a missing row is trimmed
// when it is at or before the last trim's horizon.
func (v *verifier) judge(l *Link, e *Entry) error {
	if l.Kind != LinkEntry {
		return nil
	}
	if e == nil {
		if micros(l.Time) <= v.horizon {
			v.report.Trimmed++
			return nil
		}
		v.problem(Problem{Kind: Deleted, Chain: l.Chain, Pos: l.Pos, Seq: l.Key, Detail: "the entry's row is missing"})
		return nil
	}
	if d, ok := v.differs[e.Seq]; ok && d.chain != l.Chain && bytes.Equal(LinkHash(l), l.Hash) {
		delete(v.differs, e.Seq)
		v.report.Superseded++
	}
	return nil
}

// finish adds the chains' reports and their cut tails.
func (v *verifier) finish() {
	if v.keyed == 0 {
		v.report.ForeignKey = v.foreign
	}
	for _, id := range v.order {
		c := v.chains[id]
		switch {
		case c.first > 1 && c.linksFrom >= c.first:
			c.rep.Pruned = c.first - 1
		case c.first > 1:
			v.problem(Problem{Kind: Deleted, Chain: id, Pos: 1, Detail: fmt.Sprintf("links 1 to %d are missing, and no trim record says the bounds removed them", c.first-1)})
		}
		v.report.Chains = append(v.report.Chains, c.rep)
		if v.opts.Key == nil || c.pending == 0 || v.opts.Now.IsZero() {
			continue
		}
		if age := v.opts.Now.Sub(c.oldest); age > 2*v.opts.Interval {
			v.problem(Problem{Kind: CutTail, Chain: id, Pos: c.rep.Sealed + 1,
				Detail: fmt.Sprintf("%d links after the last checkpoint (position %d), the oldest written %s before the trail was read: a checkpoint was due after %s",
					c.pending, c.rep.Sealed, age.Round(time.Second), v.opts.Interval)})
		}
	}
	slices.SortStableFunc(v.report.Problems, func(a, b Problem) int {
		return cmp.Or(cmp.Compare(a.Chain, b.Chain), cmp.Compare(a.Pos, b.Pos))
	})
}
