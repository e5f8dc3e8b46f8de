package history

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pgTable is the history's table in a PostgreSQL database shared with
// other things.
const pgTable = "fieldwatch_history"

// pgSchema creates the table: the columns of the SQLite one, id unique
// (replicas write concurrently), bytes the row's stored size for the
// size bound.
const pgSchema = `
CREATE TABLE IF NOT EXISTS ` + pgTable + ` (
  seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  time BIGINT NOT NULL,
  recorded BIGINT NOT NULL,
  rule TEXT NOT NULL,
  type TEXT NOT NULL,
  grp TEXT NOT NULL,
  resource TEXT NOT NULL,
  namespace TEXT NOT NULL,
  name TEXT NOT NULL,
  uid TEXT NOT NULL,
  usr TEXT NOT NULL,
  imp TEXT NOT NULL,
  source TEXT NOT NULL,
  bytes INTEGER NOT NULL,
  payload BYTEA NOT NULL
);
CREATE INDEX IF NOT EXISTS ` + pgTable + `_time ON ` + pgTable + ` (time, seq);
CREATE INDEX IF NOT EXISTS ` + pgTable + `_uid ON ` + pgTable + ` (uid, time, seq);
CREATE INDEX IF NOT EXISTS ` + pgTable + `_namespace ON ` + pgTable + ` (namespace, time, seq);
CREATE TABLE IF NOT EXISTS ` + pgResources + ` (
  grp TEXT NOT NULL,
  resource TEXT NOT NULL,
  PRIMARY KEY (grp, resource)
);
ALTER TABLE ` + pgTable + ` ADD COLUMN IF NOT EXISTS cluster TEXT NOT NULL DEFAULT '';
CREATE TABLE IF NOT EXISTS ` + pgClusters + ` (cluster TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS ` + pgMeta + ` (name TEXT PRIMARY KEY, value TEXT NOT NULL);
`

// pgMeta holds what the tables are: the row schema is their version
// (SchemaVersion).
const pgMeta = pgTable + "_meta"

// pgClusters is the table of the clusters the history's entries are of
// (Store.Clusters), kept as pgResources is.
const pgClusters = pgTable + "_clusters"

// pgAddClusters adds clusters, from an array.
const pgAddClusters = `INSERT INTO ` + pgClusters + ` (cluster) SELECT DISTINCT * FROM unnest($1::text[]) ON CONFLICT DO NOTHING`

// pgResources is the table of the resources the history's entries are of
// (Store.Resources): a row per resource, added by the write that brings
// its first entry, never removed.
const pgResources = pgTable + "_resources"

// pgAddResources adds resources, from arrays of groups and resources.
const pgAddResources = `INSERT INTO ` + pgResources + ` (grp, resource)
SELECT DISTINCT * FROM unnest($1::text[], $2::text[]) ON CONFLICT DO NOTHING`

// pgInsert writes a batch from arrays, one per column. A Delivered entry
// replaces a Confirmed one of the same id (a standby's copy, evaluated
// without the leader's attribution, that came first); any other repeat
// is left out.
const pgInsert = `INSERT INTO ` + pgTable + ` AS h (id, time, recorded, rule, type, grp, resource, namespace, name, uid, usr, imp, source, bytes, payload, cluster)
SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[],
  $10::text[], $11::text[], $12::text[], $13::text[], $14::integer[], $15::bytea[], $16::text[])
ON CONFLICT (id) DO UPDATE SET recorded = excluded.recorded, usr = excluded.usr, imp = excluded.imp,
  source = excluded.source, bytes = excluded.bytes, payload = excluded.payload
WHERE h.source = 'confirmed' AND excluded.source = 'delivered'
RETURNING id, seq`

// pgRowOverhead is what a row stores besides its columns' bytes, with
// its share of the three indexes: the bytes the size bound counts per
// entry on top of its strings and payload.
const pgRowOverhead = 200

// pgTrimBatch is how many entries one DELETE removes at most.
const pgTrimBatch = 5000

// pgResync is how often the entries and bytes are counted again: other
// replicas write to the same table.
const pgResync = time.Minute

// PostgresOptions configure OpenPostgres.
type PostgresOptions struct {
	Logger  *slog.Logger
	Metrics *Metrics
	// Chain names this writer's chain in the trail: each replica writing
	// into one database needs a chain of its own (docs/trail.md). Its
	// first write starts it, or continues it where a writer of the same
	// chain left it.
	Chain string

	// noTrail writes no trail (BenchmarkTrail).
	noTrail bool
}

