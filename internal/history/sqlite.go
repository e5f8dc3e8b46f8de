package history

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// sqliteSchema is the embedded store's table. Its key, seq, is the
// entry's time in microseconds times seqSpan plus a number that sets
// apart entries of the same microsecond: the table is in time order, and
// so are the two indexes (which end with the key), so that no index on
// time is needed. The payload is kept as delivered; the other columns
// are what queries select by. The indexes by uid and by namespace are
// kept in memory (memIndex): opening a file that holds such indexes on
// disk drops them. Ids are found again by hash among the ids written
// lately (recent).
const sqliteSchema = `
CREATE TABLE IF NOT EXISTS entries (
  seq INTEGER PRIMARY KEY,
  id TEXT NOT NULL,
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
  payload BLOB NOT NULL,
  cluster TEXT NOT NULL DEFAULT ''
);
DROP INDEX IF EXISTS entries_uid;
DROP INDEX IF EXISTS entries_namespace;
`

// seqSpan is how many entries of one microsecond the key tells apart.
const seqSpan = 1024

// seqOf is the first key of time t, for t within [MinTime, MaxTime];
// times outside it take the key of the nearest end, so that no key
// overflows.
func seqOf(t time.Time) int64 { return clampTime(t).UnixMicro() * seqSpan }

