package history

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
)

// sqliteTrailSchema is the embedded store's trail: a table of its own,
// so that a file of an earlier version gains it as it is opened, its
// entries outside the chain (the first link, LinkStart, counts them).
// The file has one writer, and one chain (DefaultChain): its links are
// keyed by position. An entry's link keeps only its position, hash, key
// and time, its other fields being the entry's row: a link's row is
// what the trail costs an entry most (BenchmarkTrail).
const sqliteTrailSchema = `
CREATE TABLE IF NOT EXISTS trail (
  pos INTEGER PRIMARY KEY,
  hash BLOB NOT NULL,
  key INTEGER NOT NULL DEFAULT 0,
  time INTEGER NOT NULL DEFAULT 0,
  kind TEXT NOT NULL DEFAULT 'entry',
  at INTEGER NOT NULL DEFAULT 0,
  body BLOB,
  sig BLOB
);
CREATE INDEX IF NOT EXISTS trail_gaps ON trail (at) WHERE kind = 'gap';
`

// DefaultChain is the embedded store's chain, and a shared store's
// unless told another.
const DefaultChain = "local"

const (
	// trailEntry inserts insertRows links of entries.
	trailEntryColumns = 4
	trailRecord       = "INSERT INTO trail(pos, hash, key, time, kind, at, body, sig) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
	trailEntryOne     = "INSERT INTO trail(pos, hash, key, time) VALUES (?, ?, ?, ?)"
)

var trailEntryMany = "INSERT INTO trail(pos, hash, key, time) VALUES " +
	strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?), ", insertRows), ", ")

// insertLinksTx inserts links: entries' insertRows at a time.
func insertLinksTx(ctx context.Context, tx *sql.Tx, links []Link) error {
	var one, many *sql.Stmt
	defer func() {
		for _, st := range []*sql.Stmt{one, many} {
			if st != nil {
				_ = st.Close()
			}
		}
	}()
	var err error
	for len(links) > 0 {
		l := &links[0]
		if l.Kind != LinkEntry {
			if _, err := tx.ExecContext(ctx, trailRecord, l.Pos, l.Hash, l.Key, micros(l.Time), string(l.Kind), micros(l.At), l.Body, l.Sig); err != nil {
				return err
			}
			links = links[1:]
			continue
		}
		n, st, q := 1, &one, trailEntryOne
		if len(links) >= insertRows && !slices.ContainsFunc(links[:insertRows], func(l Link) bool { return l.Kind != LinkEntry }) {
			n, st, q = insertRows, &many, trailEntryMany
		}
		if *st == nil {
			if *st, err = tx.PrepareContext(ctx, q); err != nil {
				return err
			}
		}
		args := make([]any, 0, n*trailEntryColumns)
		for i := range links[:n] {
			args = append(args, links[i].Pos, links[i].Hash, links[i].Key, micros(links[i].Time))
		}
		if _, err := (*st).ExecContext(ctx, args...); err != nil {
			return err
		}
		links = links[n:]
	}
	return nil
}

// sqliteHead returns the writer's chain head, read from the file (and
// the chain started, LinkStart written, in tx) the first time. The
// caller holds wmu.
func (s *SQLite) sqliteHead(ctx context.Context, tx *sql.Tx) (chain, error) {
	if s.head != nil {
		return *s.head, nil
	}
	c := chain{id: DefaultChain}
	err := tx.QueryRowContext(ctx, "SELECT pos, hash FROM trail ORDER BY pos DESC LIMIT 1").Scan(&c.pos, &c.hash)
	switch {
	case err == nil:
		return c, nil
	case !errors.Is(err, sql.ErrNoRows):
		return chain{}, err
	}
	var before int64
	if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM entries").Scan(&before); err != nil {
		return chain{}, err
	}
	c.hash = zeroHash
	start := c.records([]Record{{Kind: LinkStart, Body: startBody(before)}}, time.Now())
	return c, insertLinksTx(ctx, tx, start)
}

// Append implements Trail.
func (s *SQLite) Append(ctx context.Context, recs []Record) error {
	if s.opts.ReadOnly {
		return errors.New("history database opened read-only")
	}
	if s.opts.noTrail {
		return nil
	}
	return s.use(func() error { return s.appendRecords(ctx, recs) })
}

// appendRecords is Append, inside use.
func (s *SQLite) appendRecords(ctx context.Context, recs []Record) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	c, err := s.sqliteHead(ctx, tx)
	if err != nil {
		return err
	}
	if err := insertLinksTx(ctx, tx, c.records(recs, time.Now())); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	s.head = &c
	return nil
}

