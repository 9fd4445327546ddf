// Package driver is the contract between the agenthost host and a store
// driver: the Go interface a driver satisfies, the batch it commits, and the
// sentinel errors it reports.
//
// A driver stores records; the host owns their meaning. The contract is
// deliberately narrow, in the manner of database/sql/driver:
//
//   - LoadThread returns a thread's header with its version and the runs the
//     header lists as open.
//   - Commit writes a Batch all or nothing, and only if the thread's version
//     is still the one the host read (optimistic concurrency).
//   - GetRuns, GetIdempotency, ReadHistory and ListRuns read what was
//     committed, with read-your-writes.
//   - From protocol version 2, a driver also keeps each run's step log
//     (StepStore) and lists threads (ThreadLister); the host still accepts
//     a driver of version 1 (OldestProtocolVersion) without them.
//
// A driver never decides anything: it does not know which states are terminal
// nor what an absorption is. It must index runs by State (for ListRuns),
// idempotency records by (ThreadID, Key), and messages by (ThreadID, Seq).
//
// Errors are reported with the sentinels below, wrapped with detail
// (fmt.Errorf("%w: ...")), so that callers can test them with errors.Is, also
// after they cross a process boundary.
package driver

import (
	"context"
	"errors"

	"github.com/agenthost/agenthost/abi/record"
)

// Driver is a store driver. Implementations must be safe for concurrent use.
type Driver interface {
	// Info describes the driver.
	Info(ctx context.Context) (Info, error)

	// LoadThread returns the thread's header and the runs named by its
	// OpenRunIDs, in that order. A thread that was never written is returned
	// with Version 0 and no runs, not as an error.
	LoadThread(ctx context.Context, threadID string) (ThreadSnapshot, error)

	// Commit applies b atomically if the thread's current version equals
	// b.ExpectedVersion, and returns the new version (b.Thread.Version).
	// Otherwise it writes nothing and returns ErrVersionConflict. Either every
	// record of the batch is durable (for a durable driver) when Commit
	// returns nil, or none is visible, ever.
	Commit(ctx context.Context, b Batch) (int64, error)

	// GetRuns returns the runs with the given ids, in the order asked. An
	// unknown id is ErrNotFound.
	GetRuns(ctx context.Context, ids []string) ([]record.Run, error)

	// GetIdempotency returns the record for key on thread, or ErrNotFound.
	GetIdempotency(ctx context.Context, threadID, key string) (record.Idempotency, error)

	// ReadHistory returns up to limit messages of the thread with
	// Seq > afterSeq, in Seq order. An empty result means the end.
	ReadHistory(ctx context.Context, threadID string, afterSeq int64, limit int) ([]record.Message, error)

	// ListRuns returns up to limit runs whose State is state and whose ID
	// sorts after the cursor `after` (byte order), in ID order. The empty
	// cursor starts at the beginning; an empty result means the end.
	ListRuns(ctx context.Context, state record.RunState, after string, limit int) ([]record.Run, error)

	// Close releases the driver. Calls after Close return ErrClosed.
	Close(ctx context.Context) error
}

// Info describes a driver.
type Info struct {
	// ProtocolVersion is the store protocol version the driver speaks,
	// between OldestProtocolVersion and ProtocolVersion. Across the plugin
	// boundary it is the version both sides speak: no more than the
	// handshake chose, nor than Speaks says of the served driver.
	ProtocolVersion int
	Name            string
	Version         string
	// Durable claims that a commit acknowledged by the driver survives the
	// driver process being killed (kill -9) and relaunched on the same data,
	// and a power loss: the driver syncs what it acknowledges before it
	// replies.
	Durable bool
	// Leases claims that the driver implements Leaser: several hosts may
	// share its data, each commit of an executing host fenced by its lease.
	Leases bool
}

// ThreadSnapshot is a thread's header with its open runs.
type ThreadSnapshot struct {
	Thread record.Thread
	Runs   []record.Run // the runs named by Thread.OpenRunIDs, in that order
}

// Batch is one commit: every record in it is written together or not at all.
type Batch struct {
	// CommitID identifies the batch; the driver stores it as the thread's
	// LastCommitID (it is already set in Thread).
	CommitID string
	ThreadID string
	// ExpectedVersion is the thread version the batch was computed from
	// (0 for a thread never written).
	ExpectedVersion int64
	// Thread is the new header; Thread.Version is ExpectedVersion+1.
	Thread record.Thread
	// Runs are inserted or replaced, by ID.
	Runs []record.Run
	// Messages are appended; a message whose (ThreadID, Seq) or ID exists is
	// ErrInvalidArgument.
	Messages []record.Message
	// Idempotency records are inserted; one whose (ThreadID, Key) exists is
	// ErrVersionConflict (a concurrent admission won the key).
	Idempotency []record.Idempotency
	// Steps are appended to their runs' step logs (see StepStore); each
	// must be the next Seq of its run, else nothing is written and the
	// commit is ErrVersionConflict. A driver that does not implement
	// StepStore refuses a batch with steps with ErrInvalidArgument.
	Steps []record.Step
	// Fence, when not 0, is the lease epoch of the committing host: the
	// commit is applied only under the rules of Leaser (the lease is live and
	// the thread is not owned by another live lease). A driver without
	// leases refuses a fenced batch with ErrInvalidArgument.
	Fence int64
}

