package storedriver

import (
	"time"

	"github.com/agenthost/agenthost/abi/record"
)

// The Normalize functions return a record in the form in which two copies
// compare equal (reflect.DeepEqual) when they hold the same data after a
// round trip through a driver: times in UTC (the protocol keeps instants,
// not zones), empty slices and maps nil.

// NormalizeThread normalizes a thread header.
func NormalizeThread(x record.Thread) record.Thread {
	x.UpdatedAt = normTime(x.UpdatedAt)
	if len(x.OpenRunIDs) == 0 {
		x.OpenRunIDs = nil
	}
	return x
}

// NormalizeRun normalizes a run.
func NormalizeRun(x record.Run) record.Run {
	x.CreatedAt, x.StartedAt, x.EndedAt = normTime(x.CreatedAt), normTime(x.StartedAt), normTime(x.EndedAt)
	if len(x.InputMessageIDs) == 0 {
		x.InputMessageIDs = nil
	}
	return x
}

// NormalizeMessage normalizes a message.
func NormalizeMessage(x record.Message) record.Message {
	x.CreatedAt = normTime(x.CreatedAt)
	if len(x.ToolCalls) == 0 {
		x.ToolCalls = nil
	}
	if len(x.Metadata) == 0 {
		x.Metadata = nil
	}
	return x
}

// NormalizeIdempotency normalizes an idempotency record.
func NormalizeIdempotency(x record.Idempotency) record.Idempotency {
	x.CreatedAt = normTime(x.CreatedAt)
	return x
}

func normTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC()
}