// Postgres is the shared store: a table in a PostgreSQL database, for
// replicas that share one history.
type Postgres struct {
	pool *pgxpool.Pool
	log  *slog.Logger
	m    *Metrics
	opts PostgresOptions

	wmu  sync.Mutex // serialises writes to the chain
	head *chain     // the chain's last link, nil until read (pgHead)

	mu     sync.Mutex // serialises Stats' recount
	synced time.Time
	count  atomic.Int64
	bytes  atomic.Int64

	// known are the resources this replica knows to be in pgResources,
	// knownClusters the clusters in pgClusters.
	known         sync.Map // GroupResource: struct{}
	knownClusters sync.Map // string: struct{}
}

var _ Store = &Postgres{}

// OpenPostgres connects to the database dsn names (a postgres:// URL or
// key=value settings; the password better comes from PGPASSWORD or a
// passfile than from the command line) and creates the table if needed.
func OpenPostgres(ctx context.Context, dsn string, opts PostgresOptions) (*Postgres, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Chain == "" {
		opts.Chain = DefaultChain
	}
	log, m := opts.Logger, opts.Metrics
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx's parse errors quote the DSN, password included: say less.
		return nil, errors.New("history database: the PostgreSQL connection string does not parse")
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("history database: %w", err)
	}
	p := &Postgres{pool: pool, log: log, m: m, opts: opts}
	if err := p.createTable(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	if err := p.createStatesTable(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	if _, err := p.Stats(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return p, nil
}

// createTable creates the table under an advisory lock: replicas may
// start at once, and concurrent CREATE TABLE IF NOT EXISTS can fail.
func (p *Postgres) createTable(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(7016996765293437281)"); err != nil {
			return err
		}
		var had, hadClusters, hadMeta bool
		if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL, to_regclass($3) IS NOT NULL",
			pgResources, pgClusters, pgMeta).Scan(&had, &hadClusters, &hadMeta); err != nil {
			return err
		}
		if hadMeta {
			var version int
			err := tx.QueryRow(ctx, "SELECT value::int FROM "+pgMeta+" WHERE name = 'schema'").Scan(&version)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			if version > SchemaVersion {
				return newerSchema(version)
			}
		}
		if _, err := tx.Exec(ctx, pgSchema+pgTrailSchema); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+pgMeta+" (name, value) VALUES ('schema', $1) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
			strconv.Itoa(SchemaVersion)); err != nil {
			return err
		}
		if !hadClusters {
			// A table of entries written before clusters were kept.
			if _, err := tx.Exec(ctx, "INSERT INTO "+pgClusters+" SELECT DISTINCT cluster FROM "+pgTable+" ON CONFLICT DO NOTHING"); err != nil {
				return err
			}
		}
		if had {
			return nil
		}
		// A table of entries written before the table of resources.
		_, err := tx.Exec(ctx, "INSERT INTO "+pgResources+" SELECT DISTINCT grp, resource FROM "+pgTable+" ON CONFLICT DO NOTHING")
		return err
	})
	switch {
	case errors.Is(err, ErrNewerSchema):
		return fmt.Errorf("history database: %w", err)
	case err != nil:
		return fmt.Errorf("history database: create table %s: %w", pgTable, err)
	}
	return nil
}

// entryBytes is what the size bound counts of an entry.
func entryBytes(e *Entry) int {
	return pgRowOverhead + len(e.Payload) + len(e.ID) + len(e.Rule) + len(e.Type) + len(e.Group) + len(e.Resource) +
		len(e.Namespace) + len(e.Name) + len(e.UID) + len(e.User) + len(e.Impersonated) + len(e.Source) + len(e.Cluster)
}