const sqliteInsert = `INSERT INTO entries(seq, id, recorded, rule, type, grp, resource, namespace, name, uid, usr, imp, source, payload, cluster)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// recentIDs is how many of the newest ids a store knows by hash: an
// entry whose id is not among them is written without looking for its
// id on disk. Repeats come within seconds (a retry, a restart, a
// failover, a standby's copy), far within this many newer entries.
const recentIDs = 1 << 17

// walBytes returns the write-ahead log's size limit for a bound of
// maxBytes: a sixteenth of it, from 64 KiB to 4 MiB. The log is
// checkpointed past it and truncated back to it; the bound keeps room
// for it (usedBytes), and the Recorder writes batches of at most half
// of it (BatchBytes).
func walBytes(maxBytes int64) int64 {
	if maxBytes <= 0 {
		return 4 << 20
	}
	return min(max(maxBytes/16, 64<<10), 4<<20)
}

// BatchBytes and BatchEntries bound what the Recorder writes in one
// transaction to a store bounded to maxBytes (0: unbounded), so that a
// transaction fits the log: half of it in payloads, and an entry counted
// at four pages, since it changes a page of each index (the table and
// the time index grow at their end, the id, uid and namespace indexes
// anywhere).
func BatchBytes(maxBytes int64) int64 { return walBytes(maxBytes) / 2 }

// BatchEntries: see BatchBytes.
func BatchEntries(maxBytes int64) int { return int(min(max(walBytes(maxBytes)/(4*4096), 16), 1024)) }

// SQLiteOptions configure OpenSQLite.
type SQLiteOptions struct {
	// Logger receives the store's log lines (a file set aside).
	Logger *slog.Logger
	// ReadOnly opens an existing file for queries only (fieldwatch
	// history --state-dir): nothing is written, a corrupt file is an
	// error.
	ReadOnly bool
	// Metrics count a full disk and a file set aside (nil: not counted).
	Metrics *Metrics
	// MaxBytes is the bound Trim will be given, which sizes the
	// write-ahead log (walBytes).
	MaxBytes int64
	// noTrail writes no trail: the store as it was before the trail,
	// for BenchmarkTrail.
	noTrail bool
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
	count atomic.Int64 // entries, counted at open (by the index's load) then kept
	index *memIndex    // by uid and by namespace
	// clusterCol is what the entries' cluster is read from: the column,
	// or "" for a file opened read-only that was written before it.
	clusterCol string
	// stopLoad stops the index's load; loaded is closed when it is done.
	stopLoad context.CancelFunc
	loaded   chan struct{}

	wmu     sync.Mutex // the writer's state below
	lastSeq int64      // the highest key written
	recent  recent     // the newest ids, by hash, with their keys
	head    *chain     // the chain's last link, nil until read (sqliteHead)
	wal     int64      // walBytes
	// diskLimited is set while the disk, not the bound, limits the size.
	diskLimited atomic.Bool
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
	if err != nil && !opts.ReadOnly && corrupt(err) {
		if err = s.setAside(err); err == nil {
			err = s.open()
		}
	}
	if err != nil {
		return nil, err
	}
	if !opts.ReadOnly {
		s.keepReserve()
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
		q.Add("_pragma", "temp_store(MEMORY)")
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
	var version int
	if err := w.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		_ = w.Close()
		return fmt.Errorf("history database %s: %w", s.path, err)
	}
	if version > SchemaVersion {
		_ = w.Close()
		return fmt.Errorf("history database %s: %w", s.path, newerSchema(version))
	}
	if !s.opts.ReadOnly {
		if _, err := w.ExecContext(ctx, sqliteSchema+sqliteTrailSchema); err != nil {
			_ = w.Close()
			return fmt.Errorf("history database %s: %w", s.path, err)
		}
		if _, err := w.ExecContext(ctx, sqliteStatesSchema); err != nil {
			_ = w.Close()
			return fmt.Errorf("history database %s: %w", s.path, err)
		}
	}
	if err := s.checkCluster(ctx, w); err != nil {
		_ = w.Close()
		return fmt.Errorf("history database %s: %w", s.path, err)
	}
	if !s.opts.ReadOnly && version < SchemaVersion {
		if _, err := w.ExecContext(ctx, "PRAGMA user_version = "+strconv.Itoa(SchemaVersion)); err != nil {
			_ = w.Close()
			return fmt.Errorf("history database %s: %w", s.path, err)
		}
	}
	if !s.opts.ReadOnly {
		if err := s.loadRecent(ctx, w); err != nil {
			_ = w.Close()
			return fmt.Errorf("history database %s: %w", s.path, err)
		}
	}
	r, err := sql.Open("sqlite", s.dsn(true))
	if err != nil {
		_ = w.Close()
		return fmt.Errorf("history database %s: %w", s.path, err)
	}
	r.SetMaxOpenConns(4)
	// The index is loaded from what the file holds now (a read
	// transaction's snapshot, taken here, before anything is written),
	// in the background: a file of a million entries takes seconds.
	tx, err := r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err == nil {
		var newest sql.NullInt64
		if err = tx.QueryRowContext(ctx, "SELECT max(seq) FROM entries").Scan(&newest); err != nil {
			_ = tx.Rollback()
		}
	}
	if err != nil {
		_, _ = w.Close(), r.Close()
		return fmt.Errorf("history database %s: %w", s.path, err)
	}
	s.write, s.read = w, r
	s.count.Store(0)
	s.index = newMemIndex()
	loadCtx, stop := context.WithCancel(context.Background())
	s.stopLoad, s.loaded = stop, make(chan struct{})
	go s.loadIndex(loadCtx, tx, s.index, s.loaded)
	return nil
}

// loadRecent reads the hashes of the newest ids and the highest key.
func (s *SQLite) loadRecent(ctx context.Context, db *sql.DB) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.recent = newRecent(recentIDs)
	s.lastSeq = 0
	s.head = nil
	rows, err := db.QueryContext(ctx, "SELECT seq, id FROM entries ORDER BY seq DESC LIMIT ?", recentIDs)
	if err != nil {
		return err
	}
	defer func() { _ = rows.Close() }()
	type written struct {
		seq int64
		id  string
	}
	var ws []written
	for rows.Next() {
		var w written
		if err := rows.Scan(&w.seq, &w.id); err != nil {
			return err
		}
		if len(ws) == 0 {
			s.lastSeq = w.seq
		}
		ws = append(ws, w)
	}
	for i := len(ws) - 1; i >= 0; i-- { // oldest first: the ring drops those first
		s.recent.add(idHash(ws[i].id), ws[i].seq)
	}
	return rows.Err()
}

// checkCluster adds the cluster column to a file written before it was
// kept (its entries have none); a file opened read-only that lacks it is
// read with "" for every entry's cluster.
func (s *SQLite) checkCluster(ctx context.Context, db *sql.DB) error {
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM pragma_table_info('entries') WHERE name = 'cluster'").Scan(&n); err != nil {
		return err
	}
	switch {
	case n > 0:
		s.clusterCol = "cluster"
	case s.opts.ReadOnly:
		s.clusterCol = "''"
	default:
		if _, err := db.ExecContext(ctx, "ALTER TABLE entries ADD COLUMN cluster TEXT NOT NULL DEFAULT ''"); err != nil {
			return fmt.Errorf("add the cluster column: %w", err)
		}
		s.clusterCol = "cluster"
	}
	return nil
}

// heads are the columns of a head in the embedded store.
func (s *SQLite) heads() string {
	return headColumns("seq / "+strconv.Itoa(seqSpan), s.clusterCol, "length(payload)")
}

// loadIndex loads idx, the index by uid and namespace, with the entries
// tx (a snapshot of the file when it was opened) holds, and counts them.
func (s *SQLite) loadIndex(ctx context.Context, tx *sql.Tx, idx *memIndex, done chan struct{}) {
	defer close(done)
	defer func() { _ = tx.Rollback() }()
	start := time.Now()
	rows, err := tx.QueryContext(ctx, "SELECT seq, uid, namespace, grp, resource, "+s.clusterCol+" FROM entries ORDER BY seq")
	// The resources, by group and resource joined with a 0 byte: looked up
	// without allocating, stored once each.
	resources := map[string]GroupResource{}
	clusters := map[string]struct{}{}
	var key []byte
	n := idx.load(func(seq *int64, uid, namespace *[]byte) bool {
		if err != nil || !rows.Next() {
			return false
		}
		var u, ns, g, r, c sql.RawBytes
		if err = rows.Scan(seq, &u, &ns, &g, &r, &c); err != nil {
			return false
		}
		*uid, *namespace = u, ns
		key = append(append(append(key[:0], g...), 0), r...)
		if _, ok := resources[string(key)]; !ok {
			resources[string(key)] = GroupResource{Group: string(g), Resource: string(r)}
		}
		if _, ok := clusters[string(c)]; !ok {
			clusters[string(c)] = struct{}{}
		}
		return true
	}, func() error {
		if err == nil {
			err = rows.Err()
		}
		if rows != nil {
			_ = rows.Close()
		}
		return err
	}, func(n int) {
		for _, gr := range resources {
			idx.addResource(gr)
		}
		for c := range clusters {
			idx.addCluster(c)
		}
		s.mu.RLock()
		if s.index == idx { // not reset meanwhile
			s.count.Add(int64(n))
		}
		s.mu.RUnlock()
	})
	if err != nil && ctx.Err() == nil {
		s.log.Error("history database: its index cannot be loaded: queries by uid or namespace fail", "file", s.path, "error", err)
		return
	}
	if took := time.Since(start); took > time.Second {
		s.log.Info("history database: index loaded", "file", s.path, "entries", n, "took", took.Round(time.Millisecond).String())
	}
}

// indexTrimmed drops from the index the entries a trim removed: those
// below the oldest key left.
func (s *SQLite) indexTrimmed(ctx context.Context) error {
	var oldest sql.NullInt64
	if err := s.write.QueryRowContext(ctx, "SELECT min(seq) FROM entries").Scan(&oldest); err != nil {
		return err
	}
	if !oldest.Valid {
		s.index.dropBefore(math.MaxInt64)
		return nil
	}
	s.index.dropBefore(oldest.Int64)
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
	s.opts.Metrics.reset()
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
	s.stopLoad()
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
		s.opts.Metrics.full()
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
// makes room (makeRoom) and tries again, up to three times.
func (s *SQLite) Write(ctx context.Context, entries []Entry) (int, error) {
	if s.opts.ReadOnly {
		return 0, errors.New("history database opened read-only")
	}
	var n int
	err := s.use(func() (err error) { n, err = s.insert(ctx, entries); return err })
	for round := 0; round < 3 && errors.Is(err, ErrFull); round++ {
		s.makeRoom(ctx, max(s.count.Load()/100+1, int64(2*len(entries))))
		err = s.use(func() (err error) { n, err = s.insert(ctx, entries); return err })
	}
	if err != nil {
		return 0, err
	}
	s.count.Add(int64(n))
	return n, nil
}

func (s *SQLite) insert(ctx context.Context, entries []Entry) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	last := s.lastSeq
	rows := make([]sqliteRow, 0, len(entries))
	batch := make(map[int64]struct{}, len(entries)) // the ids' hashes
	for i := range entries {
		e := &entries[i]
		h := idHash(e.ID)
		if _, ok := batch[h]; ok && slices.ContainsFunc(rows, func(r sqliteRow) bool { return r.e.ID == e.ID }) {
			continue
		}
		if seq, ok := s.recent.get(h); ok {
			// Probably a repeat: look on disk.
			dup, err := writtenAt(ctx, tx, seq, e.ID)
			if err != nil {
				return 0, err
			}
			if dup {
				continue
			}
		}
		seq := seqOf(e.Time)
		if seq <= last && last-seq < 16*seqSpan {
			seq = last + 1 // the last one's microsecond (or one of those just before)
		}
		rows = append(rows, sqliteRow{e: e, seq: seq, id: h})
		last = max(last, seq)
		batch[h] = struct{}{}
	}
	var head chain
	if !s.opts.noTrail {
		// Before the rows: a chain's start counts the entries outside it.
		if head, err = s.sqliteHead(ctx, tx); err != nil {
			return 0, err
		}
	}
	if last, err = insertRowsTx(ctx, tx, rows, last); err != nil {
		return 0, err
	}
	if !s.opts.noTrail && len(rows) > 0 {
		written, keys := make([]*Entry, len(rows)), make([]int64, len(rows))
		for i := range rows {
			written[i], keys[i] = rows[i].e, rows[i].seq
		}
		if err := insertLinksTx(ctx, tx, head.entryLinks(written, keys)); err != nil {
			return 0, err
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	if !s.opts.noTrail {
		s.head = &head
	}
	s.lastSeq = last
	for i := range rows {
		r := &rows[i]
		s.recent.add(r.id, r.seq)
		s.index.add(r.seq, r.e.UID, r.e.Namespace)
		s.index.addResource(GroupResource{Group: r.e.Group, Resource: r.e.Resource})
		s.index.addCluster(r.e.Cluster)
	}
	return len(rows), nil
}

// sqliteRow is an entry to insert, with its key.
type sqliteRow struct {
	e   *Entry
	seq int64
	id  int64 // idHash
}

// sqliteColumns is the number of columns sqliteInsert sets.
const sqliteColumns = 15

func (r *sqliteRow) appendArgs(args []any) []any {
	e := r.e
	return append(args, r.seq, e.ID, e.Recorded.UnixMicro(), e.Rule, string(e.Type), e.Group, e.Resource, e.Namespace, e.Name,
		e.UID, e.User, e.Impersonated, string(e.Source), e.Payload, e.Cluster)
}

// insertRows is how many rows one statement inserts: a statement costs
// more than a row.
const insertRows = 32

// sqliteInsertMany inserts insertRows rows.
var sqliteInsertMany = "INSERT INTO entries(seq, id, recorded, rule, type, grp, resource, namespace, name, uid, usr, imp, source, payload, cluster) VALUES " +
	strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?), ", insertRows), ", ")

// insertRowsTx inserts rows, insertRows at a time; a chunk whose key is
// taken (an entry written earlier in the same microsecond) goes row by
// row, moving the keys that are taken. It returns the highest key.
func insertRowsTx(ctx context.Context, tx *sql.Tx, rows []sqliteRow, last int64) (int64, error) {
	var one, many *sql.Stmt
	defer func() {
		for _, st := range []*sql.Stmt{one, many} {
			if st != nil {
				_ = st.Close()
			}
		}
	}()
	var err error
	for len(rows) > 0 {
		n := min(len(rows), insertRows)
		if n == insertRows {
			if many == nil {
				if many, err = tx.PrepareContext(ctx, sqliteInsertMany); err != nil {
					return last, err
				}
			}
			args := make([]any, 0, insertRows*sqliteColumns)
			for k := range rows[:n] {
				args = rows[k].appendArgs(args)
			}
			_, err := many.ExecContext(ctx, args...)
			if err == nil {
				rows = rows[n:]
				continue
			}
			if !keyTaken(err) {
				return last, err
			}
		}
		if one == nil {
			if one, err = tx.PrepareContext(ctx, sqliteInsert); err != nil {
				return last, err
			}
		}
		for k := range rows[:n] {
			if last, err = insertOne(ctx, one, &rows[k], last); err != nil {
				return last, err
			}
		}
		rows = rows[n:]
	}
	return last, nil
}

// insertOne inserts one row, moving its key past the ones taken.
func insertOne(ctx context.Context, stmt *sql.Stmt, r *sqliteRow, last int64) (int64, error) {
	for tries := 1; ; tries++ {
		_, err := stmt.ExecContext(ctx, r.appendArgs(make([]any, 0, sqliteColumns))...)
		if err == nil {
			return max(last, r.seq), nil
		}
		switch {
		case !keyTaken(err):
			return last, err
		case tries < 64:
			r.seq++ // an entry of that microsecond written earlier
		case tries == 64:
			r.seq = last + 1 // a crowded microsecond: after the newest
		default:
			return last, err
		}
	}
}

// writtenAt reports whether the entry of key seq has the id id.
func writtenAt(ctx context.Context, tx *sql.Tx, seq int64, id string) (bool, error) {
	var one int
	err := tx.QueryRowContext(ctx, "SELECT 1 FROM entries WHERE seq = ? AND id = ?", seq, id).Scan(&one)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	}
	return false, err
}

// keyTaken reports whether err is a primary key conflict.
func keyTaken(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_CONSTRAINT
}

// recent is the last ids written, by hash, with their keys; it forgets
// the oldest first.
type recent struct {
	keys map[int64]int64 // hash: key
	ring []recentID
	next int
}

type recentID struct{ hash, seq int64 }

func newRecent(n int) recent {
	return recent{keys: make(map[int64]int64, n), ring: make([]recentID, 0, n)}
}

// get returns the key of the newest entry written whose id has hash h.
func (r *recent) get(h int64) (int64, bool) {
	seq, ok := r.keys[h]
	return seq, ok
}

func (r *recent) add(h, seq int64) {
	r.keys[h] = seq
	if len(r.ring) < cap(r.ring) {
		r.ring = append(r.ring, recentID{h, seq})
		return
	}
	if old := r.ring[r.next]; r.keys[old.hash] == old.seq {
		delete(r.keys, old.hash)
	}
	r.ring[r.next] = recentID{h, seq}
	r.next = (r.next + 1) % len(r.ring)
}

// Query implements Store.
func (s *SQLite) Query(ctx context.Context, q Query) (Page, error) {
	if q.Access.empty() {
		return Page{}, nil
	}
	var p Page
	err := s.use(func() (err error) {
		if q.Cluster != "" && s.clusterCol != "cluster" {
			return nil // a file written before clusters were kept: none has one
		}
		b := build(&q, true)
		var src headSource
		if b.index != byTime {
			if err := s.index.wait(ctx); err != nil {
				return err
			}
			src = s.indexSource(&q, &b)
		} else {
			src = &sqlSource{db: sqlDB{s.read}, b: &b, from: "entries", columns: s.heads(), placeholders: keepPlaceholders}
		}
		p, err = assemble(ctx, &q, src, func(ctx context.Context, seqs []int64) (map[int64]Entry, error) {
			return loadSQL(ctx, sqlDB{s.read}, "entries", keepPlaceholders, seqs)
		})
		return err
	})
	return p, err
}

// keepPlaceholders leaves SQLite's ? placeholders as they are.
func keepPlaceholders(s string) string { return s }

// indexedChunk is how many keys a query by uid or namespace reads rows
// of at a time when it filters on more.
const indexedChunk = 256

// indexSource reads the heads of a query by uid or namespace: it walks
// the index newest first and reads the rows of the keys it finds, where
// every condition is checked, until (with conditions the index does not
// order) it went through scanWindow keys.
type indexSource struct {
	s      *SQLite
	f      field
	h      uint32
	lo, hi int64
	b      *built
	conds  string
	args   []any

	seqs   []int64
	walked int
	end    *Cursor // where the window ended
	done   bool
}

func (s *SQLite) indexSource(q *Query, b *built) *indexSource {
	src := &indexSource{s: s, f: fieldUID, h: keyHash(q.UID), lo: math.MinInt64, hi: math.MaxInt64, b: b,
		conds: strings.Join(append(append([]string(nil), b.keyConds...), b.residual...), " AND "),
		args:  append(append([]any(nil), b.keyArgs...), b.resArgs...)}
	if b.index == byNamespace {
		src.f, src.h = fieldNamespace, keyHash(q.Namespace)
	}
	if !q.Since.IsZero() {
		src.lo = seqOf(q.Since)
	}
	if !q.Until.IsZero() {
		src.hi = seqOf(q.Until)
	}
	if q.After != nil {
		src.hi = min(src.hi, q.After.Seq)
	}
	return src
}

func (x *indexSource) next(ctx context.Context, n int, refused []Ref) ([]head, bool, error) {
	var heads []head
	for len(heads) < n && !x.done {
		k := n - len(heads)
		if len(x.b.residual) > 0 {
			k = min(indexedChunk, scanWindow-x.walked)
		}
		x.seqs = x.s.index.walk(x.seqs[:0], x.f, x.h, x.lo, x.hi, k)
		if len(x.seqs) == 0 {
			x.done = true
			break
		}
		x.walked += len(x.seqs)
		x.hi = x.seqs[len(x.seqs)-1]
		args := make([]any, 0, len(x.seqs)+len(x.args))
		for _, seq := range x.seqs {
			args = append(args, seq)
		}
		args = append(args, x.args...)
		conds := x.conds
		if cond, cargs := notRefused(refused); cond != "" {
			conds, args = conds+" AND "+cond, append(args, cargs...)
		}
		sqlText := "SELECT " + x.s.heads() + " FROM entries WHERE seq IN (" + strings.TrimSuffix(strings.Repeat("?, ", len(x.seqs)), ", ") +
			") AND " + conds + " ORDER BY seq DESC"
		err := sqlDB{x.s.read}.query(ctx, sqlText, args, func(scan func(dest ...any) error) error {
			h, err := headOf(scan)
			if err == nil {
				heads = append(heads, h)
			}
			return err
		})
		if err != nil {
			return nil, false, err
		}
		switch {
		case len(x.b.residual) > 0 && x.walked >= scanWindow:
			x.end, x.done = &Cursor{Time: x.hi / seqSpan, Seq: x.hi}, true // the window ends here: the next page goes on
		case len(x.seqs) < k:
			x.done = true
		}
	}
	return heads, !x.done, nil
}

func (x *indexSource) scanned() int { return x.walked }

func (x *indexSource) windowEnd() *Cursor { return x.end }

// Resources implements Store: those of the entries written since the
// file was opened and of those it held then (once the index is loaded).
func (s *SQLite) Resources(ctx context.Context) ([]GroupResource, error) {
	s.mu.RLock()
	idx := s.index
	s.mu.RUnlock()
	if err := idx.wait(ctx); err != nil {
		return nil, err
	}
	return idx.resourceList(), nil
}

// Clusters implements Store: those of the entries written since the file
// was opened and of those it held then (once the index is loaded).
func (s *SQLite) Clusters(ctx context.Context) ([]string, error) {
	s.mu.RLock()
	idx := s.index
	s.mu.RUnlock()
	if err := idx.wait(ctx); err != nil {
		return nil, err
	}
	return idx.clusterList(), nil
}

// Trim implements Store: the entries older than before, then, when the
// entries' pages take more than nine tenths of what maxBytes leaves
// besides the room for the log and the reserve (usedBytes), the oldest
// until they take eight tenths: the file (whose free pages new entries
// reuse) stays within maxBytes, and trimming is not needed again at
// once. maxBytes is lowered to what the disk has (withinDisk).
func (s *SQLite) Trim(ctx context.Context, before time.Time, maxBytes int64) (Trimmed, error) {
	var t Trimmed
	err := s.use(func() (err error) {
		if !before.IsZero() {
			if t.Age, err = s.trimAge(ctx, before); err != nil {
				return err
			}
			if _, err = s.trimStates(ctx, before); err != nil {
				return err
			}
		}
		if maxBytes > 0 {
			// trimSize sizes its deletions by the count of entries,
			// which the index's load completes: before it, a count too
			// low would remove far more than the bound asks.
			if err = s.index.wait(ctx); err == nil {
				t.Size, t.Room, err = s.trimSize(ctx, maxBytes)
			}
		}
		if t.Age+t.Size > 0 {
			err = errors.Join(err, s.indexTrimmed(ctx), s.appendTrim(ctx, t.Age+t.Size))
		}
		return err
	})
	if !s.opts.ReadOnly {
		s.keepReserve()
	}
	return t, err
}

func (s *SQLite) trimAge(ctx context.Context, before time.Time) (int, error) {
	total := 0
	for {
		res, err := s.write.ExecContext(ctx, "DELETE FROM entries WHERE seq IN (SELECT seq FROM entries WHERE seq < ? ORDER BY seq LIMIT ?)",
			seqOf(before), BatchEntries(s.opts.MaxBytes))
		if err != nil {
			return total, err
		}
		n, _ := res.RowsAffected()
		total += int(n)
		s.count.Add(-n)
		if n < int64(BatchEntries(s.opts.MaxBytes)) {
			return total, nil
		}
	}
}

// trimSize applies the size bound; it returns how many entries it
// removed and the room left under the threshold of the next trim.
func (s *SQLite) trimSize(ctx context.Context, maxBytes int64) (int, int64, error) {
	maxBytes = s.withinDisk(maxBytes)
	// The thresholds are on what entries take: the room for the log and
	// the reserve is there however many they are.
	fixed := 2*s.wal + s.reserveBytes()
	budget := max(maxBytes-fixed, 0)
	high, low := fixed+budget-budget/10, fixed+budget-budget/5
	total := 0
	for {
		used, err := s.usedBytes(ctx)
		if err != nil {
			return total, 0, err
		}
		count := s.count.Load()
		if used <= low || (total == 0 && used <= high) {
			return total, max(high-used, 0), nil
		}
		if count == 0 {
			// States alone are left: the oldest go.
			k, err := s.trimStatesWithEntries(ctx, int64(BatchEntries(s.opts.MaxBytes)))
			if err != nil || k == 0 {
				return total, max(high-used, 0), err
			}
			continue
		}
		// What the excess takes at the average entry's size, at least a
		// hundredth of the entries.
		per := max(used/count, 1)
		k, err := s.deleteOldest(ctx, max((used-low)/per+1, count/100+1))
		if err != nil {
			return total, 0, err
		}
		if _, err := s.trimStatesWithEntries(ctx, 0); err != nil {
			return total, 0, err
		}
		total += k
		if k == 0 {
			return total, max(high-used, 0), nil
		}
	}
}

// withinDisk lowers maxBytes to what the file and its log take plus what
// the filesystem has free: the history never takes a disk's last bytes
// (the baseline and the dead letters may share it), and, when something
// else fills the disk, it makes room inside its file, which new entries
// reuse without the file growing.
func (s *SQLite) withinDisk(maxBytes int64) int64 {
	free := diskFree(filepath.Dir(s.path))
	if free < 0 {
		return maxBytes
	}
	var files int64
	for _, f := range []string{s.path, s.path + "-wal", s.reservePath()} {
		if fi, err := os.Stat(f); err == nil {
			files += fi.Size()
		}
	}
	if limit := files + free; maxBytes <= 0 || limit < maxBytes {
		if limit < maxBytes && !s.diskLimited.Swap(true) {
			s.log.Warn("history: the disk has less room than --history-max-bytes: the history is kept within what it has (oldest entries removed)",
				"file", s.path, "maxBytes", maxBytes, "fileBytes", files, "freeBytes", free)
		}
		return limit
	}
	s.diskLimited.Store(false)
	return maxBytes
}

// makeRoom is what Write does on a full disk: it gives the reserve file
// back to the filesystem (the log may hold pages that grow the database
// file when they are checkpointed: with no byte free, neither a
// checkpoint nor a deletion could go through), checkpoints the log
// (whose file keeps its size, so that the next transactions reuse it
// without taking more disk), and removes the n oldest entries, in whose
// pages the new ones go.
func (s *SQLite) makeRoom(ctx context.Context, n int64) {
	if err := os.Remove(s.reservePath()); err == nil {
		s.log.Warn("history: the disk is full: its reserve is given back to make room, and the oldest entries are removed",
			"file", s.path, "reserveBytes", s.reserveBytes())
	}
	_ = s.use(func() error {
		_, _ = s.write.ExecContext(ctx, "PRAGMA wal_checkpoint(RESTART)")
		removed, err := s.deleteOldest(ctx, n)
		if ierr := errors.Join(s.indexTrimmed(ctx), s.appendTrim(ctx, removed)); err == nil {
			err = ierr
		}
		if err != nil {
			return err
		}
		_, err = s.write.ExecContext(ctx, "PRAGMA wal_checkpoint(RESTART)")
		return err
	})
}

// reservePath is the reserve file: disk space the history keeps (zeros)
// to give back when the disk is full.
func (s *SQLite) reservePath() string { return s.path + ".reserve" }

// reserveBytes is the reserve's size: what a checkpoint of a full log
// may grow the file by.
func (s *SQLite) reserveBytes() int64 { return 2 * s.wal }

// keepReserve creates the reserve file when it is missing and the disk
// has room for it (on open, and after the disk filled and emptied
// again).
func (s *SQLite) keepReserve() {
	path := s.reservePath()
	if fi, err := os.Stat(path); err == nil && fi.Size() == s.reserveBytes() {
		return
	}
	if free := diskFree(filepath.Dir(s.path)); free >= 0 && free < s.reserveBytes()+s.wal {
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return
	}
	zeros := make([]byte, 64<<10)
	for left := s.reserveBytes(); left > 0 && err == nil; left -= int64(len(zeros)) {
		_, err = f.Write(zeros[:min(left, int64(len(zeros)))])
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err != nil || cerr != nil {
		_ = os.Remove(path)
	}
}

// deleteOldest removes the n oldest entries, in transactions that fit
// the log (a transaction's pages go to the log before the file).
func (s *SQLite) deleteOldest(ctx context.Context, n int64) (int, error) {
	chunk := int64(BatchEntries(s.opts.MaxBytes))
	total := 0
	for n > 0 {
		res, err := s.write.ExecContext(ctx, "DELETE FROM entries WHERE seq IN (SELECT seq FROM entries ORDER BY seq LIMIT ?)", min(n, chunk))
		if err != nil {
			return total, err
		}
		k, _ := res.RowsAffected()
		s.count.Add(-k)
		total += int(k)
		n -= k
		if k == 0 {
			break
		}
	}
	return total, nil
}

// usedBytes is the database's pages in use plus the room kept for its
// write-ahead log, twice its limit (a transaction, a batch of the
// recorder or a chunk of deleteOldest, is appended before the log is
// checkpointed, and grows the file by as much before the next trim),
// and the reserve file.
func (s *SQLite) usedBytes(ctx context.Context) (int64, error) {
	var pages, free, size int64
	if err := s.write.QueryRowContext(ctx, "SELECT page_count, freelist_count, page_size FROM pragma_page_count(), pragma_freelist_count(), pragma_page_size()").Scan(&pages, &free, &size); err != nil {
		return 0, err
	}
	return (pages-free)*size + 2*s.wal + s.reserveBytes(), nil
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

// Checkpoint writes the log into the database file and truncates it.
func (s *SQLite) Checkpoint(ctx context.Context) error {
	return s.use(func() error {
		_, err := s.write.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)")
		return err
	})
}

// Close implements Store.
func (s *SQLite) Close() error {
	s.mu.RLock()
	stop, loaded := s.stopLoad, s.loaded
	s.mu.RUnlock()
	stop()
	<-loaded
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

// scanEntry reads an entry from the columns seq, recorded, source and
// payload.
func scanEntry(scan func(dest ...any) error) (Entry, error) {
	var seq, recorded int64
	var source string
	var payload []byte
	if err := scan(&seq, &recorded, &source, &payload); err != nil {
		return Entry{}, err
	}
	e, err := ParsePayload(payload, Source(source))
	if err != nil {
		return Entry{}, fmt.Errorf("entry %d: %w", seq, err)
	}
	e.Seq, e.Recorded = seq, time.UnixMicro(recorded).UTC()
	return e, nil
}

// querier is what runQuery needs of a database.
type querier interface {
	queryRow(ctx context.Context, q string, args []any, dest ...any) (bool, error)
	query(ctx context.Context, q string, args []any, each func(scan func(dest ...any) error) error) error
}
