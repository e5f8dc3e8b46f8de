package history

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// sqliteSchema is the embedded store's table. seq is the rowid; idh, a
// 64-bit hash of id, is what finds an id again (its index is a fifth of
// one on id). The payload is kept as delivered; the other columns are
// what queries select by.
const sqliteSchema = `
CREATE TABLE IF NOT EXISTS entries (
  seq INTEGER PRIMARY KEY,
  idh INTEGER NOT NULL,
  id TEXT NOT NULL,
  time INTEGER NOT NULL,
  recorded INTEGER NOT NULL,
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
  payload BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS entries_idh ON entries(idh);
CREATE INDEX IF NOT EXISTS entries_time ON entries(time);
CREATE INDEX IF NOT EXISTS entries_uid ON entries(uid, time);
CREATE INDEX IF NOT EXISTS entries_namespace ON entries(namespace, time);
`

const sqliteInsert = `INSERT INTO entries(idh, id, time, recorded, rule, type, grp, resource, namespace, name, uid, usr, imp, source, payload)
SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?
WHERE NOT EXISTS (SELECT 1 FROM entries WHERE idh = ? AND id = ?)`

// sqliteIndexes names the index each query walks (INDEXED BY: without
// statistics SQLite's planner may pick one that is not in time order).
var sqliteIndexes = map[index]string{byTime: "entries_time", byUID: "entries_uid", byNamespace: "entries_namespace"}

// walBytes returns the write-ahead log's size limit for a bound of
// maxBytes: a sixteenth of it, from 64 KiB to 4 MiB. The log is
// checkpointed past it and truncated back to it; the bound keeps that
// much room for it.
func walBytes(maxBytes int64) int64 {
	if maxBytes <= 0 {
		return 4 << 20
	}
	return min(max(maxBytes/16, 64<<10), 4<<20)
}

// SQLiteOptions configure OpenSQLite.
type SQLiteOptions struct {
	// Logger receives the store's log lines (a file set aside).
	Logger *slog.Logger
	// ReadOnly opens an existing file for queries only (fieldwatch
	// history --state-dir): nothing is written, a corrupt file is an
	// error.
	ReadOnly bool
	// OnReset is called when a corrupt file was set aside.
	OnReset func()
	// MaxBytes is the bound Trim will be given, which sizes the
	// write-ahead log (walBytes).
	MaxBytes int64
}

// SQLite is the embedded store: one SQLite database file (and its
// write-ahead log) through the pure-Go driver modernc.org/sqlite.
type SQLite struct {
	path string
	opts SQLiteOptions
	log  *slog.Logger

	mu    sync.RWMutex // write: reset; read: every use of the handles
	write *sql.DB      // one connection, the writer's
	read  *sql.DB      // queries
	gen   int          // how many times the file was reset
	count atomic.Int64 // entries, counted once at open then kept
	wal   int64        // walBytes
}

var _ Store = &SQLite{}

// OpenSQLite opens (creating it if needed) the history database at path.
// A file that is not a database, or whose tables are corrupt, is set
// aside (renamed to path.corrupt-<time>) with a log line, and a new one
// is started; read-only, it is an error.
func OpenSQLite(path string, opts SQLiteOptions) (*SQLite, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &SQLite{path: path, opts: opts, log: opts.Logger, wal: walBytes(opts.MaxBytes)}
	if opts.ReadOnly {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("history database: %w", err)
		}
	}
	err := s.open()
	if err == nil || opts.ReadOnly || !corrupt(err) {
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	if err := s.setAside(err); err != nil {
		return nil, err
	}
	if err := s.open(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *SQLite) dsn(readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	} else {
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "synchronous(NORMAL)")
		q.Add("_pragma", fmt.Sprintf("journal_size_limit(%d)", s.wal))
		q.Add("_pragma", fmt.Sprintf("wal_autocheckpoint(%d)", max(s.wal/4096, 16)))
	}
	return "file:" + (&url.URL{Path: s.path}).EscapedPath() + "?" + q.Encode()
}

// open opens the handles, creates the table and counts the entries.
func (s *SQLite) open() error {
	w, err := sql.Open("sqlite", s.dsn(s.opts.ReadOnly))
	if err != nil {
		return fmt.Errorf("history database %s: %w", s.path, err)
	}
	w.SetMaxOpenConns(1)
	ctx := context.Background()
	if !s.opts.ReadOnly {
		if _, err := w.ExecContext(ctx, sqliteSchema); err != nil {
			_ = w.Close()
			return fmt.Errorf("history database %s: %w", s.path, err)
		}
	}
	var n int64
	if err := w.QueryRowContext(ctx, "SELECT count(*) FROM entries").Scan(&n); err != nil {
		_ = w.Close()
		return fmt.Errorf("history database %s: %w", s.path, err)
	}
	r, err := sql.Open("sqlite", s.dsn(true))
	if err != nil {
		_ = w.Close()
		return fmt.Errorf("history database %s: %w", s.path, err)
	}
	r.SetMaxOpenConns(4)
	s.write, s.read = w, r
	s.count.Store(n)
	return nil
}