// Write implements Store.
func (p *Postgres) Write(ctx context.Context, entries []Entry) (int, error) {
	// One row per id: an INSERT ... ON CONFLICT DO UPDATE may not touch
	// a row twice. A Delivered entry wins over a Confirmed one.
	at := map[string]int{}
	var rows []*Entry
	for i := range entries {
		e := &entries[i]
		if j, ok := at[e.ID]; ok {
			if rows[j].Source == Confirmed && e.Source == Delivered {
				rows[j] = e
			}
			continue
		}
		at[e.ID] = len(rows)
		rows = append(rows, e)
	}
	n := len(rows)
	var (
		id, rule, typ, grp, res, ns, name, uid, usr, imp, src, cluster = make([]string, n), make([]string, n), make([]string, n), make([]string, n),
			make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n),
			make([]string, n)
		tm, rec = make([]int64, n), make([]int64, n)
		size    = make([]int32, n)
		payload = make([][]byte, n)
		total   int64
	)
	for i, e := range rows {
		id[i], rule[i], typ[i], grp[i], res[i], ns[i], name[i], uid[i], usr[i], imp[i], src[i] =
			e.ID, e.Rule, string(e.Type), e.Group, e.Resource, e.Namespace, e.Name, e.UID, e.User, e.Impersonated, string(e.Source)
		cluster[i] = e.Cluster
		tm[i], rec[i] = e.Time.UnixMicro(), e.Recorded.UnixMicro()
		b := entryBytes(e)
		size[i], payload[i] = int32(b), e.Payload
		total += int64(b)
	}
	if err := p.addResources(ctx, rows); err != nil {
		return 0, p.fail(err)
	}
	var written int64
	err := p.inTrail(ctx, func(tx pgx.Tx, c *chain) error {
		r, err := tx.Query(ctx, pgInsert, id, tm, rec, rule, typ, grp, res, ns, name, uid, usr, imp, src, size, payload, cluster)
		if err != nil {
			return err
		}
		keys := make(map[string]int64, n)
		for r.Next() {
			var wid string
			var seq int64
			if err := r.Scan(&wid, &seq); err != nil {
				r.Close()
				return err
			}
			keys[wid] = seq
		}
		r.Close()
		if err := r.Err(); err != nil {
			return err
		}
		written = int64(len(keys))
		if c == nil || written == 0 {
			return nil
		}
		entries, seqs := make([]*Entry, 0, len(keys)), make([]int64, 0, len(keys))
		for _, e := range rows { // in the batch's order
			if seq, ok := keys[e.ID]; ok {
				entries, seqs = append(entries, e), append(seqs, seq)
			}
		}
		return insertPGLinks(ctx, tx, c.entryLinks(entries, seqs))
	})
	if err != nil {
		return 0, p.fail(err)
	}
	p.count.Add(written)
	p.bytes.Add(total * written / max(int64(n), 1))
	return int(written), nil
}

// addResources adds to pgResources and pgClusters the resources and
// clusters of rows that this replica does not know to be there; before
// the entries, so that a resource or cluster with entries is always
// listed.
func (p *Postgres) addResources(ctx context.Context, rows []*Entry) error {
	var grp, res, clusters []string
	for _, e := range rows {
		if _, ok := p.known.Load(GroupResource{e.Group, e.Resource}); !ok {
			grp, res = append(grp, e.Group), append(res, e.Resource)
		}
		if _, ok := p.knownClusters.Load(e.Cluster); !ok {
			clusters = append(clusters, e.Cluster)
		}
	}
	if len(clusters) > 0 {
		if _, err := p.pool.Exec(ctx, pgAddClusters, clusters); err != nil {
			return err
		}
		for _, c := range clusters {
			p.knownClusters.Store(c, struct{}{})
		}
	}
	if len(grp) == 0 {
		return nil
	}
	if _, err := p.pool.Exec(ctx, pgAddResources, grp, res); err != nil {
		return err
	}
	for i := range grp {
		p.known.Store(GroupResource{grp[i], res[i]}, struct{}{})
	}
	return nil
}

