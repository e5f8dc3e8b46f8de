package history

import (
	"context"
	"fmt"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
)

// The states' table, in both stores: a row per state, its whole state
// (object) kept only where a rebuild starts (State.Full), its chain the
// number of states since the last whole one. Apart from the entries'
// table, so that neither's schema changes the other's.
const (
	sqliteStates = "states"
	pgStates     = pgTable + "_states"
)

// statesColumns are the columns a state is written with, in
// stateArgs's order.
const statesColumns = "id, time, type, baseline, grp, version, resource, kind, namespace, name, uid, rv, base, usr, imp, manager, source, chain, ops, object"

// statesSelect are the columns a state is read with (scanState).
const statesSelect = "seq, time, type, baseline, grp, version, resource, kind, namespace, name, uid, rv, base, usr, imp, manager, source, ops, object"

// stateTx is what writeStatesTx needs of a transaction.
type stateTx interface {
	queryRow(ctx context.Context, q string, args []any, dest ...any) (bool, error)
	exec(ctx context.Context, q string, args ...any) (int64, error)
}

// stateSQL is the states' SQL of one store.
type stateSQL struct {
	table        string
	placeholders func(string) string
}

// writeStatesTx writes states in tx: each is left out when its id is
// there already (a Delivered state then takes the users of a Confirmed
// one), and so is one that is not a state (checkState) and a baseline
// of an object with states kept; its whole state is kept when it is the first of its object, when
// its Base is not the resourceVersion of the object's previous state, or
// when FullEvery states came since the last whole one.
func (q stateSQL) writeStatesTx(ctx context.Context, tx stateTx, states []State) (int, error) {
	type last struct {
		rv    string
		chain int
	}
	lasts := map[string]last{} // by uid, within the batch
	written := 0
	for i := range states {
		s := &states[i]
		if checkState(s) != nil {
			continue // Recorder.RecordState counts it
		}
		id := stateID(s)
		var one int
		dup, err := tx.queryRow(ctx, q.placeholders("SELECT 1 FROM "+q.table+" WHERE id = ?"), []any{id}, &one)
		if err != nil {
			return 0, err
		}
		if dup {
			if s.Source == Delivered {
				_, err := tx.exec(ctx, q.placeholders("UPDATE "+q.table+" SET usr = ?, imp = ?, manager = ?, source = ? WHERE id = ? AND source = ?"),
					s.User, s.Impersonated, s.Manager, string(s.Source), id, string(Confirmed))
				if err != nil {
					return 0, err
				}
			}
			continue
		}
		prev, ok := lasts[s.UID]
		if !ok {
			var rv string
			var chain int64
			found, err := tx.queryRow(ctx, q.placeholders("SELECT rv, chain FROM "+q.table+" WHERE uid = ? ORDER BY seq DESC LIMIT 1"), []any{s.UID}, &rv, &chain)
			if err != nil {
				return 0, err
			}
			ok, prev = found, last{rv, int(chain)}
		}
		if s.Baseline && ok {
			continue // the object has states: a baseline is its first only
		}
		var object []byte
		chain := 0
		switch {
		case s.Type == change.Deleted:
			chain = prev.chain + 1
		case s.Type == change.Updated && !s.Baseline && ok && prev.rv == s.Base && prev.chain+1 < FullEvery:
			chain = prev.chain + 1
		default:
			object = s.Full
		}
		if _, err := tx.exec(ctx, q.placeholders("INSERT INTO "+q.table+" ("+statesColumns+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
			stateArgs(s, id, chain, object)...); err != nil {
			return 0, err
		}
		lasts[s.UID] = last{s.ResourceVersion, chain}
		written++
	}
	return written, nil
}

func stateArgs(s *State, id string, chain int, object []byte) []any {
	baseline := 0
	if s.Baseline {
		baseline = 1
	}
	return []any{id, s.Time.UnixMicro(), string(s.Type), baseline, s.Group, s.Version, s.Resource, s.Kind, s.Namespace, s.Name,
		s.UID, s.ResourceVersion, s.Base, s.User, s.Impersonated, s.Manager, string(s.Source), chain, s.Ops, object}
}

// statesOf implements StateStore.StatesOf on db.
func (q stateSQL) statesOf(ctx context.Context, db querier, key ObjectKey, from, until time.Time, fn func(*State) error) error {
	keyCond := "grp = ? AND resource = ? AND namespace = ? AND name = ?"
	keyArgs := []any{key.Group, key.Resource, key.Namespace, key.Name}
	var startTime, startSeq int64
	var found bool
	var err error
	if from.IsZero() {
		found, err = db.queryRow(ctx, q.placeholders("SELECT time, seq FROM "+q.table+" WHERE "+keyCond+" AND object IS NOT NULL ORDER BY time, seq LIMIT 1"),
			keyArgs, &startTime, &startSeq)
	} else {
		found, err = db.queryRow(ctx, q.placeholders("SELECT time, seq FROM "+q.table+" WHERE "+keyCond+" AND object IS NOT NULL AND time <= ? ORDER BY time DESC, seq DESC LIMIT 1"),
			append(keyArgs, clampTime(from).UnixMicro()), &startTime, &startSeq)
	}
	if err != nil {
		return fmt.Errorf("history database: %w", err)
	}
	if !found {
		return nil
	}
	args := append(keyArgs, startTime, startTime, startSeq, clampTime(until).UnixMicro())
	var ferr error
	err = db.query(ctx, q.placeholders("SELECT "+statesSelect+" FROM "+q.table+" WHERE "+keyCond+
		" AND (time > ? OR (time = ? AND seq >= ?)) AND time <= ? ORDER BY time, seq"), args, func(scan func(dest ...any) error) error {
		s, err := scanState(scan)
		if err != nil {
			return err
		}
		if ferr = fn(&s); ferr != nil {
			return ferr
		}
		return nil
	})
	if ferr != nil {
		return ferr
	}
	if err != nil {
		return fmt.Errorf("history database: %w", err)
	}
	return nil
}

// scanState reads a state from the columns of statesSelect.
func scanState(scan func(dest ...any) error) (State, error) {
	var s State
	var tm int64
	var typ, source string
	var baseline int64
	if err := scan(&s.Seq, &tm, &typ, &baseline, &s.Group, &s.Version, &s.Resource, &s.Kind, &s.Namespace, &s.Name,
		&s.UID, &s.ResourceVersion, &s.Base, &s.User, &s.Impersonated, &s.Manager, &source, &s.Ops, &s.Full); err != nil {
		return State{}, err
	}
	s.Time, s.Type, s.Baseline, s.Source = time.UnixMicro(tm).UTC(), change.Type(typ), baseline != 0, Source(source)
	return s, nil
}
