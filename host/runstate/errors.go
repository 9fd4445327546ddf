package runstate

import (
	"errors"

	"github.com/agenthost/agenthost/abi/record"
)

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
	// ErrTaken: the queued run's inputs were taken by the active run (Take);
	// it cannot be canceled on its own. The error is a *TakenError.
	ErrTaken = errors.New("run's inputs are taken by the active run")
	// ErrNotWaiting: the run waits for no answer to the call (it ended, or
	// never asked for one).
	ErrNotWaiting = errors.New("run is not waiting for this call")
	// ErrCallNotFound: the run never asked about the call.
	ErrCallNotFound = errors.New("no such pending tool call")
	// ErrAnswered: the call was answered otherwise (or the key was used
	// for another answer). The error is an *AnsweredError.
	ErrAnswered = errors.New("tool call already answered")
)

// AnsweredError is an answer refused because the call was decided by
// another answer (or its key was used for another): Recorded is that one.
type AnsweredError struct {
	CallID   string
	Recorded record.Answer
	Reason   string
}

func (e *AnsweredError) Error() string {
	return "tool call " + e.CallID + " " + e.Reason + " (recorded: " + string(e.Recorded.Action) + ")"
}

// Is makes errors.Is(err, ErrAnswered) hold.
func (e *AnsweredError) Is(target error) bool { return target == ErrAnswered }

// TakenError is a Cancel refused because the run's inputs were taken: it
// names the run that took them, the one to cancel instead.
type TakenError struct {
	RunID   string // the run whose cancel was refused
	TakenBy string // the active run that took its inputs
}

func (e *TakenError) Error() string {
	return "run " + e.RunID + "'s inputs are taken by run " + e.TakenBy + "; cancel that run to withdraw them"
}

// Is makes errors.Is(err, ErrTaken) hold.
func (e *TakenError) Is(target error) bool { return target == ErrTaken }
