// Package pgdriver is the store driver on PostgreSQL (github.com/jackc/pgx/v5),
// served as a subprocess by the pgstore plugin (plugins/pgstore), and built
// into the host as the driver "pgstore". Several hosts may share one
// database: the driver implements driver.Leaser.
//
// Where to start: Open (with ParseConfig, or the Factory a host opens it
// through) connects a pool, applies the schema migrations (schema.go) and
// returns a *Driver. commit.go holds Commit: one statement, one round trip,
// one transaction, and CommitMany; lease.go the leases, fences and notices.
//
// # Configuration
//
//	url              the server and database (required), a postgres:// URL or
//	                 a key=value connection string
//	schema           the schema every table lives in (default agenthost); one
//	                 database holds as many independent stores as schemas
//	max_conns        the pool's size (default 16)
//	connect_timeout  Go duration, per connection attempt (default 10s)
//
// A bad url, a database that does not exist or a server that refuses the
// credentials is an error wrapping driver.ErrInvalidArgument; a server that
// cannot be reached wraps driver.ErrUnavailable. Neither ever echoes a
// password.
//
// # Schema
//
// Every table lives in the configured schema, created at open with the
// versioned migrations of schema.go, each in its own transaction under a
// transaction-scoped advisory lock (pg_advisory_xact_lock), so that several
// hosts opening the same schema at once apply each exactly once; the applied
// versions are in schema_migrations. A schema migrated by a newer driver is
// refused. No session advisory lock is taken, ever: a dropped connection
// would release it silently.
//
//	threads      (id PK, version, owner, last_commit_id, last_seq, open_run_ids, payload)
//	runs         (id PK, thread_id, state, seq, payload), index (state, id) for ListRuns
//	messages     (thread_id, seq) PK, id UNIQUE, payload: history paging by the key
//	idempotency  (thread_id, key) PK, payload: the key is the idempotency check
//	leases       (epoch PK from the sequence lease_epochs, holder, expires_at, released)
//
// Ids are text COLLATE "C", so that ListRuns pages in byte order. Payloads
// are the records' protobuf encodings (package abi/storepb).
//
// # Commits
//
// A commit is one call of the function commit_batch, in one implicit
// transaction: it locks the thread's row, checks the version (first), then
// the fence of driver.Leaser by the database's clock (clock_timestamp(),
// not now(): now() is the transaction's start, and a commit may wait on the
// thread's row lock), then writes the header, the keys, the messages and
// the runs. A refusal raises an error with a SQLSTATE of the driver's own
// (AH409 conflict, AH403 fenced, AH400 invalid), so the transaction
// rolls back whole and the error says which; a duplicate idempotency key is
// the primary key's unique violation, reported as driver.ErrVersionConflict.
//
// A group (CommitMany) is one transaction of commit_group calls, one per
// round of distinct threads (the first batch of each thread, then the
// second, ...): each locks its threads' rows in id order, checks every
// batch as commit_batch does and writes those that pass with one statement
// per table, without subtransactions; a refused batch writes nothing. When
// a write fails (a unique violation) the transaction rolls back whole, and
// the group is sent again as one commit_batch3_try per batch, each in a
// subtransaction, which gives every batch its own outcome (ADR 0155).
// The payload columns hold the records' storepb encodings, which is what
// the host sends: a group that comes over the store protocol is stored
// with its records' bytes as they arrived (driverrpc.EncodedCommitter, as
// badgerstore), not decoded and encoded again.
//
// # Errors and retries
//
// Reads retry transient failures (a dropped connection, a server shutting
// down or restarting, a serialization failure or deadlock) with backoff, up
// to RetryBudget. A commit is retried only when its failure proves that
// nothing was committed: the connection could not be had, nothing was
// sent, or the server answered with an error that rolled the transaction
// back (serialization failure, deadlock). A commit whose outcome is unknown
// (the connection dropped after it was sent) is never retried blindly: it
// returns driver.ErrUnavailable, and the host settles it by reading the
// thread's LastCommitID. In a group commit (CommitMany, CommitSteps) a
// member whose subtransaction a serialization failure or a deadlock rolled
// back is sent again with backoff, up to RetryBudget, then reported as
// driver.ErrUnavailable: it is never a version conflict, which the host
// would take for "the run moved on" and stop it. Failures that may pass
// (lock or statement timeouts, insufficient resources, a statement whose
// completion is unknown) are driver.ErrUnavailable too.
package pgdriver
