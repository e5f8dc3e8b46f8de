package history

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Store keeps the history. Its methods are safe for concurrent use; a
// Recorder is its one writer.
type Store interface {
	// Write records entries, each once per id: an entry whose id is there
	// already is left out (with PostgreSQL, a Delivered entry replaces a
	// Confirmed one of the same id). It returns how many were written.
	// On an error none of them was.
	Write(ctx context.Context, entries []Entry) (int, error)
	// Query returns a page of entries, newest first.
	Query(ctx context.Context, q Query) (Page, error)
	// Resources returns the resources the history's entries are of, in
	// no order: every one that has entries, and maybe some whose entries
	// were removed.
	Resources(ctx context.Context) ([]GroupResource, error)
	// Clusters returns the clusters the history's entries are of
	// (Entry.Cluster, "" for entries without one), sorted: every one
	// that has entries, and maybe some whose entries were removed.
	Clusters(ctx context.Context) ([]string, error)
	// Trim removes the oldest entries until the store holds none older
	// than before (when not zero) and at most maxBytes (when positive);
	// see Stats for what the bytes are.
	Trim(ctx context.Context, before time.Time, maxBytes int64) (Trimmed, error)
	// Stats returns the store's size.
	Stats(ctx context.Context) (Stats, error)
	// Close closes the store.
	Close() error
}

// Trimmed is what a Trim removed.
type Trimmed struct {
	// Age and Size count the entries removed for each bound.
	Age, Size int
	// Room is how many bytes may be added before the size bound (when
	// given) calls for a trim again; the SQLite store's bound is lowered
	// to what the disk has.
	Room int64
}

// Stats is a store's size.
type Stats struct {
	// Entries is how many entries it holds.
	Entries int64
	// Bytes is what the bound --history-max-bytes is compared with: for
	// SQLite the pages of the database file in use and the room kept for
	// its write-ahead log (the file does not shrink: new entries reuse
	// the pages of removed ones); for PostgreSQL the stored bytes of the
	// entries' rows.
	Bytes int64
}

// SchemaVersion is the version of the stores' tables this fieldwatch
// writes (SQLite's user_version, the schema row of PostgreSQL's
// fieldwatch_history_meta; stores from before it have none). A store of
// a higher version was written by a newer fieldwatch: opening it fails
// with ErrNewerSchema rather than reading it wrong or changing it.
const SchemaVersion = 1

// ErrNewerSchema is returned (wrapped) by OpenSQLite and OpenPostgres for
// a store a newer fieldwatch wrote.
var ErrNewerSchema = errors.New("the history database was written by a newer fieldwatch")

// newerSchema is the error of a store of version v.
func newerSchema(v int) error {
	return fmt.Errorf("%w (schema version %d; this one knows versions up to %d): use that version, or the state from before the upgrade", ErrNewerSchema, v, SchemaVersion)
}

// ErrFull is returned (wrapped) by Write when the disk or the database
// is full: removing old entries may make room.
var ErrFull = errors.New("history store full")

// ErrUnavailable is returned (wrapped) by Write when the store cannot
// be reached: its server is down, restarting or cut off. The write may
// or may not have been committed; writing the same entries again is
// safe (one entry per id).
var ErrUnavailable = errors.New("history store unavailable")

// ErrReset is returned (wrapped) by Write and Query when the store found
// its file corrupt and started a new one: the entries of the failed
// write were not recorded, and may be written again.
var ErrReset = errors.New("history store reset")
