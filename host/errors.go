package host

import (
	"errors"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
	"github.com/agenthost/agenthost/host/runstate"
)

// The errors the runtime's methods return, wrapped with detail: test for
// them with errors.Is. They are the errors of the layers below under one
// name each, so a caller of the runtime needs no other package to tell them
// apart.
var (
	// ErrClosed: Submit after Close has begun.
	ErrClosed = errors.New("runtime closed")
	// ErrBusy: the thread's input policy rejected the input (the thread is
	// busy).
	ErrBusy = runstate.ErrBusy
	// ErrKeyReused: the idempotency key was used on the thread for other
	// content.
	ErrKeyReused = runstate.ErrKeyReused
	// ErrNotQueued: Cancel of a run that is not queued.
	ErrNotQueued = runstate.ErrNotQueued
	// ErrTaken: Cancel of a queued run whose inputs the active run took;
	// the error is a *TakenError naming that run, the one to cancel.
	ErrTaken = runstate.ErrTaken
	// ErrNotFound: no such run (or thread).
	ErrNotFound = driver.ErrNotFound
	// ErrInvalid: a malformed argument (an empty or too long id, ...).
	ErrInvalid = runstate.ErrInvalid
	// ErrTooLarge: a record too large for the store.
	ErrTooLarge = driver.ErrTooLarge
	// ErrUnavailable: the store is unavailable for now; retry (with the same
	// idempotency key).
	ErrUnavailable = driver.ErrUnavailable
)

// TakenError is the error of a Cancel refused with ErrTaken.
type TakenError = runstate.TakenError

// Limits on the identifiers the runtime accepts.
const (
	MaxIDLen  = runstate.MaxIDLen  // thread and run ids
	MaxKeyLen = runstate.MaxKeyLen // idempotency keys
)

// IsTerminal reports whether a run in state st has ended.
func IsTerminal(st record.RunState) bool { return runstate.IsTerminal(st) }

// kindError is an error of a lower layer that also answers errors.Is for
// the runtime's name of it.
type kindError struct {
	kind error
	err  error
}

func (e *kindError) Error() string   { return e.err.Error() }
func (e *kindError) Unwrap() []error { return []error{e.err, e.kind} }

// speak names an error of a lower layer in the runtime's vocabulary.
func speak(err error) error {
	for _, k := range [...]struct{ kind, from error }{
		{ErrNotFound, runstate.ErrRunNotFound},
		{ErrInvalid, driver.ErrInvalidArgument},
	} {
		if err != nil && errors.Is(err, k.from) && !errors.Is(err, k.kind) {
			return &kindError{kind: k.kind, err: err}
		}
	}
	return err
}
