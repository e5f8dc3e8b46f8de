// Package history keeps what fieldwatch fired: one Entry per payload id,
// the payload as the actions received it (after redaction) with the
// fields a query selects by beside it, in a Store that is a real
// database, bounded by size and age.
//
// A Recorder takes payloads from the delivery path without ever blocking
// it: it queues them, bounded, and one goroutine writes them in batches;
// when the queue is full, or the store fails for longer than the queue
// lasts, payloads are dropped from the history and counted, never from
// delivery, and a gap record in the trail says so.
//
// The trail (trail.go, docs/trail.md) chains every entry written to the
// one before by SHA-256 hashes, in the entry's transaction, one chain per
// writer; a Recorder with a Signer seals it with signed checkpoints.
// Export writes it as JSON Lines, and Verify checks it offline.
//
// The embedded store is SQLite through a pure-Go driver (OpenSQLite, a
// file in the state directory, so that the binary stays static); a
// corrupt file is set aside and a new one started. PostgreSQL
// (OpenPostgres) lets replicas share one history. Queries (Query, parsed
// from URL parameters with ParseQuery, every parameter validated) page
// newest first with a cursor, going through at most a scan window of
// entries, matching or not. A page is read in two steps, the entries'
// columns then their payloads, so that what a caller may read
// (Query.Access) and how many bytes a page may hold (Query.MaxBytes,
// Query.Reserve) are decided before any payload is read.
//
// The HTTP API, the page and their authorization live in package
// history/web; the package history itself imports neither client-go nor
// the watcher, the rules or the actions: it works on payload bytes.
package history
