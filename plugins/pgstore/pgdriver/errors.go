package pgdriver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/agenthost/agenthost/abi/driver"
)

// The SQLSTATEs the driver's own functions raise (commit_batch,
// renew_lease): class AH, which PostgreSQL does not use.
const (
	stateConflict = "AH409" // driver.ErrVersionConflict
	stateFenced   = "AH403" // driver.ErrFenced
	stateInvalid  = "AH400" // driver.ErrInvalidArgument
)

// connectError describes a failure to connect to the server of cc: a
// database that does not exist or credentials the server refuses are the
// configuration's fault (ErrInvalidArgument), anything else means the
// server cannot be reached (ErrUnavailable).
func connectError(cc *pgx.ConnConfig, conn string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "3D000":
			return fmt.Errorf("%w: pgstore config url: %s does not exist (create it, or name another)", driver.ErrInvalidArgument, where(cc))
		case pe.Code == "28P01" || pe.Code == "28000":
			return fmt.Errorf("%w: pgstore config url: the server refuses %s: %s", driver.ErrInvalidArgument, where(cc), redact(pe.Message, conn))
		case pe.Code == "42501":
			return fmt.Errorf("%w: pgstore config url: %s: permission denied: %s", driver.ErrInvalidArgument, where(cc), redact(pe.Message, conn))
		}
	}
	return fmt.Errorf("%w: pgstore: cannot reach %s: %s", driver.ErrUnavailable, where(cc), redact(rootCause(err), conn))
}

// rootCause is the text of the innermost error worth showing.
func rootCause(err error) string {
	var ne net.Error
	if errors.As(err, &ne) {
		return ne.Error()
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Message
	}
	return err.Error()
}

// mapError turns an error of a statement into the driver's sentinels. Its
// text is kept (it names no password: statements carry none).
func mapError(err error) error {
	if err == nil {
		return nil
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == stateConflict:
			return fmt.Errorf("%w: %s", driver.ErrVersionConflict, pe.Message)
		case pe.Code == stateFenced:
			return fmt.Errorf("%w: %s", driver.ErrFenced, pe.Message)
		case pe.Code == stateInvalid:
			return fmt.Errorf("%w: %s", driver.ErrInvalidArgument, pe.Message)
		case pe.Code == "23505" && pe.ConstraintName == "idempotency_pkey":
			return fmt.Errorf("%w: an idempotency key of the batch exists (%s)", driver.ErrVersionConflict, pe.Detail)
		case pe.Code == "23505" && strings.HasPrefix(pe.ConstraintName, "messages_"):
			return fmt.Errorf("%w: a message of the batch exists (%s)", driver.ErrInvalidArgument, pe.Detail)
		case pe.Code == "23505" && pe.ConstraintName == "steps_pkey":
			return fmt.Errorf("%w: a concurrent commit wrote the run's next step (%s)", driver.ErrVersionConflict, pe.Detail)
		case pe.Code == "23505" && pe.ConstraintName == "steps_id_key":
			return fmt.Errorf("%w: a step of the batch exists (%s)", driver.ErrInvalidArgument, pe.Detail)
		case pe.Code == "23505" && pe.ConstraintName == "threads_pkey":
			return fmt.Errorf("%w: a concurrent first commit of the thread (%s)", driver.ErrVersionConflict, pe.Detail)
		case strings.HasPrefix(pe.Code, "22"): // data exception: NUL bytes, bad UTF-8, values out of range
			return fmt.Errorf("%w: pgstore: %s", driver.ErrInvalidArgument, pe.Message)
		case pe.Code == "54000": // program_limit_exceeded: e.g. a row too large to index
			return fmt.Errorf("%w: pgstore: %s", driver.ErrTooLarge, pe.Message)
		case transientState(pe.Code):
			return fmt.Errorf("%w: pgstore: %s (SQLSTATE %s)", driver.ErrUnavailable, pe.Message, pe.Code)
		}
		return fmt.Errorf("pgstore: %s (SQLSTATE %s)", pe.Message, pe.Code)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if connectionLost(err) {
		return fmt.Errorf("%w: pgstore: %v", driver.ErrUnavailable, err)
	}
	return fmt.Errorf("pgstore: %w", err)
}

// transientState reports whether SQLSTATE code is a failure that may pass:
// a connection exception, the server shutting down or starting, too many
// connections, a serialization failure or a deadlock.
func transientState(code string) bool {
	switch {
	case strings.HasPrefix(code, "08"): // connection exception
		return true
	}
	switch code {
	case "40001", "40P01", // serialization failure, deadlock detected
		"40003",                   // statement completion unknown (its outcome is the host's to settle)
		"55P03",                   // lock not available (lock_timeout)
		"57014",                   // query canceled (statement_timeout)
		"57P01", "57P02", "57P03", // admin shutdown, crash shutdown, cannot connect now
		"53000", "53100", "53200", "53300", "53400": // insufficient resources: disk full, out of memory, too many connections, configuration limit exceeded
		return true
	}
	return false
}

// retryableState reports whether a statement refused with SQLSTATE code
// was rolled back by a failure that may pass when it is sent again (a
// serialization failure, a deadlock): it is certainly not applied, and it
// is no refusal of what it asks (never a version conflict).
func retryableState(code string) bool {
	return code == "40001" || code == "40P01"
}

// rolledBackMember is a member of a group commit that a serialization
// failure or deadlock rolled back, with the SQLSTATE and message.
type rolledBackMember[T any] struct {
	m          T
	state, msg string
}

// resendRolledBack sends members with send, which answers each one it
// settles and returns those rolled back by a serialization failure or a
// deadlock; those are sent again, with backoff, for up to RetryBudget, and
// then answered with giveUp's error (driver.ErrUnavailable: not applied,
// may be tried again).
func resendRolledBack[T any](members []T, send func([]T) []rolledBackMember[T], answer func(T, error), giveUp func(m T, state, msg string) error) {
	deadline := time.Now().Add(RetryBudget)
	wait := 5 * time.Millisecond
	for len(members) > 0 {
		again := send(members)
		members = members[:0:0]
		last := time.Now().Add(wait).After(deadline)
		for _, a := range again {
			if last {
				answer(a.m, giveUp(a.m, a.state, a.msg))
				continue
			}
			members = append(members, a.m)
		}
		if len(members) > 0 {
			time.Sleep(wait/2 + rand.N(wait/2+1))
			wait = min(2*wait, 200*time.Millisecond)
		}
	}
}

// connectionLost reports whether err means the connection failed (as
// opposed to the server refusing a statement).
func connectionLost(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03" ||
			pe.Severity == "FATAL" || pe.Severity == "PANIC"
	}
	var ne net.Error
	var ce *pgconn.ConnectError
	return errors.As(err, &ne) || errors.As(err, &ce) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || pgconn.SafeToRetry(err) || strings.Contains(err.Error(), "conn closed")
}

// transient reports whether an operation that failed with err may succeed
// if tried again (on another connection).
func transient(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return transientState(pe.Code) || pe.Severity == "FATAL"
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return pgconn.Timeout(err) && !errors.Is(err, context.Canceled)
	}
	return connectionLost(err)
}

// rolledBack reports whether a commit that failed with err certainly did
// not commit, so that it may be sent again: nothing was sent, or the server
// refused it with an ERROR (the implicit transaction then rolls back) that
// may pass (a serialization failure, a deadlock).
func rolledBack(err error) bool {
	if pgconn.SafeToRetry(err) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Severity == "ERROR" {
		return retryableState(pe.Code)
	}
	return false
}
