package history

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgStatesSchema is the shared store's table of states (statesql.go),
// added to a database of any earlier schema when it is opened.
const pgStatesSchema = `
CREATE TABLE IF NOT EXISTS ` + pgStates + ` (
  seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  time BIGINT NOT NULL,
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
  ops BYTEA,
  object BYTEA
);
CREATE INDEX IF NOT EXISTS ` + pgStates + `_object ON ` + pgStates + ` (grp, resource, namespace, name, time, seq);
CREATE INDEX IF NOT EXISTS ` + pgStates + `_uid ON ` + pgStates + ` (uid, seq);
CREATE INDEX IF NOT EXISTS ` + pgStates + `_time ON ` + pgStates + ` (time);
`

var pgStateSQL = stateSQL{table: pgStates, placeholders: dollars}

var _ StateStore = &Postgres{}

// createStatesTable creates the states' table under the lock of
// createTable.
func (p *Postgres) createStatesTable(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(7016996765293437281)"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, pgStatesSchema)
		return err
	})
	if err != nil {
		return fmt.Errorf("history database: create table %s: %w", pgStates, err)
	}
	return nil
}

// WriteStates implements StateStore. Replicas sharing the database write
// the same states: the first is kept (with the users of a Delivered
// one). A transaction-scoped advisory lock serialises the writers, so
// that each sees the others' last state of an object.
func (p *Postgres) WriteStates(ctx context.Context, states []State) (int, error) {
	var n int
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(7016996765293437282)"); err != nil {
			return err
		}
		var err error
		n, err = pgStateSQL.writeStatesTx(ctx, pgTx{tx}, states)
		return err
	})
	if err != nil {
		return 0, p.fail(err)
	}
	return n, nil
}

// StatesOf implements StateStore.
func (p *Postgres) StatesOf(ctx context.Context, key ObjectKey, from, until time.Time, fn func(*State) error) error {
	return pgStateSQL.statesOf(ctx, pgQuerier{p.pool}, key, from, until, fn)
}

// TrimStates implements StateStore.
func (p *Postgres) TrimStates(ctx context.Context, before time.Time) (int, error) {
	total := 0
	for {
		tag, err := p.pool.Exec(ctx, "DELETE FROM "+pgStates+" WHERE seq IN (SELECT seq FROM "+pgStates+" WHERE time < $1 LIMIT $2)",
			clampTime(before).UnixMicro(), pgTrimBatch)
		if err != nil {
			return total, p.fail(err)
		}
		total += int(tag.RowsAffected())
		if tag.RowsAffected() < pgTrimBatch {
			return total, nil
		}
	}
}

// trimStatesWithEntries removes the states older than the oldest entry
// kept: the size bound removes states with the entries of their time.
func (p *Postgres) trimStatesWithEntries(ctx context.Context) error {
	var oldest *int64
	if err := p.pool.QueryRow(ctx, "SELECT min(time) FROM "+pgTable).Scan(&oldest); err != nil {
		return p.fail(err)
	}
	if oldest == nil {
		return nil
	}
	_, err := p.TrimStates(ctx, time.UnixMicro(*oldest))
	return err
}

// pgTx adapts a pgx transaction to writeStatesTx.
type pgTx struct{ tx pgx.Tx }

func (t pgTx) queryRow(ctx context.Context, q string, args []any, dest ...any) (bool, error) {
	err := t.tx.QueryRow(ctx, q, args...).Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func (t pgTx) exec(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := t.tx.Exec(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}
