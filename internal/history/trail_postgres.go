package history

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// pgTrailTable is the trail's table in PostgreSQL: the links of every
// writer's chain.
const pgTrailTable = pgTable + "_trail"

// pgTrailSchema creates it; a database of an earlier version gains it
// as the store is opened, its entries outside the chains. As in the
// embedded store, an entry's link keeps its position, hash, key and
// time, the rest being the entry's row.
const pgTrailSchema = `
CREATE TABLE IF NOT EXISTS ` + pgTrailTable + ` (
  chain TEXT NOT NULL,
  pos BIGINT NOT NULL,
  hash BYTEA NOT NULL,
  key BIGINT NOT NULL DEFAULT 0,
  time BIGINT NOT NULL DEFAULT 0,
  kind TEXT NOT NULL DEFAULT 'entry',
  at BIGINT NOT NULL DEFAULT 0,
  body BYTEA,
  sig BYTEA,
  PRIMARY KEY (chain, pos)
);
CREATE INDEX IF NOT EXISTS ` + pgTrailTable + `_gaps ON ` + pgTrailTable + ` (at) WHERE kind = 'gap';
`

const (
	pgInsertEntryLinks = `INSERT INTO ` + pgTrailTable + ` (chain, pos, hash, key, time)
SELECT $1, * FROM unnest($2::bigint[], $3::bytea[], $4::bigint[], $5::bigint[])`
	pgInsertRecord = `INSERT INTO ` + pgTrailTable + ` (chain, pos, hash, key, time, kind, at, body, sig)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`
)

// insertPGLinks inserts links: those of entries in one statement.
func insertPGLinks(ctx context.Context, tx pgx.Tx, links []Link) error {
	var (
		chain         string
		pos, keys, tm []int64
		hash          [][]byte
	)
	for i := range links {
		l := &links[i]
		if l.Kind != LinkEntry {
			if _, err := tx.Exec(ctx, pgInsertRecord, l.Chain, l.Pos, l.Hash, l.Key, micros(l.Time), string(l.Kind), micros(l.At), l.Body, l.Sig); err != nil {
				return err
			}
			continue
		}
		chain = l.Chain
		pos, hash, keys, tm = append(pos, l.Pos), append(hash, l.Hash), append(keys, l.Key), append(tm, micros(l.Time))
	}
	if len(pos) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, pgInsertEntryLinks, chain, pos, hash, keys, tm)
	return err
}

// inTrail runs fn in a transaction with the writer's chain head (nil
// without a trail), which it advances once the transaction commits. A
// link whose position another writer took (two writers given one chain)
// fails the transaction; the head is read again for the next one.
func (p *Postgres) inTrail(ctx context.Context, fn func(tx pgx.Tx, c *chain) error) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	var c *chain
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if !p.opts.noTrail {
			head, err := p.pgHead(ctx, tx)
			if err != nil {
				return err
			}
			c = &head
		}
		return fn(tx, c)
	})
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && pe.Code == "23505" && pe.TableName == pgTrailTable: // unique_violation
		p.head = nil
		return fmt.Errorf("history trail: chain %q: %w", p.opts.Chain, errChainTaken)
	case err != nil:
		return err
	}
	if c != nil {
		p.head = c
	}
	return nil
}

// pgHead returns the chain's head, read from the database (and the
// chain started in tx) the first time.
func (p *Postgres) pgHead(ctx context.Context, tx pgx.Tx) (chain, error) {
	if p.head != nil {
		return *p.head, nil
	}
	c := chain{id: p.opts.Chain}
	err := tx.QueryRow(ctx, "SELECT pos, hash FROM "+pgTrailTable+" WHERE chain = $1 ORDER BY pos DESC LIMIT 1", c.id).Scan(&c.pos, &c.hash)
	switch {
	case err == nil:
		return c, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return chain{}, err
	}
	var before int64
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM "+pgTable).Scan(&before); err != nil {
		return chain{}, err
	}
	c.hash = zeroHash
	return c, insertPGLinks(ctx, tx, c.records([]Record{{Kind: LinkStart, Body: startBody(before)}}, time.Now()))
}

