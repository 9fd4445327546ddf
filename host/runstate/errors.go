package runstate

import "errors"

// The reducer's errors. Each is returned wrapped with detail; test for them
// with errors.Is. When Reduce returns an error, its Effects are empty.
var (
	// ErrInvalid: the mutation or snapshot is malformed.
	ErrInvalid = errors.New("invalid mutation")
	// ErrBusy: the input policy rejected the input because the thread is busy.
	ErrBusy = errors.New("busy")
	// ErrKeyReused: the idempotency key was used before with other content.
	ErrKeyReused = errors.New("key reused")
	// ErrDecisionRequired: the thread is busy and the admission carries no
	// policy decision; ask the policy and reduce again.
	ErrDecisionRequired = errors.New("policy decision required")
	// ErrRunNotFound: the run is not in the snapshot.
	ErrRunNotFound = errors.New("run not found")
	// ErrRunTerminal: the run has already ended.
	ErrRunTerminal = errors.New("run is terminal")
	// ErrNotQueued: the run is not queued.
	ErrNotQueued = errors.New("run is not queued")
	// ErrNotActive: the run is not active.
	ErrNotActive = errors.New("run is not active")
	// ErrNotOwner: the run is active under another owner.
	ErrNotOwner = errors.New("run is owned by another host")
	// ErrThreadActive: the thread already has an active run.
	ErrThreadActive = errors.New("thread already has an active run")
	// ErrNothingQueued: the thread has no queued run to start.
	ErrNothingQueued = errors.New("no queued run")
	// ErrAbsorbNotCompleted: a terminal commit that does not complete the run
	// carried absorb entries.
	ErrAbsorbNotCompleted = errors.New("only a completed run may absorb")
)