// corrupt reports whether err says the file is not a database or is
// corrupt.
func corrupt(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB:
		return true
	}
	return false
}

// full reports whether err says the disk or the database is full.
func full(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_FULL
}

// setAside renames the corrupt file (and its log) out of the way.
func (s *SQLite) setAside(cause error) error {
	aside := s.path + ".corrupt-" + time.Now().UTC().Format("20060102T150405Z")
	if err := os.Rename(s.path, aside); err != nil {
		return fmt.Errorf("history database %s is corrupt (%v) and cannot be set aside: %w", s.path, cause, err)
	}
	for _, suffix := range []string{"-wal", "-shm"} {
		if err := os.Rename(s.path+suffix, aside+suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("history database: could not set aside", "file", s.path+suffix, "error", err)
		}
	}
	s.log.Error("history database is corrupt: set aside, and a new one started (the entries it held are not in the new history)",
		"file", s.path, "setAside", aside, "error", cause)
	if s.opts.OnReset != nil {
		s.opts.OnReset()
	}
	return nil
}

// reset sets the corrupt file aside and opens a new one, unless that
// was done since gen (by another use that failed at the same time).
func (s *SQLite) reset(gen int, cause error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen != gen {
		return fmt.Errorf("%w: %v", ErrReset, cause)
	}
	s.gen++
	_ = s.write.Close()
	_ = s.read.Close()
	if err := s.setAside(cause); err != nil {
		return err
	}
	if err := s.open(); err != nil {
		return err
	}
	return fmt.Errorf("%w: %v", ErrReset, cause)
}

// use runs op on the handles, then deals with its error: a corrupt
// file is set aside and a new one opened (ErrReset), a full disk or
// database is ErrFull.
func (s *SQLite) use(op func() error) error {
	s.mu.RLock()
	gen := s.gen
	err := op()
	s.mu.RUnlock()
	switch {
	case err == nil:
		return nil
	case corrupt(err) && !s.opts.ReadOnly:
		return s.reset(gen, err)
	case full(err):
		return fmt.Errorf("%w: %v", ErrFull, err)
	}
	return err
}

// idHash is the 64-bit FNV-1a hash of an id, as a signed integer.
func idHash(id string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	return int64(h.Sum64())
}

// Write implements Store. When the disk or the database is full, it
// checkpoints the log (truncating it frees its disk space), removes the
// oldest hundredth of the entries, and tries once more.
func (s *SQLite) Write(ctx context.Context, entries []Entry) (int, error) {
	if s.opts.ReadOnly {
		return 0, errors.New("history database opened read-only")
	}
	var n int
	err := s.use(func() (err error) { n, err = s.insert(ctx, entries); return err })
	if errors.Is(err, ErrFull) {
		_ = s.use(func() error {
			_, _ = s.write.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)")
			_, err := s.deleteOldest(ctx, s.count.Load()/100+1)
			return err
		})
		err = s.use(func() (err error) { n, err = s.insert(ctx, entries); return err })
	}
	if err != nil {
		return 0, err
	}
	s.count.Add(int64(n))
	return n, nil
}

func (s *SQLite) insert(ctx context.Context, entries []Entry) (int, error) {
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	stmt, err := tx.PrepareContext(ctx, sqliteInsert)
	if err != nil {
		return 0, err
	}
	defer func() { _ = stmt.Close() }()
	n := 0
	for i := range entries {
		e := &entries[i]
		h := idHash(e.ID)
		res, err := stmt.ExecContext(ctx, h, e.ID, e.Time.UnixMicro(), e.Recorded.UnixMicro(), e.Rule, string(e.Type),
			e.Group, e.Resource, e.Namespace, e.Name, e.UID, e.User, e.Impersonated, string(e.Source), e.Payload, h, e.ID)
		if err != nil {
			return 0, err
		}
		if k, _ := res.RowsAffected(); k > 0 {
			n++
		}
	}
	return n, tx.Commit()
}

// Query implements Store.
func (s *SQLite) Query(ctx context.Context, q Query) (Page, error) {
	var p Page
	err := s.use(func() (err error) {
		p, err = runQuery(ctx, sqlDB{s.read}, &q, func(b *built) string {
			return "entries INDEXED BY " + sqliteIndexes[b.index]
		}, func(s string) string { return s })
		return err
	})
	return p, err
}

// Trim implements Store: the entries older than before, then, when the
// pages in use and the log take more than nine tenths of maxBytes, the
// oldest until they take eight tenths: the file (whose free pages new
// entries reuse) stays within maxBytes, and trimming is not needed again
// at once.
func (s *SQLite) Trim(ctx context.Context, before time.Time, maxBytes int64) (Trimmed, error) {
	var t Trimmed
	err := s.use(func() (err error) {
		if !before.IsZero() {
			if t.Age, err = s.trimAge(ctx, before); err != nil {
				return err
			}
		}
		if maxBytes > 0 {
			t.Size, err = s.trimSize(ctx, maxBytes)
		}
		return err
	})
	return t, err
}

// trimBatch is how many entries one DELETE removes at most: short
// transactions, so that queries and writes are not held up.
const trimBatch = 5000