// Append implements Trail.
func (p *Postgres) Append(ctx context.Context, recs []Record) error {
	if p.opts.noTrail {
		return nil
	}
	return p.fail(p.inTrail(ctx, func(tx pgx.Tx, c *chain) error {
		return insertPGLinks(ctx, tx, c.records(recs, time.Now()))
	}))
}

// appendTrim records a trim: every entry removed is at or before the
// oldest time left (or now, when none is left). As in the embedded store
// (SQLite.appendTrim), this writer's chain loses the links before the
// first entry's link past the horizon, but the anchor: other writers
// prune theirs when they trim.
func (p *Postgres) appendTrim(ctx context.Context, removed int) error {
	if p.opts.noTrail {
		return nil
	}
	var oldest *int64
	if err := p.pool.QueryRow(ctx, "SELECT min(time) FROM "+pgTable).Scan(&oldest); err != nil {
		return err
	}
	horizon := time.Now().UnixMicro()
	if oldest != nil {
		horizon = *oldest
	}
	chain := p.opts.Chain
	var first, keep *int64
	if err := p.pool.QueryRow(ctx, "SELECT min(pos) FROM "+pgTrailTable+" WHERE chain = $1", chain).Scan(&first); err != nil {
		return err
	}
	err := p.pool.QueryRow(ctx, "SELECT pos FROM "+pgTrailTable+" WHERE chain = $1 AND kind = 'entry' AND time > $2 ORDER BY pos LIMIT 1",
		chain, horizon).Scan(&keep)
	if errors.Is(err, pgx.ErrNoRows) {
		err = p.pool.QueryRow(ctx, "SELECT max(pos) + 1 FROM "+pgTrailTable+" WHERE chain = $1", chain).Scan(&keep)
	}
	if err != nil {
		return err
	}
	var from int64
	if first != nil && keep != nil && *keep-1 > *first {
		from = *keep - 1 // the anchor
	}
	if err := p.Append(ctx, []Record{{Kind: LinkTrim, Body: trimBody(horizon, int64(removed), from)}}); err != nil || from == 0 {
		return err
	}
	for {
		tag, err := p.pool.Exec(ctx, "DELETE FROM "+pgTrailTable+" WHERE chain = $1 AND pos IN (SELECT pos FROM "+pgTrailTable+
			" WHERE chain = $1 AND pos < $2 ORDER BY pos LIMIT $3)", chain, from, pruneChunk)
		if err != nil {
			return err
		}
		if tag.RowsAffected() < pruneChunk {
			return nil
		}
	}
}

// pgLinks is the query of Links.
const pgLinks = `SELECT t.chain, t.pos, t.hash, t.key, t.time, t.kind, t.at, t.body, t.sig,
  e.seq, e.id, e.time, e.recorded, e.rule, e.type, e.grp, e.resource, e.namespace, e.name, e.uid, e.usr, e.imp, e.cluster, e.source, e.payload
FROM ` + pgTrailTable + ` t LEFT JOIN ` + pgTable + ` e ON t.kind = 'entry' AND e.seq = t.key ORDER BY t.chain, t.pos`

// GapsBetween implements GapLister.
func (p *Postgres) GapsBetween(ctx context.Context, from, until time.Time, limit int) ([]Gap, error) {
	return gapsBetween(ctx, pgQuerier{p.pool}, "SELECT chain, pos, at, body FROM "+pgTrailTable+
		" WHERE kind = 'gap' AND at >= $1 AND at <= $2 ORDER BY at DESC LIMIT $3", from, until, limit)
}

// Links implements Trail.
func (p *Postgres) Links(ctx context.Context, each func(l *Link, e *Entry) error) error {
	var last string
	prev := zeroHash
	err := pgQuerier{p.pool}.query(ctx, pgLinks, nil, func(scan func(dest ...any) error) error {
		var lk Link
		l, e, err := scanLink(scan, &lk, []any{&lk.Chain, &lk.Pos}, nil)
		if err != nil {
			return err
		}
		if l.Chain != last {
			last, prev = l.Chain, zeroHash
		}
		l.Prev, prev = prev, l.Hash
		return each(l, e)
	})
	if err != nil {
		return fmt.Errorf("history trail: %w", err)
	}
	return nil
}