// appendTrim records a trim of removed entries, inside use: the horizon
// is the time at or before which every removed entry was (the oldest
// key left, or the newest written when none is left). The links before
// the first entry's link past the horizon go with the entries (the one
// just before it kept as the anchor), so that the trail stays within the
// bounds too: the trim's record says so before they are removed.
func (s *SQLite) appendTrim(ctx context.Context, removed int) error {
	if s.opts.noTrail || removed == 0 {
		return nil
	}
	var oldest sql.NullInt64
	if err := s.write.QueryRowContext(ctx, "SELECT min(seq) FROM entries").Scan(&oldest); err != nil {
		return err
	}
	s.wmu.Lock()
	horizon := s.lastSeq
	s.wmu.Unlock()
	if oldest.Valid {
		horizon = oldest.Int64
	}
	horizon /= seqSpan
	var first, keep sql.NullInt64
	if err := s.write.QueryRowContext(ctx, "SELECT min(pos) FROM trail").Scan(&first); err != nil {
		return err
	}
	err := s.write.QueryRowContext(ctx, "SELECT pos FROM trail WHERE kind = 'entry' AND time > ? ORDER BY pos LIMIT 1", horizon).Scan(&keep)
	if errors.Is(err, sql.ErrNoRows) {
		err = s.write.QueryRowContext(ctx, "SELECT max(pos) + 1 FROM trail").Scan(&keep)
	}
	if err != nil {
		return err
	}
	from := keep.Int64 - 1 // the anchor
	if !first.Valid || from <= first.Int64 {
		from = 0
	}
	if err := s.appendRecords(ctx, []Record{{Kind: LinkTrim, Body: trimBody(horizon, int64(removed), from)}}); err != nil || from == 0 {
		return err
	}
	for {
		res, err := s.write.ExecContext(ctx, "DELETE FROM trail WHERE pos IN (SELECT pos FROM trail WHERE pos < ? ORDER BY pos LIMIT ?)", from, pruneChunk)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n < pruneChunk {
			return nil
		}
	}
}

// sqliteLinks is the query of Links: the links with their entries' rows,
// the cluster read from clusterCol (SQLite.clusterCol).
func sqliteLinks(clusterCol string) string {
	if clusterCol != "''" {
		clusterCol = "e." + clusterCol
	}
	return `SELECT t.pos, t.hash, t.key, t.time, t.kind, t.at, t.body, t.sig,
  e.seq, e.id, e.recorded, e.rule, e.type, e.grp, e.resource, e.namespace, e.name, e.uid, e.usr, e.imp, ` + clusterCol + `, e.source, e.payload
FROM trail t LEFT JOIN entries e ON t.kind = 'entry' AND e.seq = t.key ORDER BY t.pos`
}

// Links implements Trail: the entries' times are read from their
// payloads (the embedded store keeps them in its keys only); an entry
// whose payload does not parse has none.
func (s *SQLite) Links(ctx context.Context, each func(l *Link, e *Entry) error) error {
	return s.use(func() error {
		rows, err := s.read.QueryContext(ctx, sqliteLinks(s.clusterCol))
		if err != nil {
			return err
		}
		defer func() { _ = rows.Close() }()
		prev := zeroHash
		for rows.Next() {
			lk := Link{Chain: DefaultChain}
			l, e, err := scanLink(rows.Scan, &lk, []any{&lk.Pos}, func(e *Entry) {
				if p, err := ParsePayload(e.Payload, e.Source); err == nil {
					e.Time = p.Time
				}
			})
			if err != nil {
				return err
			}
			l.Prev, prev = prev, l.Hash
			if err := each(l, e); err != nil {
				return err
			}
		}
		return rows.Err()
	})
}

// GapsBetween implements GapLister.
func (s *SQLite) GapsBetween(ctx context.Context, from, until time.Time, limit int) ([]Gap, error) {
	var out []Gap
	err := s.use(func() error {
		var err error
		out, err = gapsBetween(ctx, sqlDB{s.read}, "SELECT '"+DefaultChain+"', pos, at, body FROM trail WHERE kind = 'gap' AND at >= ? AND at <= ? ORDER BY at DESC LIMIT ?", from, until, limit)
		return err
	})
	return out, err
}

// scanLink reads the columns of sqliteLinks or pgLinks: head, then the
// link's, then the entry's (whose time is a column unless timeOf reads
// it).
func scanLink(scan func(dest ...any) error, l *Link, head []any, timeOf func(e *Entry)) (*Link, *Entry, error) {
	var (
		kind                                                              string
		tm, at                                                            int64
		seq, recorded, etime                                              sql.NullInt64
		id, rule, typ, grp, res, ns, name, uid, usr, imp, cluster, source sql.NullString
		payload                                                           []byte
	)
	dest := append(head, &l.Hash, &l.Key, &tm, &kind, &at, &l.Body, &l.Sig, &seq, &id)
	if timeOf == nil {
		dest = append(dest, &etime)
	}
	dest = append(dest, &recorded, &rule, &typ, &grp, &res, &ns, &name, &uid, &usr, &imp, &cluster, &source, &payload)
	if err := scan(dest...); err != nil {
		return nil, nil, err
	}
	l.Kind = LinkKind(kind)
	if tm != 0 {
		l.Time = time.UnixMicro(tm).UTC()
	}
	if at != 0 {
		l.At = time.UnixMicro(at).UTC()
	}
	if !seq.Valid {
		return l, nil, nil
	}
	e := &Entry{Seq: seq.Int64, ID: id.String, Recorded: time.UnixMicro(recorded.Int64).UTC(), Rule: rule.String,
		Type: change.Type(typ.String), Group: grp.String, Resource: res.String, Namespace: ns.String, Name: name.String,
		UID: uid.String, User: usr.String, Impersonated: imp.String, Cluster: cluster.String, Source: Source(source.String), Payload: payload}
	if timeOf != nil {
		timeOf(e)
	} else {
		e.Time = time.UnixMicro(etime.Int64).UTC()
	}
	l.fromEntry(e)
	return l, e, nil
}