func (s *SQLite) trimAge(ctx context.Context, before time.Time) (int, error) {
	total := 0
	for {
		res, err := s.write.ExecContext(ctx, "DELETE FROM entries WHERE seq IN (SELECT seq FROM entries INDEXED BY entries_time WHERE time < ? ORDER BY time, seq LIMIT ?)",
			before.UnixMicro(), trimBatch)
		if err != nil {
			return total, err
		}
		n, _ := res.RowsAffected()
		total += int(n)
		s.count.Add(-n)
		if n < trimBatch {
			return total, nil
		}
	}
}

func (s *SQLite) trimSize(ctx context.Context, maxBytes int64) (int, error) {
	high, low := maxBytes-maxBytes/10, maxBytes-maxBytes/5
	total := 0
	for {
		used, err := s.usedBytes(ctx)
		if err != nil {
			return total, err
		}
		count := s.count.Load()
		if count == 0 || used <= low || (total == 0 && used <= high) {
			return total, nil
		}
		// What the excess takes at the average entry's size, at least a
		// hundredth of the entries (index pages free up slowly).
		per := max(used/count, 1)
		k, err := s.deleteOldest(ctx, min(max((used-low)/per+1, count/100+1), trimBatch))
		if err != nil {
			return total, err
		}
		total += k
		if k == 0 {
			return total, nil
		}
	}
}

// deleteOldest removes the n oldest entries.
func (s *SQLite) deleteOldest(ctx context.Context, n int64) (int, error) {
	res, err := s.write.ExecContext(ctx, "DELETE FROM entries WHERE seq IN (SELECT seq FROM entries INDEXED BY entries_time ORDER BY time, seq LIMIT ?)", n)
	if err != nil {
		return 0, err
	}
	k, _ := res.RowsAffected()
	s.count.Add(-k)
	return int(k), nil
}

// usedBytes is the database's pages in use plus the room kept for its
// write-ahead log.
func (s *SQLite) usedBytes(ctx context.Context) (int64, error) {
	var pages, free, size int64
	if err := s.write.QueryRowContext(ctx, "SELECT page_count, freelist_count, page_size FROM pragma_page_count(), pragma_freelist_count(), pragma_page_size()").Scan(&pages, &free, &size); err != nil {
		return 0, err
	}
	return (pages-free)*size + s.wal, nil
}

// Stats implements Store.
func (s *SQLite) Stats(ctx context.Context) (Stats, error) {
	var used int64
	err := s.use(func() (err error) { used, err = s.usedBytes(ctx); return err })
	if err != nil {
		return Stats{}, err
	}
	return Stats{Entries: s.count.Load(), Bytes: used}, nil
}

// Close implements Store.
func (s *SQLite) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(s.read.Close(), s.write.Close())
}

// Path returns the database file's path.
func (s *SQLite) Path() string { return s.path }

// sqlDB adapts *sql.DB to the queries runQuery makes.
type sqlDB struct{ db *sql.DB }

func (d sqlDB) queryRow(ctx context.Context, q string, args []any, dest ...any) (bool, error) {
	err := d.db.QueryRowContext(ctx, q, args...).Scan(dest...)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func (d sqlDB) query(ctx context.Context, q string, args []any, each func(scan func(dest ...any) error) error) error {
	rows, err := d.db.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		if err := each(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}

// querier is what runQuery needs of a database.
type querier interface {
	queryRow(ctx context.Context, q string, args []any, dest ...any) (bool, error)
	query(ctx context.Context, q string, args []any, each func(scan func(dest ...any) error) error) error
}

// runQuery runs q: the window bound first when q filters on what its
// index does not order, then the page. from names the table (and
// index); placeholders rewrites the ? placeholders.
func runQuery(ctx context.Context, db querier, q *Query, from func(*built) string, placeholders func(string) string) (Page, error) {
	b := build(q)
	limit := q.limit()
	var bound *Cursor
	if len(b.residual) > 0 {
		sqlText, args := b.boundary(from(&b))
		var c Cursor
		ok, err := db.queryRow(ctx, placeholders(sqlText), args, &c.Time, &c.Seq)
		if err != nil {
			return Page{}, err
		}
		if ok {
			bound = &c
		}
	}
	sqlText, args := b.page(from(&b), "seq, recorded, source, payload", limit+1, bound)
	var p Page
	err := db.query(ctx, placeholders(sqlText), args, func(scan func(dest ...any) error) error {
		var seq, recorded int64
		var source string
		var payload []byte
		if err := scan(&seq, &recorded, &source, &payload); err != nil {
			return err
		}
		e, err := ParsePayload(payload, Source(source))
		if err != nil {
			return fmt.Errorf("entry %d: %w", seq, err)
		}
		e.Seq, e.Recorded = seq, time.UnixMicro(recorded).UTC()
		p.Entries = append(p.Entries, e)
		return nil
	})
	if err != nil {
		return Page{}, err
	}
	switch {
	case len(p.Entries) > limit:
		p.Entries = p.Entries[:limit]
		c := CursorOf(&p.Entries[limit-1])
		p.Next = &c
	case bound != nil:
		p.Next = bound // the window ends here: the next page goes on
	}
	return p, nil
}