// ProtocolVersion is the store protocol version this package describes.
// Version 2 added step records and thread listing (StepStore,
// ThreadLister, Batch.Steps, Run.TakenBy and Run.TranscriptIDs).
const ProtocolVersion = 2

// OldestProtocolVersion is the oldest store protocol version the host still
// accepts. A driver speaking it keeps working without the capabilities of
// later versions: on a version 1 driver (no StepStore) the host restarts a
// recovered run from its first step and takes no input by injection.
const OldestProtocolVersion = 1

// Speaks returns the store protocol version d speaks as a Go value: 2 if
// it implements StepStore and ThreadLister, else 1. Across the plugin
// boundary a driver speaks no more than this, whatever its Info claims
// (see Info.ProtocolVersion).
func Speaks(d Driver) int {
	_, steps := d.(StepStore)
	_, threads := d.(ThreadLister)
	if steps && threads {
		return 2
	}
	return 1
}

// MaxBatchBytes bounds the encoded size (in the protocol's wire form) of one
// committed batch: the server of the protocol, in the driver process,
// refuses a larger one with ErrTooLarge before the driver sees it.
const MaxBatchBytes = 8 << 20

// StepStore is implemented by a driver that keeps step records (protocol
// version 2; Info.ProtocolVersion reports it across the plugin boundary).
// A driver that does not implement it still works: the host then restarts
// a recovered run from its first step, and takes nothing by injection.
// Steps are a log per run beside history, and their commits leave the
// thread's version alone, so that they never make an admission retry
// (docs/adr/0127). A grouping driver commits them in the same groups as
// batches: many runs' steps share one sync.
type StepStore interface {
	// CommitSteps appends steps to one run's step log without changing the
	// thread's version, so that it never makes an admission to the thread
	// retry. It is applied atomically, and only if, checked inside its own
	// transaction:
	//
	//  1. the run's stored record has State active, and the Owner and
	//     Attempt of b;
	//  2. each step is the next Seq of the run's log (the first one after
	//     the last stored, then consecutive);
	//  3. when b.Fence is not 0, the lease b.Fence is live and owns the
	//     thread (Leaser's rules, without changing the owner).
	//
	// Otherwise nothing is written and it returns ErrVersionConflict (1, 2)
	// or ErrFenced (3). As with Commit, a durable driver's steps are
	// durable when it returns nil.
	CommitSteps(ctx context.Context, b StepBatch) error

	// ReadSteps returns up to limit steps of the run with Seq > afterSeq,
	// in Seq order. An empty result means the end; an unknown run has no
	// steps.
	ReadSteps(ctx context.Context, runID string, afterSeq int64, limit int) ([]record.Step, error)
}

// StepBatch is one CommitSteps call: steps of one active run.
type StepBatch struct {
	ThreadID string
	RunID    string
	// Owner and Attempt are the run's, as its executor started it.
	Owner   string
	Attempt int
	// Fence, when not 0, is the lease epoch of the committing host.
	Fence int64
	Steps []record.Step
}

// ThreadLister is implemented by a driver that can list its threads
// (protocol version 2).
type ThreadLister interface {
	// ListThreads returns up to limit thread headers whose ID sorts after
	// the cursor `after` (byte order), in ID order. The empty cursor starts
	// at the beginning; an empty result means the end.
	ListThreads(ctx context.Context, after string, limit int) ([]record.Thread, error)
}

// ManyCommitter is an optional interface of a driver, found by type
// assertion, like Leaser: it commits several batches, each on its own, and
// returns one version and one error per batch, in order. A driver that
// groups commits implements it so that the batches the host sends together
// share a group; any other driver gets them as concurrent calls of Commit.
type ManyCommitter interface {
	CommitMany(ctx context.Context, bs []Batch) ([]int64, []error)
}

// The sentinel errors of the driver contract.
var (
	// ErrVersionConflict: the thread changed since it was read; nothing was
	// written. The host reloads and retries.
	ErrVersionConflict = errors.New("thread version conflict")
	// ErrNotFound: the record asked for does not exist.
	ErrNotFound = errors.New("not found")
	// ErrInvalidArgument: the request is malformed (empty id, mismatched
	// thread, bad paging); nothing was written.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrTooLarge: the request exceeds the driver's size limits; nothing was
	// written.
	ErrTooLarge = errors.New("too large")
	// ErrUnavailable: the driver cannot be reached. The outcome of a commit
	// that failed this way is unknown until read back (see Thread.LastCommitID).
	ErrUnavailable = errors.New("driver unavailable")
	// ErrClosed: the driver was closed.
	ErrClosed = errors.New("driver closed")
)
