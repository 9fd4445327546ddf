package driverrpc

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agenthost/agenthost/abi/driver"
)

// ErrorDomain is the domain of the google.rpc.ErrorInfo detail that names a
// driver sentinel on the wire.
const ErrorDomain = "store.agenthost.dev"

// The wire form of each sentinel: a gRPC code, and the ErrorInfo reason that
// says exactly which sentinel it was.
var sentinels = []struct {
	err    error
	code   codes.Code
	reason string
}{
	{driver.ErrVersionConflict, codes.Aborted, "VERSION_CONFLICT"},
	{driver.ErrNotFound, codes.NotFound, "NOT_FOUND"},
	{driver.ErrInvalidArgument, codes.InvalidArgument, "INVALID_ARGUMENT"},
	{driver.ErrTooLarge, codes.ResourceExhausted, "TOO_LARGE"},
	{driver.ErrUnavailable, codes.Unavailable, "UNAVAILABLE"},
	{driver.ErrClosed, codes.FailedPrecondition, "CLOSED"},
	{driver.ErrFenced, codes.FailedPrecondition, "FENCED"},
}

// ToStatus turns an error a driver returned into the gRPC status error that
// carries it: the sentinel it wraps becomes a code and an ErrorInfo reason,
// its text the status message. Context errors become Canceled and
// DeadlineExceeded; anything else is Internal.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok && !isSentinel(err) {
		return err // already a status
	}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			st := status.New(s.code, err.Error())
			if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: s.reason, Domain: ErrorDomain}); derr == nil {
				st = d
			}
			return st.Err()
		}
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

func isSentinel(err error) bool {
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			return true
		}
	}
	return false
}

// remoteError is an error that crossed the wire: its text is the driver's,
// and it wraps the sentinel the driver reported.
type remoteError struct {
	msg      string
	sentinel error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.sentinel }

// FromStatus turns a gRPC error back into the driver error it carries, so
// that errors.Is(err, driver.ErrX) holds on the host as it did in the
// driver. Transport failures become driver.ErrUnavailable, messages over the
// size limit driver.ErrTooLarge, and a call cut by its context returns the
// context's error.
func FromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.Domain != ErrorDomain {
			continue
		}
		for _, s := range sentinels {
			if s.reason == info.Reason {
				return &remoteError{msg: st.Message(), sentinel: s.err}
			}
		}
	}
	switch st.Code() {
	case codes.Unavailable:
		return &remoteError{msg: driver.ErrUnavailable.Error() + ": " + st.Message(), sentinel: driver.ErrUnavailable}
	case codes.ResourceExhausted:
		return &remoteError{msg: driver.ErrTooLarge.Error() + ": " + st.Message(), sentinel: driver.ErrTooLarge}
	case codes.Unimplemented:
		// A call the driver does not have: a version 2 call to a driver
		// speaking version 1, or a lease call to one without leases.
		return &remoteError{msg: driver.ErrInvalidArgument.Error() + ": " + st.Message(), sentinel: driver.ErrInvalidArgument}
	case codes.Canceled:
		return &remoteError{msg: st.Message(), sentinel: context.Canceled}
	case codes.DeadlineExceeded:
		return &remoteError{msg: st.Message(), sentinel: context.DeadlineExceeded}
	}
	return errors.New("store driver: " + st.Code().String() + ": " + st.Message())
}

// errorFields is the wire form of an error inside a reply (CommitResult):
// ToStatus's code, message and ErrorInfo reason. The message is made valid
// UTF-8 (a proto string must be): an error quoting a bad byte of a batch
// must not make the whole reply fail to encode.
func errorFields(err error) (code int32, msg, reason string) {
	st, _ := status.FromError(ToStatus(err))
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == ErrorDomain {
			reason = info.Reason
		}
	}
	return int32(st.Code()), strings.ToValidUTF8(st.Message(), "\uFFFD"), reason
}

// errorFromFields is the inverse of errorFields, through FromStatus.
func errorFromFields(code int32, msg, reason string) error {
	st := status.New(codes.Code(code), msg)
	if reason != "" {
		if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}); err == nil {
			st = d
		}
	}
	return FromStatus(st.Err())
}
