package history

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"
)

// sqliteStatesSchema is the embedded store's table of states (statesql.go),
// added to a file of any earlier schema when it is opened.
const sqliteStatesSchema = `
CREATE TABLE IF NOT EXISTS ` + sqliteStates + ` (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  time INTEGER NOT NULL,
  type TEXT NOT NULL,
  baseline INTEGER NOT NULL,
  grp TEXT NOT NULL,
  version TEXT NOT NULL,
  resource TEXT NOT NULL,
  kind TEXT NOT NULL,
  namespace TEXT NOT NULL,
  name TEXT NOT NULL,
  uid TEXT NOT NULL,
  rv TEXT NOT NULL,
  base TEXT NOT NULL,
  usr TEXT NOT NULL,
  imp TEXT NOT NULL,
  manager TEXT NOT NULL,
  source TEXT NOT NULL,
  chain INTEGER NOT NULL,
  ops BLOB,
  object BLOB
);
CREATE INDEX IF NOT EXISTS states_object ON ` + sqliteStates + ` (grp, resource, namespace, name, time, seq);
CREATE INDEX IF NOT EXISTS states_uid ON ` + sqliteStates + ` (uid, seq);
CREATE INDEX IF NOT EXISTS states_time ON ` + sqliteStates + ` (time);
`

var sqliteStateSQL = stateSQL{table: sqliteStates, placeholders: keepPlaceholders}

var _ StateStore = &SQLite{}

// WriteStates implements StateStore.
func (s *SQLite) WriteStates(ctx context.Context, states []State) (int, error) {
	if s.opts.ReadOnly {
		return 0, errors.New("history database opened read-only")
	}
	var n int
	err := s.use(func() error {
		s.wmu.Lock()
		defer s.wmu.Unlock()
		tx, err := s.write.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		stx := &sqlTx{tx: tx}
		defer stx.close()
		if n, err = sqliteStateSQL.writeStatesTx(ctx, stx, states); err != nil {
			return err
		}
		return tx.Commit()
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// StatesOf implements StateStore.
func (s *SQLite) StatesOf(ctx context.Context, key ObjectKey, from, until time.Time, fn func(*State) error) error {
	err := s.use(func() error {
		return sqliteStateSQL.statesOf(ctx, sqlDB{s.read}, key, from, until, fn)
	})
	if err != nil && s.opts.ReadOnly && strings.Contains(err.Error(), "no such table: "+sqliteStates) {
		return nil // a file of a fieldwatch that kept no states
	}
	return err
}

// TrimStates implements StateStore.
func (s *SQLite) TrimStates(ctx context.Context, before time.Time) (int, error) {
	total := 0
	err := s.use(func() error {
		var err error
		total, err = s.trimStates(ctx, before)
		return err
	})
	return total, err
}

// trimStates removes the states older than before, in transactions that
// fit the log.
func (s *SQLite) trimStates(ctx context.Context, before time.Time) (int, error) {
	total := 0
	for {
		res, err := s.write.ExecContext(ctx, "DELETE FROM "+sqliteStates+" WHERE seq IN (SELECT seq FROM "+sqliteStates+" WHERE time < ? LIMIT ?)",
			clampTime(before).UnixMicro(), BatchEntries(s.opts.MaxBytes))
		if err != nil {
			return total, err
		}
		n, _ := res.RowsAffected()
		total += int(n)
		if n < int64(BatchEntries(s.opts.MaxBytes)) {
			return total, nil
		}
	}
}

// trimStatesWithEntries removes the states older than the oldest entry
// kept, or, with no entry kept, the n oldest states: the size bound
// removes states with the entries of their time.
func (s *SQLite) trimStatesWithEntries(ctx context.Context, n int64) (int, error) {
	var oldest sql.NullInt64
	if err := s.write.QueryRowContext(ctx, "SELECT min(seq) FROM entries").Scan(&oldest); err != nil {
		return 0, err
	}
	if oldest.Valid {
		return s.trimStates(ctx, time.UnixMicro(oldest.Int64/seqSpan))
	}
	res, err := s.write.ExecContext(ctx, "DELETE FROM "+sqliteStates+" WHERE seq IN (SELECT seq FROM "+sqliteStates+" ORDER BY time LIMIT ?)",
		min(n, int64(BatchEntries(s.opts.MaxBytes))))
	if err != nil {
		return 0, err
	}
	k, _ := res.RowsAffected()
	return int(k), nil
}

// sqlTx adapts *sql.Tx to writeStatesTx, preparing each statement once
// a transaction (BenchmarkWriteStates).
type sqlTx struct {
	tx    *sql.Tx
	stmts map[string]*sql.Stmt
}

func (t *sqlTx) stmt(ctx context.Context, q string) (*sql.Stmt, error) {
	if st, ok := t.stmts[q]; ok {
		return st, nil
	}
	st, err := t.tx.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	if t.stmts == nil {
		t.stmts = map[string]*sql.Stmt{}
	}
	t.stmts[q] = st
	return st, nil
}

func (t *sqlTx) close() {
	for _, st := range t.stmts {
		_ = st.Close()
	}
}

func (t *sqlTx) queryRow(ctx context.Context, q string, args []any, dest ...any) (bool, error) {
	st, err := t.stmt(ctx, q)
	if err != nil {
		return false, err
	}
	err = st.QueryRowContext(ctx, args...).Scan(dest...)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func (t *sqlTx) exec(ctx context.Context, q string, args ...any) (int64, error) {
	st, err := t.stmt(ctx, q)
	if err != nil {
		return 0, err
	}
	res, err := st.ExecContext(ctx, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
