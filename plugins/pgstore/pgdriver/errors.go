package pgdriver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

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
		"57P01", "57P02", "57P03", // admin shutdown, crash shutdown, cannot connect now
		"53300", "53400": // too many connections, configuration limit exceeded
		return true
	}
	return false
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
		return pe.Code == "40001" || pe.Code == "40P01"
	}
	return false
}