// Clusters implements Store.
func (p *Postgres) Clusters(ctx context.Context) ([]string, error) {
	var out []string
	err := pgQuerier{p.pool}.query(ctx, "SELECT cluster FROM "+pgClusters+" ORDER BY cluster", nil, func(scan func(dest ...any) error) error {
		var c string
		if err := scan(&c); err != nil {
			return err
		}
		out = append(out, c)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("history database: %w", err)
	}
	return out, nil
}

// Resources implements Store.
func (p *Postgres) Resources(ctx context.Context) ([]GroupResource, error) {
	var out []GroupResource
	err := pgQuerier{p.pool}.query(ctx, "SELECT grp, resource FROM "+pgResources, nil, func(scan func(dest ...any) error) error {
		var gr GroupResource
		if err := scan(&gr.Group, &gr.Resource); err != nil {
			return err
		}
		out = append(out, gr)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("history database: %w", err)
	}
	return out, nil
}

// fail classifies an error: a full disk is ErrFull; a server that cannot
// be reached, or that ended the session (a shutdown, a crash, a
// restart), is ErrUnavailable.
func (p *Postgres) fail(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "53100" || pe.Code == "53200": // disk_full, out_of_memory
			p.m.full()
			return fmt.Errorf("%w: %v", ErrFull, err)
		case strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "57P"): // connection exception; shutdown, crash, cannot connect now
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		return err
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	if errors.As(err, &ce) || errors.As(err, &ne) || pgconn.SafeToRetry(err) || pgconn.Timeout(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return err
}

// Query implements Store.
func (p *Postgres) Query(ctx context.Context, q Query) (Page, error) {
	if q.Access.empty() {
		return Page{}, nil
	}
	b := build(&q, false)
	src := &sqlSource{db: pgQuerier{p.pool}, b: &b, from: pgTable, columns: pgHeads, placeholders: dollars}
	return assemble(ctx, &q, src, func(ctx context.Context, seqs []int64) (map[int64]Entry, error) {
		return loadSQL(ctx, pgQuerier{p.pool}, pgTable, dollars, seqs)
	})
}

// pgHeads are the columns of a head in PostgreSQL.
var pgHeads = headColumns("time", "cluster", "octet_length(payload)::bigint")

// Trim implements Store: the entries older than before, then, over nine
// tenths of maxBytes, the oldest until eight tenths.
func (p *Postgres) Trim(ctx context.Context, before time.Time, maxBytes int64) (Trimmed, error) {
	var t Trimmed
	defer func() {
		if t.Age+t.Size > 0 {
			if err := p.appendTrim(ctx, t.Age+t.Size); err != nil && ctx.Err() == nil {
				p.log.Error("history trail: a trim's record was not written: verify reports the entries removed as deleted", "error", err)
			}
		}
	}()
	if !before.IsZero() {
		for {
			n, err := p.delete(ctx, "WHERE time < $1 ORDER BY time, seq LIMIT $2", before.UnixMicro(), pgTrimBatch)
			t.Age += n
			if err != nil {
				return t, p.fail(err)
			}
			if n < pgTrimBatch {
				break
			}
		}
		if _, err := p.TrimStates(ctx, before); err != nil {
			return t, err
		}
	}
	if maxBytes <= 0 {
		return t, nil
	}
	if _, err := p.Stats(ctx); err != nil {
		return t, err
	}
	high, low := maxBytes-maxBytes/10, maxBytes-maxBytes/5
	if p.bytes.Load() <= high {
		t.Room = high - p.bytes.Load()
		return t, nil
	}
	for p.bytes.Load() > low && p.count.Load() > 0 {
		per := max(p.bytes.Load()/p.count.Load(), 1)
		n, err := p.delete(ctx, "ORDER BY time, seq LIMIT $1", min((p.bytes.Load()-low)/per+1, pgTrimBatch))
		t.Size += n
		if err != nil {
			return t, p.fail(err)
		}
		if n == 0 {
			break
		}
	}
	t.Room = max(high-p.bytes.Load(), 0)
	return t, p.trimStatesWithEntries(ctx)
}

// delete removes the entries the subquery's tail selects, keeping the
// counts.
func (p *Postgres) delete(ctx context.Context, tail string, args ...any) (int, error) {
	var n, b int64
	err := p.pool.QueryRow(ctx, "WITH d AS (DELETE FROM "+pgTable+" WHERE seq IN (SELECT seq FROM "+pgTable+" "+tail+") RETURNING bytes) SELECT count(*), coalesce(sum(bytes), 0) FROM d", args...).Scan(&n, &b)
	if err != nil {
		return 0, err
	}
	p.count.Add(-n)
	p.bytes.Add(-b)
	return int(n), nil
}

// Stats implements Store: the counts kept since the last recount, which
// runs every pgResync (other replicas write too).
func (p *Postgres) Stats(ctx context.Context) (Stats, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.synced) >= pgResync {
		var n, b int64
		if err := p.pool.QueryRow(ctx, "SELECT count(*), coalesce(sum(bytes), 0) FROM "+pgTable).Scan(&n, &b); err != nil {
			return Stats{}, fmt.Errorf("history database: %w", err)
		}
		p.count.Store(n)
		p.bytes.Store(b)
		p.synced = time.Now()
	}
	return Stats{Entries: p.count.Load(), Bytes: p.bytes.Load()}, nil
}

// Close implements Store.
func (p *Postgres) Close() error {
	p.pool.Close()
	return nil
}

// pgQuerier adapts a pool to runQuery.
type pgQuerier struct{ pool *pgxpool.Pool }

func (q pgQuerier) queryRow(ctx context.Context, sqlText string, args []any, dest ...any) (bool, error) {
	err := q.pool.QueryRow(ctx, sqlText, args...).Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func (q pgQuerier) query(ctx context.Context, sqlText string, args []any, each func(scan func(dest ...any) error) error) error {
	rows, err := q.pool.Query(ctx, sqlText, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}
